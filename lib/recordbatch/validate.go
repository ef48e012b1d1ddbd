package recordbatch

import (
	"errors"
	"fmt"
	"sync"
)

// ErrInvalidRecord means a batch decodes but is not one a producer may
// send (Kafka's InvalidRecordException): see ValidateProduced.
var ErrInvalidRecord = errors.New("recordbatch: invalid record batch from a producer")

// ErrKeyRequired means a record has no key (a null key) where its topic
// requires one: a compacted topic (Kafka's INVALID_RECORD, "Compacted
// topic cannot accept message without key"). It wraps ErrInvalidRecord.
var ErrKeyRequired = fmt.Errorf("%w: a record without a key in a compacted topic", ErrInvalidRecord)

// ErrInvalidTimestamp means a record's timestamp is outside the range its
// topic accepts around the broker's clock (Kafka's INVALID_TIMESTAMP,
// message.timestamp.before.max.ms and message.timestamp.after.max.ms), or
// a producer stamped its batch with log-append time.
var ErrInvalidTimestamp = errors.New("recordbatch: record timestamp out of range")

// TopicRules are the rules of a record's topic that ValidateProducedFor
// checks on every record, beyond ValidateProduced's: Kafka's
// LogValidator.validateKey and validateTimestamp. The zero value checks
// nothing more.
type TopicRules struct {
	// RequireKeys refuses a record whose key is null (an empty key is a
	// key), as a compacted topic does (ErrKeyRequired).
	RequireKeys bool
	// CheckTimestamps refuses a record whose timestamp is more than
	// BeforeMaxMs before NowMs or more than AfterMaxMs after it
	// (ErrInvalidTimestamp): a topic with message.timestamp.type
	// CreateTime. Bounds of math.MaxInt64 never refuse.
	CheckTimestamps         bool
	NowMs                   int64
	BeforeMaxMs, AfterMaxMs int64
}

// check applies the rules to record i of a produced batch, whose timestamp
// ValidateProduced already holds to be at least 0.
func (t *TopicRules) check(i int, r Record) error {
	if t.RequireKeys && r.Key == nil {
		return fmt.Errorf("%w: record %d", ErrKeyRequired, i)
	}
	if t.CheckTimestamps {
		// As Kafka's recordHasInvalidTimestamp: both sides are real times
		// (not negative), so the difference cannot overflow.
		diff := t.NowMs - r.Timestamp
		if diff > t.BeforeMaxMs || -diff > t.AfterMaxMs {
			return fmt.Errorf("%w: record %d has timestamp %d; the topic accepts %d ms before and %d ms after the broker's time %d",
				ErrInvalidTimestamp, i, r.Timestamp, t.BeforeMaxMs, t.AfterMaxMs, t.NowMs)
		}
	}
	return nil
}

// Validate checks the one batch that b holds exactly, as deeply as Decode
// does: header, CRC, length, codec, decompression (within
// MaxDecompressedSize), and every record (lengths, varints, header keys,
// count, offset deltas in order and in range). It accepts exactly the
// batches Decode accepts (FuzzDecode holds it to that) but builds no
// records: an uncompressed batch is checked without allocating, and a
// compressed one is inflated into a pooled buffer that is reused. Errors
// wrap the same sentinels as Decode's.
func Validate(b []byte) (Header, error) {
	h, _, err := validate(b, false, nil)
	return h, err
}

