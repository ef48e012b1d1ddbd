// A zstd encoder (RFC 8878) small enough to ship to browsers: one frame,
// single segment (the window is the content), 128 KiB blocks of raw
// literals and LZ77 sequences coded with the format's predefined FSE
// tables, a block stored as is when that is not smaller. It compresses
// records about as well as LZ4 does, which is what a producer choosing
// zstd for its decoders' sake needs; any zstd decoder reads it (the Go
// codec, librdkafka, Java, fzstd). Node's own zstd (node:zlib, from Node
// 22.15) is used instead where the runtime has it (platform.zstd).
// Decoding is fzstd's. No npm package fits: the encoders there are native
// (Node only) or WebAssembly builds of 250 KiB to 2.6 MiB that load
// asynchronously.

import { matchLength, newMatchTable, read32, hash4 } from "./match.js";

const MAGIC = [0x28, 0xb5, 0x2f, 0xfd];
const BLOCK = 128 << 10;
const MIN_MATCH = 4;
/** Largest match length a sequence codes (ML code 52: 65539 + 2^16 - 1). */
const MAX_MATCH = 131074;

// Baselines and extra bits of the literal-length and match-length codes (RFC 8878, 3.1.1.3.2.1.1).
const LL_BASE = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
const LL_BITS = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const ML_BASE = [
  3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051, 4099, 8195,
  16387, 32771, 65539,
];
const ML_BITS = [
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
];

// The predefined distributions (RFC 8878, 3.1.1.3.2.2), -1 meaning "less than 1".
const LL_NORM = [4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1];
const ML_NORM = [
  1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1,
];
const OF_NORM = [1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1];

/** An FSE encoding table (FSE_buildCTable's, for one distribution). */
interface FseTable {
  log: number;
  /** State values (tableSize + position), grouped by symbol. */
  states: Uint16Array;
  deltaNbBits: Int32Array;
  deltaFindState: Int32Array;
}

function highbit(v: number): number {
  return 31 - Math.clz32(v);
}

/** buildTable spreads the symbols as the decoder does and derives each symbol's transform. */
function buildTable(norm: number[], log: number): FseTable {
  const size = 1 << log;
  const mask = size - 1;
  const step = (size >> 1) + (size >> 3) + 3;
  const symbols = new Uint8Array(size);
  const cumul = new Int32Array(norm.length + 1);
  let high = size - 1;
  for (let s = 0; s < norm.length; s++) {
    if (norm[s] === -1) {
      cumul[s + 1] = cumul[s]! + 1;
      symbols[high--] = s;
    } else cumul[s + 1] = cumul[s]! + norm[s]!;
  }
  let pos = 0;
  for (let s = 0; s < norm.length; s++) {
    for (let k = 0; k < norm[s]!; k++) {
      symbols[pos] = s;
      do pos = (pos + step) & mask;
      while (pos > high);
    }
  }
  const states = new Uint16Array(size);
  const next = cumul.slice();
  for (let u = 0; u < size; u++) states[next[symbols[u]!]!++] = size + u;
  const deltaNbBits = new Int32Array(norm.length);
  const deltaFindState = new Int32Array(norm.length);
  let total = 0;
  for (let s = 0; s < norm.length; s++) {
    const c = norm[s]!;
    if (c === -1 || c === 1) {
      deltaNbBits[s] = (log << 16) - size;
      deltaFindState[s] = total - 1;
      total++;
    } else if (c > 1) {
      const maxBitsOut = log - highbit(c - 1);
      deltaNbBits[s] = (maxBitsOut << 16) - (c << maxBitsOut);
      deltaFindState[s] = total - c;
      total += c;
    }
  }
  return { log, states, deltaNbBits, deltaFindState };
}

let tables: { ll: FseTable; ml: FseTable; of: FseTable } | undefined;

function predefined(): { ll: FseTable; ml: FseTable; of: FseTable } {
  tables ??= { ll: buildTable(LL_NORM, 6), ml: buildTable(ML_NORM, 6), of: buildTable(OF_NORM, 5) };
  return tables;
}

/** Bits written least significant first, as zstd's bitstreams are (read back from the end). */
class BitWriter {
  private bytes: number[] = [];
  private acc = 0;
  private n = 0;
  add(v: number, bits: number): void {
    while (bits > 16) {
      this.add16(v & 0xffff, 16);
      v = Math.floor(v / 65536);
      bits -= 16;
    }
    if (bits > 0) this.add16(v & ((1 << bits) - 1), bits);
  }
  private add16(v: number, bits: number): void {
    this.acc |= v << this.n;
    this.n += bits;
    while (this.n >= 8) {
      this.bytes.push(this.acc & 0xff);
      this.acc >>>= 8;
      this.n -= 8;
    }
  }
  /** close adds the end mark (a 1 bit) and returns the bytes. */
  close(): number[] {
    this.add16(1, 1);
    if (this.n > 0) this.bytes.push(this.acc & 0xff);
    return this.bytes;
  }
}

function codeOf(base: number[], v: number): number {
  let c = base.length - 1;
  while (base[c]! > v) c--;
  return c;
}

interface Seq {
  lit: number;
  ml: number;
  off: number;
}

