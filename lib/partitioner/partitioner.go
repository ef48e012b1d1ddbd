// Package partitioner maps record keys to partitions exactly as Kafka's
// default partitioner does. The Go client, the gateway's JSON produce path
// and the load generator all use it, and testdata/partitioner.json at the
// repository root holds the vectors the TypeScript client checks too.
package partitioner

// ForKey returns the partition a keyed record goes to among n
// partitions, exactly as Kafka's default partitioner does: murmur2 of the
// key bytes, made positive by masking the sign bit, modulo n. Using the same
// mapping means a topic moved between Kafka and Strata keeps per-key order
// and co-partitioning. n must be positive.
func ForKey(key []byte, n int32) int32 {
	return int32(uint32(Murmur2(key))&0x7fffffff) % n
}

// Murmur2 is the 32-bit MurmurHash2 variant Kafka's clients use (seed
// 0x9747b28c, little-endian 4-byte blocks). It returns the Java int the
// Kafka implementation returns, so test vectors compare directly.
func Murmur2(data []byte) int32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	length := len(data)
	h := uint32(seed) ^ uint32(length)
	n4 := length / 4
	for i := 0; i < n4; i++ {
		j := i * 4
		k := uint32(data[j]) | uint32(data[j+1])<<8 | uint32(data[j+2])<<16 | uint32(data[j+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n4*4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}
