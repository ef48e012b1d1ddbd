// Types for snappyjs (a CommonJS package without its own): raw snappy
// blocks, the framing Kafka clients other than Java's write.
declare module "snappyjs" {
  /** uncompress decodes one raw snappy block, refusing an output longer than maxLength. */
  export function uncompress(compressed: Uint8Array, maxLength?: number): Uint8Array;
  /** compress encodes one raw snappy block. */
  export function compress(data: Uint8Array): Uint8Array;
  const snappy: { uncompress: typeof uncompress; compress: typeof compress };
  export default snappy;
}