/** zstdCompress writes data as one zstd frame. */
export function zstdCompress(data: Uint8Array): Uint8Array {
  const out: number[] = [...MAGIC];
  const size = data.length;
  // Single segment: no window descriptor; the content size in the fewest bytes.
  if (size < 256) out.push(0x20, size);
  else if (size < 65536 + 256) out.push(0x60, (size - 256) & 0xff, (size - 256) >>> 8);
  else out.push(0xa0, size & 0xff, (size >>> 8) & 0xff, (size >>> 16) & 0xff, (size >>> 24) & 0xff);
  const table = newMatchTable();
  if (size === 0) out.push(1, 0, 0); // one empty raw block, the last
  for (let start = 0; start < size; start += BLOCK) {
    const end = Math.min(start + BLOCK, size);
    const last = end === size ? 1 : 0;
    const body = compressBlock(data, start, end, table);
    if (body && body.length < end - start) {
      const h = last | (2 << 1) | (body.length << 3);
      out.push(h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff);
      for (const b of body) out.push(b);
    } else {
      const h = last | ((end - start) << 3);
      out.push(h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff);
      for (let i = start; i < end; i++) out.push(data[i]!);
    }
  }
  return Uint8Array.from(out);
}

/** compressBlock returns the content of a compressed block for data[start, end), or undefined when it finds nothing to gain. */
function compressBlock(data: Uint8Array, start: number, end: number, table: Int32Array): number[] | undefined {
  const seqs: Seq[] = [];
  const literals: number[] = [];
  let anchor = start;
  let i = start;
  const limit = end - 8;
  while (i < limit) {
    const v = read32(data, i);
    const h = hash4(v);
    const ref = table[h]!;
    table[h] = i;
    if (ref < 0 || read32(data, ref) !== v) {
      i++;
      continue;
    }
    const ml = Math.min(MIN_MATCH + matchLength(data, ref + MIN_MATCH, i + MIN_MATCH, end), MAX_MATCH);
    for (let k = anchor; k < i; k++) literals.push(data[k]!);
    seqs.push({ lit: i - anchor, ml, off: i - ref });
    i += ml;
    anchor = i;
  }
  if (seqs.length === 0) return undefined;
  for (let k = anchor; k < end; k++) literals.push(data[k]!);
  const out: number[] = [];
  // Literals section: raw.
  const n = literals.length;
  if (n < 32) out.push(n << 3);
  else if (n < 4096) {
    const h = 0b0100 | (n << 4);
    out.push(h & 0xff, h >>> 8);
  } else {
    const h = 0b1100 | (n << 4);
    out.push(h & 0xff, (h >>> 8) & 0xff, h >>> 16);
  }
  for (const b of literals) out.push(b);
  // Sequences section: count, modes (all predefined), the bitstream.
  const ns = seqs.length;
  if (ns < 128) out.push(ns);
  else if (ns < 0x7f00) out.push((ns >> 8) + 0x80, ns & 0xff);
  else out.push(0xff, (ns - 0x7f00) & 0xff, (ns - 0x7f00) >>> 8);
  out.push(0);
  for (const b of sequences(seqs)) out.push(b);
  return out;
}

/** sequences codes the sequences backwards, as the decoder reads them forwards from the stream's end. */
function sequences(seqs: Seq[]): number[] {
  const { ll, ml, of } = predefined();
  const w = new BitWriter();
  const n = seqs.length;
  const llc = new Uint8Array(n);
  const mlc = new Uint8Array(n);
  const ofc = new Uint8Array(n);
  for (let k = 0; k < n; k++) {
    const s = seqs[k]!;
    llc[k] = codeOf(LL_BASE, s.lit);
    mlc[k] = codeOf(ML_BASE, s.ml);
    ofc[k] = highbit(s.off + 3);
  }
  const init = (t: FseTable, sym: number): number => {
    const nb = (t.deltaNbBits[sym]! + (1 << 15)) >>> 16;
    const value = (nb << 16) - t.deltaNbBits[sym]!;
    return t.states[(value >> nb) + t.deltaFindState[sym]!]!;
  };
  const encode = (t: FseTable, state: number, sym: number): number => {
    const nb = (state + t.deltaNbBits[sym]!) >>> 16;
    w.add(state, nb);
    return t.states[(state >> nb) + t.deltaFindState[sym]!]!;
  };
  const extras = (k: number) => {
    const s = seqs[k]!;
    w.add(s.lit - LL_BASE[llc[k]!]!, LL_BITS[llc[k]!]!);
    w.add(s.ml - ML_BASE[mlc[k]!]!, ML_BITS[mlc[k]!]!);
    w.add(s.off + 3 - 2 ** ofc[k]!, ofc[k]!);
  };
  let sml = init(ml, mlc[n - 1]!);
  let sof = init(of, ofc[n - 1]!);
  let sll = init(ll, llc[n - 1]!);
  extras(n - 1);
  for (let k = n - 2; k >= 0; k--) {
    sof = encode(of, sof, ofc[k]!);
    sml = encode(ml, sml, mlc[k]!);
    sll = encode(ll, sll, llc[k]!);
    extras(k);
  }
  w.add(sml, ml.log);
  w.add(sof, of.log);
  w.add(sll, ll.log);
  return w.close();
}
