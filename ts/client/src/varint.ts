// Unsigned base-128 varints, the integer encoding Kafka's record format
// (recordbatch.ts) and protobuf (producewire.ts) share: seven bits a byte,
// low bits first, the high bit set on every byte but the last.

/** uvarintLen is the encoded size of u, a non-negative integer (exact below 2^53). */
export function uvarintLen(u: number): number {
  let n = 1;
  while (u >= 0x80) {
    u = Math.floor(u / 0x80);
    n++;
  }
  return n;
}

/** VarintWriter writes into a buffer sized in advance, from pos on. */
export class VarintWriter {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  /** uvarint writes u, a non-negative integer (exact below 2^53). */
  uvarint(u: number): void {
    const b = this.buf;
    while (u >= 0x80) {
      b[this.pos++] = (u & 0x7f) | 0x80;
      u = u >= 0x100000000 ? Math.floor(u / 0x80) : u >>> 7;
    }
    b[this.pos++] = u;
  }
}
