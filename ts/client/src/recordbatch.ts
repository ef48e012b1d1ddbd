// RecordBatch v2 (magic 2) encoding and decoding: the byte layout Kafka
// clients and Strata share, documented in docs/design/record-batch.md and
// implemented for Go in lib/recordbatch. This is the TypeScript twin of that
// package; testdata/recordbatch.json holds vectors both must pass.
//
// Header (big-endian): baseOffset int64 @0, batchLength int32 @8,
// partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17 (CRC-32C of
// bytes 21..end), attributes int16 @21, lastOffsetDelta int32 @23,
// baseTimestamp int64 @27, maxTimestamp int64 @35, producerId int64 @43,
// producerEpoch int16 @51, baseSequence int32 @53, recordCount int32 @57,
// then the records section @61, compressed as one unit when a codec is set.

import { decompress as zstdDecompress } from "fzstd";
import snappy from "snappyjs";
import { lz4Compress, lz4Decompress } from "./codecs/lz4.js";
import { zstdCompress } from "./codecs/zstd.js";
import { crc32c } from "./crc32c.js";
import { CorruptBatchError, UnsupportedCodecError } from "./errors.js";
import { platform } from "./platform.js";
import { uninitialized } from "./util.js";
import { uvarintLen, VarintWriter } from "./varint.js";

/** Size of the fixed batch header. */
export const HEADER_SIZE = 61;
/** Bytes not counted by batchLength (baseOffset and batchLength). */
export const LENGTH_PREFIX_SIZE = 12;
/** Largest records section a batch may inflate to, as the Go codec (64 MiB). */
export const MAX_DECOMPRESSED_SIZE = 64 << 20;

const CRC_START = 21;
const ATTR_CODEC_MASK = 0x07;
const ATTR_TIMESTAMP_TYPE = 0x08;
const ATTR_TRANSACTIONAL = 0x10;
const ATTR_CONTROL = 0x20;

/** Compression codecs by their attribute value. */
export const Codec = { none: 0, gzip: 1, snappy: 2, lz4: 3, zstd: 4 } as const;
/** A codec name. */
export type CodecName = keyof typeof Codec;
const codecNames: CodecName[] = ["none", "gzip", "snappy", "lz4", "zstd"];

/** One record header; a null value is distinct from an empty one. */
export interface RecordHeader {
  key: string;
  value: Uint8Array | null;
}

/** A record to encode. */
export interface RecordInput {
  key: Uint8Array | null;
  value: Uint8Array | null;
  headers: RecordHeader[];
  /** Unix milliseconds. */
  timestamp: number;
}

/** A decoded record; offset = baseOffset + offsetDelta, timestamp = baseTimestamp + delta. */
export interface DecodedRecord extends RecordInput {
  offset: number;
}

/** The fixed header of one batch. Offsets and timestamps are numbers (exact below 2^53). */
export interface BatchHeader {
  baseOffset: number;
  batchLength: number;
  partitionLeaderEpoch: number;
  magic: number;
  crc: number;
  attributes: number;
  lastOffsetDelta: number;
  baseTimestamp: number;
  maxTimestamp: number;
  producerId: bigint;
  producerEpoch: number;
  baseSequence: number;
  recordCount: number;
}

/** Options for a new batch; defaults build an uncompressed, non-idempotent batch. */
export interface BuildOptions {
  codec?: CodecName;
  /** When false (default), producer id, epoch and sequence are -1. */
  idempotent?: boolean;
  producerId?: bigint;
  producerEpoch?: number;
  baseSequence?: number;
  logAppendTime?: boolean;
  /** Sets the transactional attribute (0x10): the batch belongs to a transaction of its producer. Default false. */
  transactional?: boolean;
}

