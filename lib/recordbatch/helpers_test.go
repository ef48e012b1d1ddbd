package recordbatch

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// sentinels are the errors every decoding failure must wrap.
var sentinels = []error{ErrShortBatch, ErrBadMagic, ErrBadLength, ErrCRC, ErrCorrupt, ErrCodec, ErrTooLarge}

// sentinelOf returns the sentinel err wraps, nil for nil, and err itself
// when it wraps none.
func sentinelOf(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// sampleRecords covers the shapes a record can take: keys, null and empty
// keys, tombstones, empty values, headers with null and empty values, and
// timestamps before the first one (negative deltas).
func sampleRecords() []Record {
	return []Record{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: 1_700_000_000_000},
		{Key: nil, Value: []byte("no key"), Timestamp: 1_700_000_000_005},
		{Key: []byte("gone"), Value: nil, Timestamp: 1_699_999_999_000}, // tombstone, earlier time
		{Key: []byte{}, Value: []byte{}, Timestamp: 1_700_000_000_001},
		{
			Key: []byte("h"), Value: []byte("with headers"), Timestamp: 1_700_000_000_002,
			Headers: []RecordHeader{
				{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
				{Key: "null", Value: nil},
				{Key: "empty", Value: []byte{}},
				{Key: "", Value: []byte("empty key")},
			},
		},
		{Key: bytes.Repeat([]byte("K"), 300), Value: bytes.Repeat([]byte("value "), 500), Timestamp: 1_700_000_009_999},
	}
}

// manyRecords returns n records of varied sizes with compressible values.
func manyRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Key:       []byte(fmt.Sprintf("key-%d", i%17)),
			Value:     []byte(strings.Repeat(fmt.Sprintf("payload %d;", i), i%40)),
			Timestamp: 1_700_000_000_000 + int64(i)*3,
		}
		if i%5 == 0 {
			recs[i].Headers = []RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}
		}
		if i%11 == 0 {
			recs[i].Value = nil
		}
	}
	return recs
}

// equalRecords compares records field by field, telling nil from empty,
// and ignores Offset unless withOffsets.
func equalRecords(a, b []Record, withOffsets bool) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d records, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case !equalNullable(x.Key, y.Key):
			return fmt.Errorf("record %d: key %q, want %q (nil %v, %v)", i, x.Key, y.Key, x.Key == nil, y.Key == nil)
		case !equalNullable(x.Value, y.Value):
			return fmt.Errorf("record %d: value %.40q, want %.40q (nil %v, %v)", i, x.Value, y.Value, x.Value == nil, y.Value == nil)
		case x.Timestamp != y.Timestamp:
			return fmt.Errorf("record %d: timestamp %d, want %d", i, x.Timestamp, y.Timestamp)
		case withOffsets && x.Offset != y.Offset:
			return fmt.Errorf("record %d: offset %d, want %d", i, x.Offset, y.Offset)
		case len(x.Headers) != len(y.Headers):
			return fmt.Errorf("record %d: %d headers, want %d", i, len(x.Headers), len(y.Headers))
		}
		for j := range x.Headers {
			if x.Headers[j].Key != y.Headers[j].Key || !equalNullable(x.Headers[j].Value, y.Headers[j].Value) {
				return fmt.Errorf("record %d header %d: %+v, want %+v", i, j, x.Headers[j], y.Headers[j])
			}
		}
	}
	return nil
}

func equalNullable(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// craft wraps a raw records section in a batch header with a correct
// length and CRC, so tests reach the record decoder with bytes Build would
// never write.
func craft(codec Codec, count, lastOffsetDelta int32, section []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(section))
	b = append(b, section...)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-LengthPrefixSize))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 0xFFFFFFFF)
	b[offMagic] = Magic
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(codec))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(lastOffsetDelta))
	binary.BigEndian.PutUint64(b[offProducerID:], ^uint64(0))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], 0xFFFF)
	binary.BigEndian.PutUint32(b[offBaseSequence:], 0xFFFFFFFF)
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(count))
	return fixCRC(b)
}

// fixCRC recomputes the CRC of b in place and returns it.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offCRC:], ComputeCRC(b))
	return b
}

// vi is a zig-zag varint.
func vi(v int64) []byte { return binary.AppendVarint(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// rec frames a record body with its length.
func rec(body ...[]byte) []byte {
	b := cat(body...)
	return cat(vi(int64(len(b))), b)
}

// simpleBody is the body of a record with the given offset delta, key "k",
// value "v" and no headers.
func simpleBody(offsetDelta int64) []byte {
	return cat([]byte{0}, vi(0), vi(offsetDelta), vi(1), []byte("k"), vi(1), []byte("v"), vi(0))
}

func mustBuild(t testing.TB, opts BuildOptions, recs []Record) []byte {
	t.Helper()
	b, err := Build(opts, recs)
	if err != nil {
		t.Fatalf("Build(%v): %v", opts.Codec, err)
	}
	return b
}

// mustHex decodes hex written with spaces, newlines and // comments.
func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "//")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}
