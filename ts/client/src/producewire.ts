// The protobuf encoding of the two produce requests (storage.proto's
// ProduceRequest and ProducePartitionsRequest), as the pieces to send in
// order: every field but the record batches written into one small buffer
// of the exact size, and each batch as it is, never copied. The Node
// transport writes the pieces to the HTTP/2 stream one after another
// (producecall.ts). The generic encoder (@bufbuild/protobuf's toBinary)
// writes into a buffer it doubles as it goes, shifts each partition's bytes
// to widen its length prefix and copies the result once more at the end:
// three to four copies of every batch and a few short-lived buffers of the
// request's size per call, a tenth of a producer's CPU on 1 KiB records.
// The pieces joined are the bytes toBinary writes (fields in number order,
// defaults left out), which the tests check.

import type { storage } from "./api.js";
import { uninitialized } from "./util.js";
import { uvarintLen, VarintWriter } from "./varint.js";

/** The fields of a ProducePartition as a request carries them (a message or its init shape). */
interface PartitionIn {
  topic?: string;
  partition?: number;
  leaderEpoch?: number;
  records?: Uint8Array;
}

/** A ProducePartitionsRequest or its init shape. */
export interface ProducePartitionsIn {
  partitions?: PartitionIn[];
  acks?: storage.ProducePartitionsRequest["acks"];
  timeoutMs?: number;
  transactionalId?: string;
}

/** A ProduceRequest or its init shape. */
export interface ProduceIn {
  topic?: string;
  partition?: number;
  acks?: storage.ProduceRequest["acks"];
  timeoutMs?: number;
  leaderEpoch?: number;
  records?: Uint8Array;
  transactionalId?: string;
}

const utf8 = new TextEncoder();
const WIRE_VARINT = 0;
const WIRE_LEN = 2;

/** int32Len is the size of an int32 (or enum) varint: a negative one takes ten bytes, sign-extended to 64 bits. */
function int32Len(v: number): number {
  return v < 0 ? 10 : uvarintLen(v);
}

/**
 * Out adds protobuf's int32 and bytes fields (left out when zero or empty)
 * to the pieces of a request: bytes written into buf, and record batches
 * referred to (batch), each closing the piece of buf before it.
 */
class Out extends VarintWriter {
  readonly pieces: Uint8Array[] = [];
  private cut = 0;
  int32(no: number, v: number): void {
    if (v === 0) return;
    this.uvarint((no << 3) | WIRE_VARINT);
    if (v >= 0) return this.uvarint(v);
    // Two's complement over 64 bits: the low 32 bits, then all ones.
    let lo = v >>> 0;
    for (let i = 0; i < 4; i++) {
      this.buf[this.pos++] = (lo & 0x7f) | 0x80;
      lo >>>= 7;
    }
    this.buf[this.pos++] = lo | 0x70 | 0x80; // bits 28..31 and 32..34
    for (let i = 0; i < 4; i++) this.buf[this.pos++] = 0xff;
    this.buf[this.pos++] = 0x01;
  }
  bytes(no: number, b: Uint8Array): void {
    if (b.length === 0) return;
    this.uvarint((no << 3) | WIRE_LEN);
    this.uvarint(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  /** batch adds a bytes field whose value is sent as it is, not copied into buf. */
  batch(no: number, b: Uint8Array): void {
    if (b.length === 0) return;
    this.uvarint((no << 3) | WIRE_LEN);
    this.uvarint(b.length);
    this.pieces.push(this.buf.subarray(this.cut, this.pos), b);
    this.cut = this.pos;
  }
  /** finish returns the pieces, after checking that buf was filled whole. */
  finish(): Uint8Array[] {
    if (this.pos !== this.buf.length) throw new Error(`producewire: wrote ${this.pos} bytes of ${this.buf.length}`);
    if (this.cut < this.pos) this.pieces.push(this.buf.subarray(this.cut, this.pos));
    return this.pieces;
  }
}

function int32Size(no: number, v: number): number {
  return v === 0 ? 0 : uvarintLen(no << 3) + int32Len(v);
}

function bytesSize(no: number, n: number): number {
  return n === 0 ? 0 : uvarintLen(no << 3) + uvarintLen(n) + n;
}

const EMPTY = new Uint8Array(0);

/** producePartitionsPieces returns the binary encoding of a ProducePartitionsRequest as pieces to send in order (the batches not copied). */
export function producePartitionsPieces(m: ProducePartitionsIn): Uint8Array[] {
  const parts = m.partitions ?? [];
  let batches = 0;
  const topics: Uint8Array[] = new Array(parts.length);
  const sizes: number[] = new Array(parts.length);
  let size = 0;
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    const t = p.topic ? utf8.encode(p.topic) : EMPTY;
    topics[i] = t;
    const n = bytesSize(1, t.length) + int32Size(2, p.partition ?? 0) + int32Size(3, p.leaderEpoch ?? 0) + bytesSize(4, p.records?.length ?? 0);
    sizes[i] = n;
    size += 1 + uvarintLen(n) + n;
    batches += p.records?.length ?? 0;
  }
  const txn = m.transactionalId ? utf8.encode(m.transactionalId) : EMPTY;
  size += int32Size(2, m.acks ?? 0) + int32Size(3, m.timeoutMs ?? 0) + bytesSize(4, txn.length);
  const w = new Out(uninitialized(size - batches)); // written whole, as finish checks
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    w.uvarint((1 << 3) | WIRE_LEN);
    w.uvarint(sizes[i]!);
    w.bytes(1, topics[i]!);
    w.int32(2, p.partition ?? 0);
    w.int32(3, p.leaderEpoch ?? 0);
    w.batch(4, p.records ?? EMPTY);
  }
  w.int32(2, m.acks ?? 0);
  w.int32(3, m.timeoutMs ?? 0);
  w.bytes(4, txn);
  return w.finish();
}

/** producePieces returns the binary encoding of a ProduceRequest as pieces to send in order (the batch not copied). */
export function producePieces(m: ProduceIn): Uint8Array[] {
  const t = m.topic ? utf8.encode(m.topic) : EMPTY;
  const txn = m.transactionalId ? utf8.encode(m.transactionalId) : EMPTY;
  const size =
    bytesSize(1, t.length) +
    int32Size(2, m.partition ?? 0) +
    int32Size(3, m.acks ?? 0) +
    int32Size(4, m.timeoutMs ?? 0) +
    int32Size(5, m.leaderEpoch ?? 0) +
    bytesSize(6, m.records?.length ?? 0) +
    bytesSize(7, txn.length);
  const w = new Out(uninitialized(size - (m.records?.length ?? 0))); // written whole, as finish checks
  w.bytes(1, t);
  w.int32(2, m.partition ?? 0);
  w.int32(3, m.acks ?? 0);
  w.int32(4, m.timeoutMs ?? 0);
  w.int32(5, m.leaderEpoch ?? 0);
  w.batch(6, m.records ?? EMPTY);
  w.bytes(7, txn);
  return w.finish();
}
