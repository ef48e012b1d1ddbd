// Package batchtest builds record batches that pass their CRC but are
// broken inside ("poison batches"), for tests of every layer that must
// refuse them (the produce path) or survive meeting them (consumers of an
// older log). Each batch carries a correct CRC-32C, so only a validator
// that looks inside the records section notices.
package batchtest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Header field positions used here; the layout is documented in package
// recordbatch.
const (
	offAttributes      = 21
	offLastOffsetDelta = 23
	offMaxTimestamp    = 35
	offRecordCount     = 57
)

// Poison is one batch with a correct CRC and a broken inside.
type Poison struct {
	// Name says what is broken, for subtest names.
	Name string
	// Batch is the whole batch, base offset 0, CRC correct.
	Batch []byte
	// Undecodable is true when recordbatch.Decode refuses the batch, so a
	// consumer cannot read it; false for batches that decode but that a
	// producer may not send (they break a rule of the produce path).
	Undecodable bool
}

// FixCRC recomputes the CRC of the one batch b holds and returns b.
func FixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[offAttributes:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// Records returns n small records ("v0", "v1", ...) stamped now.
func Records(n int) []recordbatch.Record {
	now := time.Now().UnixMilli()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: []byte{'v', byte('0' + i%10)}, Timestamp: now}
	}
	return recs
}

// Build builds a valid batch of records, failing the test on error.
func Build(t testing.TB, opts recordbatch.BuildOptions, recs []recordbatch.Record) []byte {
	t.Helper()
	b, err := recordbatch.Build(opts, recs)
	if err != nil {
		t.Fatalf("batchtest: build: %v", err)
	}
	return b
}

// Poisons returns one batch for every way a batch can be broken inside
// while its CRC stays correct.
func Poisons(t testing.TB) []Poison {
	t.Helper()
	three := func() []byte { return Build(t, recordbatch.BuildOptions{}, Records(3)) }
	with := func(b []byte, edit func([]byte)) []byte {
		edit(b)
		return FixCRC(b)
	}
	put32 := func(b []byte, at int, v int32) { binary.BigEndian.PutUint32(b[at:], uint32(v)) }
	// A record of Records is 9 bytes: length 8, attributes, timestamp
	// delta 0, offset delta, key -1, value length 2, two bytes, 0 headers.
	const rec0 = recordbatch.HeaderSize
	// compressed wraps the records section of an uncompressed batch b,
	// as edited, in gzip, so the breakage sits behind a codec.
	compressed := func(b []byte) []byte {
		var z bytes.Buffer
		z.Write(b[:recordbatch.HeaderSize])
		w := gzip.NewWriter(&z)
		if _, err := w.Write(b[recordbatch.HeaderSize:]); err != nil {
			t.Fatalf("batchtest: gzip: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("batchtest: gzip: %v", err)
		}
		c := z.Bytes()
		binary.BigEndian.PutUint32(c[8:], uint32(len(c)-recordbatch.LengthPrefixSize))
		binary.BigEndian.PutUint16(c[offAttributes:], binary.BigEndian.Uint16(c[offAttributes:])|uint16(recordbatch.CodecGzip))
		return FixCRC(c)
	}
	return []Poison{
		{Name: "record count above the records", Undecodable: true, Batch: with(three(), func(b []byte) {
			put32(b, offRecordCount, 4)
			put32(b, offLastOffsetDelta, 3)
		})},
		{Name: "record count below the records", Undecodable: true, Batch: with(three(), func(b []byte) {
			put32(b, offRecordCount, 2)
			put32(b, offLastOffsetDelta, 1)
		})},
		{Name: "gzip payload that does not inflate", Undecodable: true, Batch: with(
			Build(t, recordbatch.BuildOptions{Codec: recordbatch.CodecGzip}, Records(3)), func(b []byte) {
				for i := recordbatch.HeaderSize + 10; i < len(b)-8; i++ {
					b[i] ^= 0x5a
				}
			})},
		{Name: "compressed records with a wrong count", Undecodable: true, Batch: compressed(with(three(), func(b []byte) {
			put32(b, offRecordCount, 4)
			put32(b, offLastOffsetDelta, 3)
		}))},
		{Name: "record length past the end", Undecodable: true, Batch: with(three(), func(b []byte) {
			b[rec0] = 0x7e // zig-zag 63: longer than what is left
		})},
		{Name: "record length varint overflows", Undecodable: true, Batch: with(three(), func(b []byte) {
			copy(b[rec0:], []byte{0xff, 0xff, 0xff, 0xff, 0xff})
		})},
		{Name: "offset deltas out of order", Undecodable: true, Batch: with(three(), func(b []byte) {
			b[rec0+3] = 2 // record 0 claims delta 1, as does record 1
		})},
		{Name: "lastOffsetDelta disagrees with the record count", Batch: with(three(), func(b []byte) {
			put32(b, offLastOffsetDelta, 7)
		})},
		{Name: "maxTimestamp is not the largest record timestamp", Batch: with(three(), func(b []byte) {
			ts := int64(binary.BigEndian.Uint64(b[offMaxTimestamp:]))
			binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts+int64(time.Hour/time.Millisecond)))
		})},
		{Name: "control batch from a producer", Batch: with(three(), func(b []byte) {
			b[offAttributes+1] |= 0x20
		})},
	}
}
