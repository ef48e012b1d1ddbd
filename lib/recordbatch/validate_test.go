package recordbatch

import (
	"encoding/binary"
	"errors"
	"testing"
)

// Everything Build writes passes Validate and ValidateProduced, for every
// codec and record shape, and so do the batches real clients wrote.
func TestValidateAcceptsWellFormedBatches(t *testing.T) {
	for _, codec := range allCodecs {
		for _, recs := range [][]Record{sampleRecords(), manyRecords(500)} {
			for _, opts := range []BuildOptions{
				{Codec: codec},
				{Codec: codec, Idempotent: true, ProducerID: 7, ProducerEpoch: 2, BaseSequence: 1 << 30},
				{Codec: codec, Idempotent: true, Transactional: true, ProducerID: 7, ProducerEpoch: 2, BaseSequence: 5},
			} {
				b := mustBuild(t, opts, recs)
				if _, err := Validate(b); err != nil {
					t.Fatalf("%v: Validate: %v", codec, err)
				}
				h, err := ValidateProduced(b)
				if err != nil {
					t.Fatalf("%v: ValidateProduced: %v", codec, err)
				}
				if h.RecordCount != int32(len(recs)) {
					t.Fatalf("%v: header %+v", codec, h)
				}
			}
		}
	}
	for name, hx := range map[string]string{
		"rdkafka none": rdkafkaNone, "rdkafka gzip": rdkafkaGzip, "rdkafka lz4": rdkafkaLZ4,
		"rdkafka snappy": rdkafkaSnappy, "rdkafka zstd": rdkafkaZstd, "java snappy": javaSnappy,
	} {
		if _, err := ValidateProduced(mustHex(t, hx)); err != nil {
			t.Errorf("%s: ValidateProduced: %v", name, err)
		}
	}
	// sarama's test vector decodes but leaves maxTimestamp at 0.
	if _, err := Validate(mustHex(t, sarama)); err != nil {
		t.Errorf("sarama: Validate: %v", err)
	}
	if _, err := ValidateProduced(mustHex(t, sarama)); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("sarama: ValidateProduced: %v, want ErrInvalidRecord (maxTimestamp 0)", err)
	}
}

// Batches that decode but break a rule of the produce path.
func TestValidateProducedRules(t *testing.T) {
	recs := []Record{{Value: []byte("a"), Timestamp: 1000}, {Value: []byte("b"), Timestamp: 3000}, {Value: []byte("c"), Timestamp: 2000}}
	mod := func(opts BuildOptions, edit func(b []byte)) []byte {
		b := mustBuild(t, opts, recs)
		edit(b)
		return fixCRC(b)
	}
	put32 := func(b []byte, at int, v int32) { binary.BigEndian.PutUint32(b[at:], uint32(v)) }
	put64 := func(b []byte, at int, v int64) { binary.BigEndian.PutUint64(b[at:], uint64(v)) }
	for _, tt := range []struct {
		name  string
		batch []byte
	}{
		{"gap after the last record", mod(BuildOptions{}, func(b []byte) { put32(b, offLastOffsetDelta, 5) })},
		{"control batch", mod(BuildOptions{}, func(b []byte) { b[offAttributes+1] |= attrControl })},
		{"transactional without a producer id", mod(BuildOptions{}, func(b []byte) { b[offAttributes+1] |= attrTransactional })},
		{"transactional control batch", mod(BuildOptions{Idempotent: true, Transactional: true, ProducerID: 4}, func(b []byte) {
			b[offAttributes+1] |= attrControl
		})},
		{"log-append time", mustBuild(t, BuildOptions{LogAppendTime: true}, recs)},
		{"delete horizon", mod(BuildOptions{}, func(b []byte) { b[offAttributes+1] |= attrDeleteHorizon })},
		{"maxTimestamp too large", mod(BuildOptions{}, func(b []byte) { put64(b, offMaxTimestamp, 3001) })},
		{"maxTimestamp too small", mod(BuildOptions{}, func(b []byte) { put64(b, offMaxTimestamp, 2000) })},
		{"negative record timestamp", mod(BuildOptions{}, func(b []byte) {
			put64(b, offBaseTimestamp, -5000)
			put64(b, offMaxTimestamp, -3000)
		})},
		{"timestamp wraps past int64", mod(BuildOptions{}, func(b []byte) {
			put64(b, offBaseTimestamp, 1<<63-1500)
			put64(b, offMaxTimestamp, 1<<63-1500)
		})},
		{"producer id below -1", mod(BuildOptions{}, func(b []byte) { put64(b, offProducerID, -2) })},
		{"idempotent without sequence", mod(BuildOptions{Idempotent: true, ProducerID: 4}, func(b []byte) {
			put32(b, offBaseSequence, -1)
		})},
		{"idempotent without epoch", mod(BuildOptions{Idempotent: true, ProducerID: 4}, func(b []byte) {
			binary.BigEndian.PutUint16(b[offProducerEpoch:], 0xffff)
		})},
		{"no records", func() []byte {
			b := craft(CodecNone, 0, 0, nil)
			return b
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Validate(tt.batch); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Validate: %v", err)
			}
			_, err := ValidateProduced(tt.batch)
			if !errors.Is(err, ErrInvalidRecord) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ValidateProduced: %v, want ErrInvalidRecord", err)
			}
			t.Log(err)
		})
	}
}

// Validating an uncompressed batch allocates nothing, whatever its size:
// the produce path runs it on every batch.
func TestValidateUncompressedDoesNotAllocate(t *testing.T) {
	b := mustBuild(t, BuildOptions{}, manyRecords(1000))
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := ValidateProduced(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per validation, want 0", allocs)
	}
}