/** codecOf returns the codec name of a header. */
export function codecOf(h: BatchHeader): CodecName {
  return codecNames[h.attributes & ATTR_CODEC_MASK] ?? "none";
}
/** isControl reports a control batch (transaction markers), which carries no application records. */
export function isControl(h: BatchHeader): boolean {
  return (h.attributes & ATTR_CONTROL) !== 0;
}
/** isTransactional reports a batch that belongs to a transaction (data batches and their markers). */
export function isTransactional(h: BatchHeader): boolean {
  return (h.attributes & ATTR_TRANSACTIONAL) !== 0;
}
/** isLogAppendTime reports that the broker's time (maxTimestamp) stands for every record. */
export function isLogAppendTime(h: BatchHeader): boolean {
  return (h.attributes & ATTR_TIMESTAMP_TYPE) !== 0;
}
/** nextOffset is one past the batch's last offset. */
export function nextOffset(h: BatchHeader): number {
  return h.baseOffset + h.lastOffsetDelta + 1;
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

// ---- encoding ----

function zigzag32(v: number): number {
  return ((v << 1) ^ (v >> 31)) >>> 0;
}

function varlongZigzag(v: number): number {
  // zig-zag of a safe integer as a non-negative safe-ish number.
  return v >= 0 ? v * 2 : -v * 2 - 1;
}

/** Writer adds Kafka's nullable bytes (a zig-zag length, -1 for null). */
class Writer extends VarintWriter {
  bytes(v: Uint8Array | null): void {
    if (v === null) {
      this.buf[this.pos++] = 1; // zig-zag(-1)
      return;
    }
    this.uvarint(zigzag32(v.length));
    this.buf.set(v, this.pos);
    this.pos += v.length;
  }
}

interface Sized {
  rec: RecordInput;
  keyBytes: Uint8Array[]; // encoded header keys
  bodyLen: number;
  tsDelta: number;
}

const NO_KEYS: Uint8Array[] = [];

function measure(r: RecordInput, offsetDelta: number, base: number): Sized {
  const tsDelta = r.timestamp - base;
  let n = 1; // attributes
  n += uvarintLen(varlongZigzag(tsDelta));
  n += uvarintLen(zigzag32(offsetDelta));
  n += r.key === null ? 1 : uvarintLen(zigzag32(r.key.length)) + r.key.length;
  n += r.value === null ? 1 : uvarintLen(zigzag32(r.value.length)) + r.value.length;
  n += uvarintLen(zigzag32(r.headers.length));
  const keyBytes: Uint8Array[] = r.headers.length === 0 ? NO_KEYS : [];
  // Indexed, not for-of: an iterator per record is an allocation per record.
  for (let j = 0; j < r.headers.length; j++) {
    const h = r.headers[j]!;
    const k = utf8.encode(h.key);
    keyBytes.push(k);
    n += uvarintLen(zigzag32(k.length)) + k.length;
    n += h.value === null ? 1 : uvarintLen(zigzag32(h.value.length)) + h.value.length;
  }
  return { rec: r, keyBytes, bodyLen: n, tsDelta };
}

function writeRecords(w: Writer, sized: Sized[]): void {
  for (let i = 0; i < sized.length; i++) {
    const s = sized[i]!;
    w.uvarint(zigzag32(s.bodyLen));
    w.buf[w.pos++] = 0;
    w.uvarint(varlongZigzag(s.tsDelta));
    w.uvarint(zigzag32(i));
    w.bytes(s.rec.key);
    w.bytes(s.rec.value);
    w.uvarint(zigzag32(s.rec.headers.length));
    for (let j = 0; j < s.rec.headers.length; j++) {
      w.bytes(s.keyBytes[j]!);
      w.bytes(s.rec.headers[j]!.value);
    }
  }
}

/**
 * buildBatch encodes records into one batch at base offset 0 and leader epoch
 * -1 (the leader stamps both), with offset deltas 0, 1, 2, …; the base
 * timestamp is the first record's and the max timestamp the largest, as the
 * Go codec's Build. The bytes are identical to Go's for codec none.
 */
export async function buildBatch(opts: BuildOptions, records: RecordInput[]): Promise<Uint8Array> {
  if (records.length === 0) throw new RangeError("recordbatch: build: no records");
  const codec = opts.codec ?? "none";
  if (!Object.hasOwn(Codec, codec)) throw new UnsupportedCodecError(String(codec));
  const base = records[0]!.timestamp;
  let maxTS = base;
  let size = 0;
  const sized: Sized[] = new Array(records.length);
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    if (r.timestamp > maxTS) maxTS = r.timestamp;
    const s = measure(r, i, base);
    sized[i] = s;
    size += uvarintLen(zigzag32(s.bodyLen)) + s.bodyLen;
    if (size > MAX_DECOMPRESSED_SIZE) {
      throw new CorruptBatchError("too-large", `build: records section over ${MAX_DECOMPRESSED_SIZE} bytes`);
    }
  }
  let b: Uint8Array;
  if (codec === "none") {
    // Every byte is written: the header below, the records here.
    b = uninitialized(HEADER_SIZE + size);
    const w = new Writer(b);
    w.pos = HEADER_SIZE;
    writeRecords(w, sized);
    if (w.pos !== b.length) throw new Error(`recordbatch: build: wrote ${w.pos} bytes of ${b.length}`);
  } else {
    const body = new Uint8Array(size);
    writeRecords(new Writer(body), sized);
    const z = await compress(codec, body);
    b = new Uint8Array(HEADER_SIZE + z.length);
    b.set(z, HEADER_SIZE);
  }
  let attrs = Codec[codec] & ATTR_CODEC_MASK;
  if (opts.logAppendTime) attrs |= ATTR_TIMESTAMP_TYPE;
  if (opts.transactional) attrs |= ATTR_TRANSACTIONAL;
  const idem = opts.idempotent === true;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  dv.setBigInt64(0, 0n);
  dv.setInt32(8, b.length - LENGTH_PREFIX_SIZE);
  dv.setInt32(12, -1);
  dv.setInt8(16, 2);
  dv.setInt16(21, attrs);
  dv.setInt32(23, records.length - 1);
  dv.setBigInt64(27, BigInt(base));
  dv.setBigInt64(35, BigInt(maxTS));
  dv.setBigInt64(43, idem ? (opts.producerId ?? -1n) : -1n);
  dv.setInt16(51, idem ? (opts.producerEpoch ?? 0) : -1);
  dv.setInt32(53, idem ? (opts.baseSequence ?? 0) : -1);
  dv.setInt32(57, records.length);
  dv.setUint32(17, crc32c(b.subarray(CRC_START)));
  return b;
}

