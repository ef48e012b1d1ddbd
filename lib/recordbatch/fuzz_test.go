package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode. The seed corpus in
// testdata/fuzz/FuzzDecode runs with every plain `go test`; explore with
//
//	go test ./recordbatch -run '^$' -fuzz FuzzDecode -fuzztime 60s
//
// Each input is decoded twice: as given, and with batchLength and the CRC
// repaired. Without the repair almost every mutation would stop at the CRC
// check and the record decoder would never be explored.
//
// It asserts that Decode never panics, that every error wraps a package
// sentinel, that whatever decodes survives Build and Decode again
// unchanged, that Validate accepts exactly what Decode accepts and fails
// with the same sentinel, and that ValidateProduced accepts only batches
// that decode.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		if len(b) >= HeaderSize {
			fixed := bytes.Clone(b)
			binary.BigEndian.PutUint32(fixed[offBatchLength:], uint32(len(fixed)-LengthPrefixSize))
			checkDecode(t, fixCRC(fixed))
		}
	})
}

func checkDecode(t *testing.T, b []byte) {
	batch, err := Decode(b)
	if _, verr := Validate(b); sentinelOf(verr) != sentinelOf(err) {
		t.Fatalf("Validate: %v; Decode: %v", verr, err)
	}
	if _, perr := ValidateProduced(b); perr == nil && err != nil {
		t.Fatalf("ValidateProduced accepts what Decode refuses: %v", err)
	} else if perr != nil && !isSentinel(perr) && !errors.Is(perr, ErrInvalidRecord) {
		t.Fatalf("ValidateProduced error wraps no sentinel: %v", perr)
	}
	if err != nil {
		if !isSentinel(err) {
			t.Fatalf("Decode error wraps no sentinel: %v", err)
		}
		return
	}
	h := batch.Header
	if len(batch.Records) != int(h.RecordCount) {
		t.Fatalf("%d records, header says %d", len(batch.Records), h.RecordCount)
	}
	if len(batch.Records) == 0 {
		return // Build refuses empty batches
	}
	opts := BuildOptions{
		Codec:         h.Codec(),
		LogAppendTime: h.LogAppendTime(),
		// Copy the producer fields whatever they are; -1s come back as -1s.
		Idempotent:    true,
		ProducerID:    h.ProducerID,
		ProducerEpoch: h.ProducerEpoch,
		BaseSequence:  h.BaseSequence,
	}
	rebuilt, err := Build(opts, batch.Records)
	if err != nil {
		t.Fatalf("Build of decoded records: %v", err)
	}
	again, err := Decode(rebuilt)
	if err != nil {
		t.Fatalf("Decode of rebuilt batch: %v", err)
	}
	// Build numbers offsets 0..n-1, so offsets are compared apart: the
	// input may have gaps (compaction) and any base offset.
	if err := equalRecords(again.Records, batch.Records, false); err != nil {
		t.Fatalf("rebuilt batch differs: %v", err)
	}
	for i, r := range again.Records {
		if r.Offset != int64(i) {
			t.Fatalf("rebuilt record %d has offset %d", i, r.Offset)
		}
	}
	g := again.Header
	if g.Codec() != h.Codec() || g.LogAppendTime() != h.LogAppendTime() || g.ProducerID != h.ProducerID ||
		g.ProducerEpoch != h.ProducerEpoch || g.BaseSequence != h.BaseSequence {
		t.Fatalf("rebuilt header %+v, from %+v", g, h)
	}
}

var writeFuzzCorpus = flag.Bool("write-fuzz-corpus", false,
	"rewrite the generated seeds in testdata/fuzz/FuzzDecode and exit the test")

// TestWriteFuzzCorpus regenerates the seed corpus when run with
// -write-fuzz-corpus. Seeds: a valid batch per codec, the Kafka vectors,
// and truncated and bit-flipped copies (with and without a repaired CRC).
// Crashers found by fuzzing are kept in the same directory under their
// hash names and are not touched.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeFuzzCorpus {
		t.Skip("run with -write-fuzz-corpus to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{"empty": {}}
	for _, codec := range allCodecs {
		b := mustBuild(t, BuildOptions{Codec: codec}, sampleRecords())
		small := mustBuild(t, BuildOptions{Codec: codec, Idempotent: true, ProducerID: 5, BaseSequence: 9},
			[]Record{{Key: []byte("k"), Value: []byte("v"), Timestamp: 1, Headers: []RecordHeader{{Key: "h", Value: []byte("x")}}}})
		seeds[codec.String()+"-valid"] = b
		seeds[codec.String()+"-small"] = small
		seeds[codec.String()+"-truncated"] = b[:len(b)*2/3]
		seeds[codec.String()+"-header-only"] = b[:HeaderSize]
		flipped := bytes.Clone(small)
		flipped[len(flipped)-len(flipped[HeaderSize:])/2] ^= 0x04
		seeds[codec.String()+"-flipped"] = flipped
		seeds[codec.String()+"-flipped-crc-fixed"] = fixCRC(bytes.Clone(flipped))
	}
	for name, h := range map[string]string{
		"kafka-rdkafka-none": rdkafkaNone, "kafka-rdkafka-gzip": rdkafkaGzip, "kafka-rdkafka-lz4": rdkafkaLZ4,
		"kafka-rdkafka-snappy": rdkafkaSnappy, "kafka-rdkafka-zstd": rdkafkaZstd, "kafka-java-snappy": javaSnappy,
		"kafka-sarama-none": sarama,
	} {
		seeds[name] = mustHex(t, h)
	}
	for name, b := range seeds {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d seeds to %s", len(seeds), dir)
}
