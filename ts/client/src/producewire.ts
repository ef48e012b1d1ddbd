// The protobuf encoding of the two produce requests (storage.proto's
// ProduceRequest and ProducePartitionsRequest), written straight into one
// buffer of the exact size: each record batch is copied once. The generic
// encoder (@bufbuild/protobuf's toBinary) writes into a buffer it doubles
// as it goes, shifts each partition's bytes to widen its length prefix and
// copies the result once more at the end: three to four copies of every
// batch and a few short-lived buffers of the request's size per call, a
// tenth of a producer's CPU on 1 KiB records. The bytes are those toBinary
// writes (fields in number order, defaults left out), which the tests check.

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

/** Out adds protobuf's int32 and bytes fields (left out when zero or empty). */
class Out extends VarintWriter {
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
}

function int32Size(no: number, v: number): number {
  return v === 0 ? 0 : uvarintLen(no << 3) + int32Len(v);
}

function bytesSize(no: number, n: number): number {
  return n === 0 ? 0 : uvarintLen(no << 3) + uvarintLen(n) + n;
}

const EMPTY = new Uint8Array(0);

/** encodeProducePartitions returns the binary encoding of a ProducePartitionsRequest. */
export function encodeProducePartitions(m: ProducePartitionsIn): Uint8Array {
  const parts = m.partitions ?? [];
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
  }
  const txn = m.transactionalId ? utf8.encode(m.transactionalId) : EMPTY;
  size += int32Size(2, m.acks ?? 0) + int32Size(3, m.timeoutMs ?? 0) + bytesSize(4, txn.length);
  const w = new Out(uninitialized(size)); // written whole, as checked below
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    w.uvarint((1 << 3) | WIRE_LEN);
    w.uvarint(sizes[i]!);
    w.bytes(1, topics[i]!);
    w.int32(2, p.partition ?? 0);
    w.int32(3, p.leaderEpoch ?? 0);
    w.bytes(4, p.records ?? EMPTY);
  }
  w.int32(2, m.acks ?? 0);
  w.int32(3, m.timeoutMs ?? 0);
  w.bytes(4, txn);
  if (w.pos !== size) throw new Error(`producewire: wrote ${w.pos} bytes of ${size}`);
  return w.buf;
}

/** encodeProduce returns the binary encoding of a ProduceRequest. */
export function encodeProduce(m: ProduceIn): Uint8Array {
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
  const w = new Out(uninitialized(size)); // written whole, as checked below
  w.bytes(1, t);
  w.int32(2, m.partition ?? 0);
  w.int32(3, m.acks ?? 0);
  w.int32(4, m.timeoutMs ?? 0);
  w.int32(5, m.leaderEpoch ?? 0);
  w.bytes(6, m.records ?? EMPTY);
  w.bytes(7, txn);
  if (w.pos !== size) throw new Error(`producewire: wrote ${w.pos} bytes of ${size}`);
  return w.buf;
}
