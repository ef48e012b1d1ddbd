package recordbatch

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// A compacted topic refuses a record whose key is null, in any codec and
// at any position in the batch; an empty key is a key (Kafka's
// Record.hasKey).
func TestValidateProducedForKeys(t *testing.T) {
	keyed := []Record{{Key: []byte("a"), Value: []byte("1"), Timestamp: 1000}, {Key: []byte{}, Value: []byte("2"), Timestamp: 1000}}
	keyless := []Record{{Key: []byte("a"), Value: []byte("1"), Timestamp: 1000}, {Value: []byte("2"), Timestamp: 1000}}
	rules := TopicRules{RequireKeys: true}
	for _, codec := range allCodecs {
		if _, err := ValidateProducedFor(mustBuild(t, BuildOptions{Codec: codec}, keyed), rules); err != nil {
			t.Errorf("%v: keyed records refused: %v", codec, err)
		}
		_, err := ValidateProducedFor(mustBuild(t, BuildOptions{Codec: codec}, keyless), rules)
		if !errors.Is(err, ErrKeyRequired) || !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%v: a record without a key: %v, want ErrKeyRequired", codec, err)
		}
		if _, err := ValidateProducedFor(mustBuild(t, BuildOptions{Codec: codec}, keyless), TopicRules{}); err != nil {
			t.Errorf("%v: a record without a key refused with no rules: %v", codec, err)
		}
	}
}

// message.timestamp.before.max.ms / after.max.ms: a timestamp exactly at
// a bound is accepted, one millisecond past it refused (Kafka compares
// with >), and Long.MAX_VALUE bounds refuse nothing.
func TestValidateProducedForTimestamps(t *testing.T) {
	const now = 1_700_000_000_000
	at := func(ts int64) []byte {
		return mustBuild(t, BuildOptions{}, []Record{{Value: []byte("v"), Timestamp: ts}})
	}
	for _, tc := range []struct {
		ts, before, after int64
		ok                bool
	}{
		{now, 0, 0, true},
		{now - 1000, 1000, 0, true},
		{now - 1001, 1000, 0, false},
		{now + 1000, 0, 1000, true},
		{now + 1001, 0, 1000, false},
		{0, math.MaxInt64, math.MaxInt64, true},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64, true},
		{math.MaxInt64 - 1, math.MaxInt64, 3600_000, false},
	} {
		rules := TopicRules{CheckTimestamps: true, NowMs: now, BeforeMaxMs: tc.before, AfterMaxMs: tc.after}
		_, err := ValidateProducedFor(at(tc.ts), rules)
		if tc.ok && err != nil {
			t.Errorf("timestamp %d with bounds %d/%d refused: %v", tc.ts, tc.before, tc.after, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidTimestamp) {
			t.Errorf("timestamp %d with bounds %d/%d: %v, want ErrInvalidTimestamp", tc.ts, tc.before, tc.after, err)
		}
	}
}

// SetLogAppendTime sets the attribute bit and maxTimestamp and keeps the
// batch valid (the CRC covers both); records and their own timestamps
// stay as they were.
func TestSetLogAppendTime(t *testing.T) {
	for _, codec := range allCodecs {
		b := mustBuild(t, BuildOptions{Codec: codec, Idempotent: true, ProducerID: 3, ProducerEpoch: 1, BaseSequence: 5}, sampleRecords())
		before, err := Records(b)
		if err != nil {
			t.Fatal(err)
		}
		SetLogAppendTime(b, 1_800_000_000_000)
		h, err := Verify(b)
		if err != nil {
			t.Fatalf("%v: after SetLogAppendTime: %v", codec, err)
		}
		if !h.LogAppendTime() || h.MaxTimestamp != 1_800_000_000_000 || h.Codec() != codec || h.ProducerID != 3 || h.BaseSequence != 5 {
			t.Fatalf("%v: header %+v", codec, h)
		}
		after, err := Records(b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(before, after, sameRecord) {
			t.Fatalf("%v: records changed", codec)
		}
	}
}

// Recompress keeps every header field but the codec and the records as
// they were, from every codec to every codec.
func TestRecompress(t *testing.T) {
	for _, from := range allCodecs {
		src := mustBuild(t, BuildOptions{Codec: from, Idempotent: true, ProducerID: 9, ProducerEpoch: 2, BaseSequence: 40}, manyRecords(200))
		SetBaseOffset(src, 1234)
		SetPartitionLeaderEpoch(src, 7)
		want, err := Records(src)
		if err != nil {
			t.Fatal(err)
		}
		sh, _ := ParseHeader(src)
		for _, to := range allCodecs {
			out, err := Recompress(src, to)
			if err != nil {
				t.Fatalf("%v -> %v: %v", from, to, err)
			}
			h, err := Verify(out)
			if err != nil {
				t.Fatalf("%v -> %v: %v", from, to, err)
			}
			if _, err := ValidateProduced(out); err != nil {
				t.Fatalf("%v -> %v: not a valid produced batch: %v", from, to, err)
			}
			if h.Codec() != to || h.BaseOffset != 1234 || h.PartitionLeaderEpoch != 7 || h.ProducerID != 9 || h.ProducerEpoch != 2 ||
				h.BaseSequence != 40 || h.BaseTimestamp != sh.BaseTimestamp || h.MaxTimestamp != sh.MaxTimestamp ||
				h.LastOffsetDelta != sh.LastOffsetDelta || h.RecordCount != sh.RecordCount || h.Size() != len(out) {
				t.Fatalf("%v -> %v: header %+v from %+v", from, to, h, sh)
			}
			got, err := Records(out)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(want, got, sameRecord) {
				t.Fatalf("%v -> %v: records differ", from, to)
			}
		}
	}
	if _, err := Recompress(mustBuild(t, BuildOptions{}, sampleRecords()), Codec(7)); !errors.Is(err, ErrCodec) {
		t.Fatalf("recompress to codec 7: %v", err)
	}
}

func sameRecord(a, b Record) bool {
	return string(a.Key) == string(b.Key) && (a.Key == nil) == (b.Key == nil) && string(a.Value) == string(b.Value) &&
		(a.Value == nil) == (b.Value == nil) && a.Timestamp == b.Timestamp && a.Offset == b.Offset && len(a.Headers) == len(b.Headers)
}

// A producer's batch marked LogAppendTime is refused as Kafka refuses it,
// with INVALID_TIMESTAMP, and is still an invalid produced batch.
func TestProducerLogAppendTimeIsAnInvalidTimestamp(t *testing.T) {
	_, err := ValidateProduced(mustBuild(t, BuildOptions{LogAppendTime: true}, sampleRecords()))
	if !errors.Is(err, ErrInvalidTimestamp) || !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("a producer's LogAppendTime batch: %v, want ErrInvalidTimestamp and ErrInvalidRecord", err)
	}
}