// ---- decoding ----

/** peekSize returns the total size of the batch starting at b[0] from its first 12 bytes. */
export function peekSize(b: Uint8Array): number {
  if (b.length < LENGTH_PREFIX_SIZE) throw new CorruptBatchError("short", `${b.length} bytes, need ${LENGTH_PREFIX_SIZE} for the length prefix`);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const len = dv.getInt32(8);
  if (len < HEADER_SIZE - LENGTH_PREFIX_SIZE) throw new CorruptBatchError("length", `batchLength ${len} is below the header size`);
  return len + LENGTH_PREFIX_SIZE;
}

/** parseHeader reads and checks the header of exactly one batch (length, magic, CRC). */
export function parseHeader(b: Uint8Array): BatchHeader {
  const size = peekSize(b);
  if (b.length < HEADER_SIZE) throw new CorruptBatchError("short", `${b.length} bytes, need ${HEADER_SIZE} for the header`);
  if (b.length < size) throw new CorruptBatchError("short", `batch of ${size} bytes cut at ${b.length}`);
  if (b.length > size) throw new CorruptBatchError("length", `batchLength says ${size} bytes, got ${b.length}`);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const magic = dv.getInt8(16);
  if (magic !== 2) throw new CorruptBatchError("magic", `magic ${magic}, want 2`);
  const crc = dv.getUint32(17);
  const got = crc32c(b.subarray(CRC_START));
  if (got !== crc) throw new CorruptBatchError("crc", `CRC-32C ${hex32(got)} does not match the stored ${hex32(crc)}`);
  const baseOffset = dv.getBigInt64(0);
  if (baseOffset > BigInt(Number.MAX_SAFE_INTEGER) || baseOffset < -1n) {
    throw new CorruptBatchError("corrupt", `baseOffset ${baseOffset} out of range`);
  }
  return {
    baseOffset: Number(baseOffset),
    batchLength: dv.getInt32(8),
    partitionLeaderEpoch: dv.getInt32(12),
    magic,
    crc,
    attributes: dv.getInt16(21),
    lastOffsetDelta: dv.getInt32(23),
    baseTimestamp: Number(dv.getBigInt64(27)),
    maxTimestamp: Number(dv.getBigInt64(35)),
    producerId: dv.getBigInt64(43),
    producerEpoch: dv.getInt16(51),
    baseSequence: dv.getInt32(53),
    recordCount: dv.getInt32(57),
  };
}

function hex32(n: number): string {
  return "0x" + n.toString(16).padStart(8, "0");
}

