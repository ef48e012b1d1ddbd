// Package client is the Go client for Strata: producers, consumers and the
// pieces they share.
package client

import "github.com/strata-mq/strata/lib/partitioner"

// PartitionForKey returns the partition a keyed record goes to among n
// partitions, exactly as Kafka's default partitioner does: murmur2 of the
// key bytes, made positive by masking the sign bit, modulo n. Using the same
// mapping means a topic moved between Kafka and Strata keeps per-key order
// and co-partitioning. n must be positive. It is lib/partitioner's ForKey.
func PartitionForKey(key []byte, n int32) int32 { return partitioner.ForKey(key, n) }

// murmur2 is lib/partitioner's Murmur2, named here for the vector tests.
func murmur2(data []byte) int32 { return partitioner.Murmur2(data) }
