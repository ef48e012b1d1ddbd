package client

import "time"

// Record is one record as produced and as consumed.
type Record struct {
	// Topic to produce to; set on consumed records.
	Topic string
	// TopicID is, on consumed records, the id of the topic the consumer's
	// metadata named when the record was read (a topic deleted and
	// created again under the same name has a new id); empty when the
	// consumer did not know it. Ignored by the producer.
	TopicID string
	// Partition the record went to (set by the producer on success) or came
	// from. Read by the producer only with ManualPartitioning.
	Partition int32
	// Key; nil means no key. Keyed records go to PartitionForKey(key, n).
	Key []byte
	// Value; nil means null (a tombstone on compacted topics).
	Value []byte
	// Headers, in order; keys may repeat.
	Headers []Header
	// Timestamp; the zero time means "now" when producing. On success it
	// is replaced by the log append time when the topic uses it.
	Timestamp time.Time
	// Offset in the partition, set on success (-1 with AcksNone) and on
	// consumed records.
	Offset int64
	// LeaderEpoch of the batch the record came from; consumed records only.
	LeaderEpoch int32
	// MemberEpoch is, on records a GroupConsumer's Poll returned, the
	// member epoch the consumer had when it returned them (0 elsewhere).
	// CommitRecords sends it, and a commit of records read under an earlier
	// assignment of their partition is refused (see GroupConsumer).
	MemberEpoch int32
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// size estimates the encoded size of the record in a batch: what
// MaxBatchBytes counts.
func (r *Record) size() int {
	n := 21 + len(r.Key) + len(r.Value) // length, attributes, deltas, lengths
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}