// ValidateProduced is Validate plus the rules for a batch a producer sends,
// which the leader checks before anything is appended (the checks of
// Kafka's LogValidator for appends from clients). Beyond being decodable,
// the batch must
//
//   - hold at least one record, with lastOffsetDelta = recordCount - 1, so
//     its offset deltas are exactly 0, 1, …, recordCount-1 and the offsets
//     the leader assigns are the records';
//   - not be a control batch (only the leader writes markers), stamped
//     with log-append time (the broker sets that, not the producer) or
//     carry a compaction delete horizon;
//   - when transactional, have a producer id (≥ 0): a transaction belongs
//     to an idempotent producer, and the leader checks with the
//     transaction coordinator that the partition is in it before the
//     first batch of each transaction (KIP-890 part 1; not here, since
//     that needs the coordinator);
//   - have record timestamps that are real times (not negative, no int64
//     wrap-around of baseTimestamp + delta) and a maxTimestamp equal to the
//     largest of them, because the time index and retention trust it;
//   - when it has a producer id (≥ 0), have a producer epoch and a base
//     sequence ≥ 0.
//
// A rule broken wraps ErrInvalidRecord (the log-append time also
// ErrInvalidTimestamp); a batch that does not decode wraps the sentinel
// Decode would return.
func ValidateProduced(b []byte) (Header, error) {
	return ValidateProducedFor(b, TopicRules{})
}

// ValidateProducedFor is ValidateProduced with the rules of the batch's
// topic checked on every record too (see TopicRules).
func ValidateProducedFor(b []byte, rules TopicRules) (Header, error) {
	var r *TopicRules
	if rules != (TopicRules{}) {
		r = &rules
	}
	h, maxTS, err := validate(b, true, r)
	if err != nil {
		return Header{}, err
	}
	invalid := func(format string, args ...any) (Header, error) {
		return Header{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRecord}, args...)...)
	}
	switch {
	case h.RecordCount == 0:
		return invalid("no records")
	case int64(h.LastOffsetDelta) != int64(h.RecordCount)-1:
		return invalid("lastOffsetDelta %d with %d records (must be the count - 1)", h.LastOffsetDelta, h.RecordCount)
	case h.Control():
		return invalid("control batch (only the broker writes them)")
	case h.Transactional() && h.ProducerID < 0:
		return invalid("transactional batch without a producer id")
	case h.LogAppendTime():
		// Kafka's LogValidator answers INVALID_TIMESTAMP: "Producer
		// should not set timestamp type to LogAppendTime".
		return Header{}, fmt.Errorf("%w (%w): log-append time set by the producer", ErrInvalidRecord, ErrInvalidTimestamp)
	case h.Attributes&attrDeleteHorizon != 0:
		return invalid("delete horizon set by the producer")
	case h.MaxTimestamp != maxTS:
		return invalid("maxTimestamp %d, largest record timestamp %d", h.MaxTimestamp, maxTS)
	case h.ProducerID < -1:
		return invalid("producerId %d", h.ProducerID)
	case h.ProducerID >= 0 && (h.ProducerEpoch < 0 || h.BaseSequence < 0):
		return invalid("producerId %d with epoch %d and base sequence %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
	return h, nil
}

// inflated holds buffers for the records section of compressed batches
// being validated. Buffers above maxScratch go to the garbage collector, so
// one huge batch does not pin its memory.
var inflated = sync.Pool{New: func() any { return new([]byte) }}

// validate is Validate; with produced set it also checks record timestamps
// (ValidateProduced) and rules, when not nil, on every record, and returns
// the largest timestamp (-1 without records).
func validate(b []byte, produced bool, rules *TopicRules) (Header, int64, error) {
	h, err := Verify(b)
	if err != nil {
		return Header{}, -1, err
	}
	if len(b) != h.Size() {
		return Header{}, -1, fmt.Errorf("%w: batchLength says %d bytes, have %d", ErrBadLength, h.Size(), len(b))
	}
	codec := h.Codec()
	if !validCodec(codec) {
		return Header{}, -1, fmt.Errorf("%w: %v", ErrCodec, codec)
	}
	section := b[HeaderSize:]
	if codec != CodecNone {
		p := inflated.Get().(*[]byte)
		defer inflated.Put(p)
		section, err = decompressInto(*p, codec, section)
		if err != nil {
			return Header{}, -1, err
		}
		if cap(section) > cap(*p) && cap(section) <= maxScratch {
			*p = section[:0] // keep the grown buffer for the next batch
		}
	}
	maxTS, err := walkRecords(h, section, nil, produced, rules)
	if err != nil {
		return Header{}, -1, err
	}
	return h, maxTS, nil
}