// Reader reads the varints and byte strings of records. Field names are
// joined into a message only on failure, so the hot path builds no strings.
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array, readonly end: number) {}
  fail(msg: string): never {
    throw new CorruptBatchError("corrupt", msg);
  }
  varint32(field: string, rec: number, what = ""): number {
    let u = 0;
    let shift = 0;
    for (let i = 0; i < 5; i++) {
      if (this.pos >= this.end) this.fail(`record ${rec} ${field}${what}: varint runs past the end`);
      const c = this.buf[this.pos++]!;
      if (i === 4 && c > 0x0f) this.fail(`record ${rec} ${field}${what}: varint overflows 32 bits`);
      u |= (c & 0x7f) << shift;
      if (c < 0x80) return (u >>> 1) ^ -(u & 1);
      shift += 7;
    }
    this.fail(`record ${rec} ${field}${what}: varint longer than 5 bytes`);
  }
  varlong(field: string, rec: number): number {
    let u = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) this.fail(`record ${rec} ${field}: varlong runs past the end`);
      const c = this.buf[this.pos++]!;
      u += (c & 0x7f) * mul;
      if (c < 0x80) {
        if (u > Number.MAX_SAFE_INTEGER) this.fail(`record ${rec} ${field}: varlong beyond 2^53`);
        return u % 2 === 0 ? u / 2 : -(u + 1) / 2;
      }
      mul *= 128;
    }
    this.fail(`record ${rec} ${field}: varlong longer than 10 bytes`);
  }
  /** nullableBytes returns a view of buf (a subarray of a Buffer is a Buffer): no copy, no second wrapper. */
  nullableBytes(field: string, rec: number, limit: number): Uint8Array | null {
    const n = this.varint32(field, rec, " length");
    if (n === -1) return null;
    if (n < -1) this.fail(`record ${rec} ${field} length ${n}`);
    if (this.pos + n > limit) this.fail(`record ${rec} ${field} length ${n} overruns its record`);
    const v = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }
}

/** A decoded batch: its header and records (keys, values and header values point into the batch). */
export interface DecodedBatch {
  header: BatchHeader;
  records: DecodedRecord[];
}

/**
 * decodeBatch verifies and decodes exactly one batch. It throws
 * CorruptBatchError (kind as the Go sentinels) for bad bytes.
 */
export async function decodeBatch(b: Uint8Array): Promise<DecodedBatch> {
  const header = checkBatch(b);
  const records: DecodedRecord[] = new Array(header.recordCount);
  let i = 0;
  const section = await recordsSection(header, b);
  readRecords(header, section, (offset, timestamp, key, value, headers) => {
    records[i++] = { offset, timestamp, key, value, headers: headers.length === 0 ? [] : headers };
  });
  return { header, records };
}

/**
 * A record as readRecords hands it over: key, value and header values are
 * views into the batch (the platform's bytes: Buffers in Node), headers is
 * a shared empty array when the record has none.
 */
export type RecordVisitor = (offset: number, timestamp: number, key: Uint8Array | null, value: Uint8Array | null, headers: RecordHeader[]) => void;

const NO_HEADERS: RecordHeader[] = Object.freeze([]) as unknown as RecordHeader[];

/**
 * checkBatch reads and checks the header of exactly one batch (length,
 * magic, CRC, codec bits, counts) before its records are read.
 * @internal
 */
export function checkBatch(b: Uint8Array): BatchHeader {
  const header = parseHeader(b);
  const codecBits = header.attributes & ATTR_CODEC_MASK;
  if (codecBits > 4) throw new CorruptBatchError("codec", `codec bits ${codecBits} name no codec`);
  if (header.recordCount < 0 || header.lastOffsetDelta < 0) {
    throw new CorruptBatchError("corrupt", `recordCount ${header.recordCount}, lastOffsetDelta ${header.lastOffsetDelta}`);
  }
  return header;
}

/**
 * recordsSection returns a checked batch's records section: a view into b,
 * or its inflated copy when the batch is compressed (the only case that
 * waits).
 * @internal
 */
export function recordsSection(h: BatchHeader, b: Uint8Array): Uint8Array | Promise<Uint8Array> {
  const codecBits = h.attributes & ATTR_CODEC_MASK;
  const section = b.subarray(HEADER_SIZE);
  return codecBits === 0 ? section : decompress(codecNames[codecBits]!, section);
}

/**
 * readRecords walks a records section and calls visit for each record, in
 * order, with no copy of any bytes: the section is wrapped once as the
 * platform's bytes and every key and value is a view of that wrapper. It
 * applies the Go codec's checks and throws CorruptBatchError.
 * @internal
 */
