// The match finder the LZ4 and zstd encoders share: a table of the last
// position of each hashed 4-byte sequence (one probe, greedy), the fast
// end of both formats' encoders.

/** Bits of the hash table: 64 K positions (256 KiB). */
const HASH_BITS = 16;

/** newMatchTable returns an empty table (every slot -1: no position). */
export function newMatchTable(): Int32Array {
  return new Int32Array(1 << HASH_BITS).fill(-1);
}

/** read32 reads 4 bytes at i as one little-endian number. */
export function read32(b: Uint8Array, i: number): number {
  return (b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16) | (b[i + 3]! << 24)) >>> 0;
}

/** hash4 maps a 4-byte sequence to a table slot (Knuth's multiplicative hash). */
export function hash4(v: number): number {
  return Math.imul(v, 2654435761) >>> (32 - HASH_BITS);
}

/** matchLength counts equal bytes of b from a and from i, stopping at limit (for i). */
export function matchLength(b: Uint8Array, a: number, i: number, limit: number): number {
  const i0 = i;
  while (i < limit && b[a] === b[i]) {
    a++;
    i++;
  }
  return i - i0;
}
