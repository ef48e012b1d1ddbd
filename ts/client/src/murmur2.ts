// Kafka's default key partitioner: the 32-bit MurmurHash2 variant of the
// Java client (seed 0x9747b28c, little-endian 4-byte blocks), made positive
// by masking the sign bit, modulo the partition count. The Go client
// (client/partitioner.go) does the same, and testdata/partitioner.json
// holds a table both check, so a key lands on the same partition from
// either client, and from Kafka's.

const encoder = new TextEncoder();

/** murmur2 returns the hash Kafka's Utils.murmur2 returns (a signed 32-bit int). */
export function murmur2(data: Uint8Array): number {
  const seed = 0x9747b28c;
  const m = 0x5bd1e995;
  const length = data.length;
  let h = (seed ^ length) >>> 0;
  const n4 = length >>> 2;
  for (let i = 0; i < n4; i++) {
    const j = i * 4;
    let k = data[j]! | (data[j + 1]! << 8) | (data[j + 2]! << 16) | (data[j + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m);
    h ^= k;
  }
  const tail = n4 * 4;
  const rest = length - tail;
  if (rest === 3) h ^= data[tail + 2]! << 16;
  if (rest >= 2) h ^= data[tail + 1]! << 8;
  if (rest >= 1) {
    h ^= data[tail]!;
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/**
 * partitionForKey returns the partition a keyed record goes to among
 * `partitions` partitions, exactly as Kafka's default partitioner and the
 * Go client's PartitionForKey do. A string key is hashed as its UTF-8 bytes.
 */
export function partitionForKey(key: Uint8Array | string, partitions: number): number {
  if (!(partitions > 0)) throw new RangeError(`partitionForKey: ${partitions} partitions`);
  const bytes = typeof key === "string" ? encoder.encode(key) : key;
  return (murmur2(bytes) & 0x7fffffff) % partitions;
}
