// LZ4 as Kafka batches carry it: one LZ4 frame (lz4_Frame_format.md) per
// records section. Writing: independent 64 KiB blocks, no checksums, the
// frame Java's KafkaLZ4BlockOutputStream, librdkafka and the Go codec
// (lib/recordbatch) write; the batch CRC already covers the bytes.
// Reading: any frame of version 01 (linked or independent blocks, block
// and content checksums skipped, a content size ignored), never inflating
// past the caller's limit, every length checked against the input, so
// hostile bytes fail as CorruptBatchError rather than allocating or
// reading out of bounds. Written here rather than taken from npm: the pure
// JavaScript package (lz4js) is unmaintained and its decoder trusts the
// frame's sizes, and the others are native (Node only) or WebAssembly.

import { CorruptBatchError } from "../errors.js";
import { matchLength, newMatchTable, read32, hash4 } from "./match.js";

const MAGIC = 0x184d2204;
/** FLG: version 01, independent blocks, no checksums, no content size. BD: 64 KiB blocks. HC: xxh32(FLG, BD) >> 8. Part of the format. */
const HEADER = new Uint8Array([0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
const BLOCK = 64 << 10;
const MIN_MATCH = 4;
/** The last 5 bytes of a block are literals, and the last match starts 12 bytes before its end (the block format's end conditions). */
const LAST_LITERALS = 5;
const MF_LIMIT = 12;

/** lz4Compress writes data as one LZ4 frame of independent 64 KiB blocks. */
export function lz4Compress(data: Uint8Array): Uint8Array {
  const blocks = Math.ceil(data.length / BLOCK);
  // Worst case: every block stored, plus the header, block sizes and end mark.
  const out = new Uint8Array(HEADER.length + data.length + blocks * 4 + 4 + Math.ceil(data.length / 255) + 16 * blocks);
  out.set(HEADER, 0);
  let o = HEADER.length;
  const table = newMatchTable();
  for (let start = 0; start < data.length; start += BLOCK) {
    const end = Math.min(start + BLOCK, data.length);
    const n = compressBlock(data, start, end, out, o + 4, table);
    if (n > 0 && n < end - start) {
      writeLE32(out, o, n);
      o += 4 + n;
    } else {
      writeLE32(out, o, (end - start) | 0x80000000);
      out.set(data.subarray(start, end), o + 4);
      o += 4 + (end - start);
    }
  }
  writeLE32(out, o, 0);
  return out.subarray(0, o + 4);
}

/** compressBlock encodes src[start, end) as one LZ4 block at dst[d]; it returns the block's size, or 0 when it would not be smaller. */
function compressBlock(src: Uint8Array, start: number, end: number, dst: Uint8Array, d: number, table: Int32Array): number {
  const d0 = d;
  const budget = end - start; // give up once the block is no smaller than the input
  let anchor = start;
  let i = start;
  const mflimit = end - MF_LIMIT;
  const matchlimit = end - LAST_LITERALS;
  while (i < mflimit) {
    const v = read32(src, i);
    const h = hash4(v);
    const ref = table[h]!;
    table[h] = i;
    if (ref < start || i - ref > 65535 || read32(src, ref) !== v) {
      i++;
      continue;
    }
    const len = MIN_MATCH + matchLength(src, ref + MIN_MATCH, i + MIN_MATCH, matchlimit);
    d = sequence(dst, d, src, anchor, i - anchor, i - ref, len - MIN_MATCH);
    if (d - d0 >= budget) return 0;
    i += len;
    anchor = i;
  }
  // The last literals.
  const lit = end - anchor;
  if (d - d0 + 1 + lit + Math.ceil(lit / 255) >= budget) return 0;
  dst[d++] = (lit >= 15 ? 15 : lit) << 4;
  if (lit >= 15) d = extension(dst, d, lit - 15);
  dst.set(src.subarray(anchor, end), d);
  d += lit;
  return d - d0;
}

function sequence(dst: Uint8Array, d: number, src: Uint8Array, litStart: number, lit: number, offset: number, ml: number): number {
  dst[d++] = ((lit >= 15 ? 15 : lit) << 4) | (ml >= 15 ? 15 : ml);
  if (lit >= 15) d = extension(dst, d, lit - 15);
  dst.set(src.subarray(litStart, litStart + lit), d);
  d += lit;
  dst[d++] = offset & 0xff;
  dst[d++] = offset >>> 8;
  if (ml >= 15) d = extension(dst, d, ml - 15);
  return d;
}

function extension(dst: Uint8Array, d: number, n: number): number {
  while (n >= 255) {
    dst[d++] = 255;
    n -= 255;
  }
  dst[d++] = n;
  return d;
}

function writeLE32(b: Uint8Array, o: number, v: number): void {
  b[o] = v & 0xff;
  b[o + 1] = (v >>> 8) & 0xff;
  b[o + 2] = (v >>> 16) & 0xff;
  b[o + 3] = (v >>> 24) & 0xff;
}

function readLE32(b: Uint8Array, o: number): number {
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
}

/** Growable output, refusing to pass limit bytes. */
class Out {
  buf: Uint8Array;
  n = 0;
  constructor(
    hint: number,
    private readonly limit: number,
  ) {
    this.buf = new Uint8Array(Math.max(Math.min(hint, limit), 64));
  }
  room(k: number): void {
    if (this.n + k <= this.buf.length) return;
    if (this.n + k > this.limit) throw new CorruptBatchError("too-large", `lz4 section inflates past ${this.limit} bytes`);
    let size = this.buf.length * 2;
    while (size < this.n + k) size *= 2;
    const b = new Uint8Array(Math.min(size, this.limit));
    b.set(this.buf.subarray(0, this.n));
    this.buf = b;
  }
}

function corrupt(msg: string): never {
  throw new CorruptBatchError("corrupt", `lz4: ${msg}`);
}

/** lz4Decompress reads one or more concatenated LZ4 frames, refusing output past limit bytes. */
export function lz4Decompress(src: Uint8Array, limit: number): Uint8Array {
  const out = new Out(src.length * 4, limit);
  let s = 0;
  do {
    s = frame(src, s, out);
  } while (s < src.length);
  return out.buf.subarray(0, out.n);
}

function frame(src: Uint8Array, s: number, out: Out): number {
  if (s + 7 > src.length) corrupt("frame header cut short");
  if (readLE32(src, s) !== MAGIC) corrupt("not an LZ4 frame (bad magic)");
  const flg = src[s + 4]!;
  if (flg >> 6 !== 1) corrupt(`frame version ${flg >> 6}, want 1`);
  if (flg & 0x01) corrupt("frames with a dictionary id are not supported");
  const blockSum = (flg & 0x10) !== 0;
  const contentSum = (flg & 0x04) !== 0;
  const hasSize = (flg & 0x08) !== 0;
  const bd = (src[s + 5]! >> 4) & 0x07;
  if (bd < 4) corrupt(`block size code ${bd}`);
  const blockMax = 1 << (8 + 2 * bd);
  s += 6 + (hasSize ? 8 : 0) + 1; // FLG, BD, content size, HC
  for (;;) {
    if (s + 4 > src.length) corrupt("block size cut short");
    const word = readLE32(src, s);
    s += 4;
    if (word === 0) break;
    const stored = (word & 0x80000000) !== 0;
    const n = word & 0x7fffffff;
    if (n > blockMax || s + n > src.length) corrupt(`block of ${n} bytes overruns the frame`);
    if (stored) {
      out.room(n);
      out.buf.set(src.subarray(s, s + n), out.n);
      out.n += n;
    } else block(src, s, s + n, out);
    s += n + (blockSum ? 4 : 0);
  }
  if (contentSum) s += 4;
  if (s > src.length) corrupt("checksum cut short");
  return s;
}

function block(src: Uint8Array, s: number, end: number, out: Out): void {
  while (s < end) {
    const token = src[s++]!;
    let lit = token >> 4;
    if (lit === 15) {
      for (;;) {
        if (s >= end) corrupt("literal length runs past the block");
        const b = src[s++]!;
        lit += b;
        if (b !== 255) break;
      }
    }
    if (s + lit > end) corrupt("literals run past the block");
    out.room(lit);
    out.buf.set(src.subarray(s, s + lit), out.n);
    out.n += lit;
    s += lit;
    if (s === end) return; // the last sequence has no match
    if (s + 2 > end) corrupt("match offset cut short");
    const offset = src[s]! | (src[s + 1]! << 8);
    s += 2;
    if (offset === 0 || offset > out.n) corrupt(`match offset ${offset} before the start of the output`);
    let ml = token & 15;
    if (ml === 15) {
      for (;;) {
        if (s >= end) corrupt("match length runs past the block");
        const b = src[s++]!;
        ml += b;
        if (b !== 255) break;
      }
    }
    ml += MIN_MATCH;
    out.room(ml);
    const b = out.buf;
    let o = out.n;
    let from = o - offset;
    if (offset >= ml) b.copyWithin(o, from, from + ml);
    else for (let k = 0; k < ml; k++) b[o++] = b[from++]!;
    out.n += ml;
  }
}