export function readRecords(h: BatchHeader, section: Uint8Array, visit: RecordVisitor): void {
  const n = h.recordCount;
  if (n * 7 > section.length) {
    throw new CorruptBatchError("corrupt", `recordCount ${n} cannot fit in ${section.length} bytes`);
  }
  const r = new Reader(platform().bytes(section), section.length);
  let lastDelta = -1;
  for (let i = 0; i < n; i++) {
    const len = r.varint32("length", i);
    if (len < 0 || r.pos + len > section.length) r.fail(`record ${i} length ${len} overruns the records section`);
    const end = r.pos + len;
    if (len < 1) r.fail(`record ${i} is empty`);
    r.pos++; // attributes
    const tsDelta = r.varlong("timestampDelta", i);
    const offDelta = r.varint32("offsetDelta", i);
    if (offDelta <= lastDelta || offDelta > h.lastOffsetDelta) {
      r.fail(`record ${i} offsetDelta ${offDelta} out of order or beyond lastOffsetDelta ${h.lastOffsetDelta}`);
    }
    lastDelta = offDelta;
    const key = r.nullableBytes("key", i, end);
    const value = r.nullableBytes("value", i, end);
    const hc = r.varint32("headerCount", i);
    if (hc < 0 || hc * 2 > end - r.pos) r.fail(`record ${i} headerCount ${hc}`);
    let headers = NO_HEADERS;
    if (hc > 0) {
      headers = new Array(hc);
      for (let j = 0; j < hc; j++) {
        const k = r.nullableBytes(`header ${j} key`, i, end);
        if (k === null) r.fail(`record ${i} header ${j} key is null`);
        const v = r.nullableBytes(`header ${j} value`, i, end);
        headers[j] = { key: utf8Decoder.decode(k!), value: v };
      }
    }
    if (r.pos !== end) r.fail(`record ${i} has ${end - r.pos} bytes after its fields`);
    visit(h.baseOffset + offDelta, h.baseTimestamp + tsDelta, key, value, headers);
  }
  if (r.pos !== section.length) r.fail(`${section.length - r.pos} bytes after the last record`);
}

const XERIAL_MAGIC = [0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00];

/**
 * compress compresses a records section: gzip with the runtime's zlib,
 * snappy as one raw block (as the Go codec, franz-go and librdkafka write
 * it; Java reads it), lz4 as one frame of independent 64 KiB blocks, zstd
 * as one frame (the runtime's encoder where it has one).
 */
async function compress(codec: CodecName, data: Uint8Array): Promise<Uint8Array> {
  switch (codec) {
    case "gzip":
      return platform().gzip(data);
    case "snappy":
      return snappy.compress(plain(data));
    case "lz4":
      return lz4Compress(data);
    case "zstd":
      return (await platform().zstd?.(data)) ?? zstdCompress(data);
    default:
      throw new UnsupportedCodecError(codec);
  }
}

async function decompress(codec: CodecName, data: Uint8Array): Promise<Uint8Array> {
  try {
    switch (codec) {
      case "gzip":
        return await platform().gunzip(data, MAX_DECOMPRESSED_SIZE);
      case "snappy":
        return snappyDecode(plain(data));
      case "lz4":
        return lz4Decompress(data, MAX_DECOMPRESSED_SIZE);
      case "zstd": {
        const out = zstdDecompress(plain(data));
        if (out.length > MAX_DECOMPRESSED_SIZE) throw new CorruptBatchError("too-large", "zstd section inflates past the limit");
        return out;
      }
      default:
        throw new UnsupportedCodecError(codec);
    }
  } catch (e) {
    if (e instanceof CorruptBatchError || e instanceof UnsupportedCodecError) throw e;
    throw new CorruptBatchError("corrupt", `${codec}: ${e instanceof Error ? e.message : String(e)}`, e);
  }
}

// plain views bytes as a plain Uint8Array (not a Node Buffer), which some
// decoders insist on.
function plain(b: Uint8Array): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

// snappyDecode reads a raw snappy block or the xerial framing the Java
// producer writes (magic, two versions, then length-prefixed raw blocks).
function snappyDecode(data: Uint8Array): Uint8Array {
  const isXerial = data.length >= 16 && XERIAL_MAGIC.every((c, i) => data[i] === c);
  if (!isXerial) return snappy.uncompress(data, MAX_DECOMPRESSED_SIZE);
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const chunks: Uint8Array[] = [];
  let total = 0;
  let pos = 16;
  while (pos < data.length) {
    if (pos + 4 > data.length) throw new CorruptBatchError("corrupt", "snappy: xerial chunk length cut");
    const n = dv.getInt32(pos);
    pos += 4;
    if (n < 0 || pos + n > data.length) throw new CorruptBatchError("corrupt", "snappy: xerial chunk overruns");
    const c = snappy.uncompress(data.subarray(pos, pos + n), MAX_DECOMPRESSED_SIZE - total);
    chunks.push(c);
    total += c.length;
    pos += n;
  }
  const out = new Uint8Array(total);
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}

/** utf8Bytes encodes text as UTF-8. */
export function utf8Bytes(s: string): Uint8Array {
  return utf8.encode(s);
}
