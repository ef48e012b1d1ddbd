package recordbatch

import (
	"bytes"
	"testing"
)

// Retain keeps the batch's offset range, producer fields and codec, each
// kept record's offset and timestamp, and stamps a delete horizon once.
func TestRetain(t *testing.T) {
	recs := []Record{
		{Key: []byte("a"), Value: []byte("1"), Timestamp: 1000},
		{Key: []byte("b"), Value: nil, Timestamp: 1005},
		{Key: []byte("c"), Value: []byte("3"), Timestamp: 1010},
	}
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			b, err := Build(BuildOptions{Codec: codec, Idempotent: true, ProducerID: 7, ProducerEpoch: 2, BaseSequence: 40}, recs)
			if err != nil {
				t.Fatal(err)
			}
			SetBaseOffset(b, 100)
			src, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Retain(src.Header, src.Records[1:], 9000)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			h := got.Header
			if h.BaseOffset != 100 || h.LastOffset() != 102 || h.ProducerID != 7 || h.ProducerEpoch != 2 ||
				h.BaseSequence != 40 || h.LastSequence() != 42 || h.Codec() != codec || h.RecordCount != 2 {
				t.Fatalf("header %+v", h)
			}
			if hz, ok := h.DeleteHorizon(); !ok || hz != 9000 {
				t.Fatalf("delete horizon %d %v", hz, ok)
			}
			if h.MaxTimestamp != 1010 {
				t.Fatalf("max timestamp %d", h.MaxTimestamp)
			}
			for i, r := range got.Records {
				w := src.Records[i+1]
				if r.Offset != w.Offset || r.Timestamp != w.Timestamp || !bytes.Equal(r.Key, w.Key) || (r.Value == nil) != (w.Value == nil) {
					t.Fatalf("record %d: %+v, want %+v", i, r, w)
				}
			}
			// A second rewrite keeps the first horizon.
			again, err := Retain(h, got.Records[1:], 99999)
			if err != nil {
				t.Fatal(err)
			}
			h2, _ := Verify(again)
			if hz, _ := h2.DeleteHorizon(); hz != 9000 {
				t.Fatalf("horizon changed to %d", hz)
			}
			// Emptied: header only, no codec, same range and sequences.
			empty, err := Retain(src.Header, nil, -1)
			if err != nil {
				t.Fatal(err)
			}
			e, err := Decode(empty)
			if err != nil {
				t.Fatal(err)
			}
			if len(empty) != HeaderSize || e.Header.RecordCount != 0 || e.Header.LastOffset() != 102 || e.Header.LastSequence() != 42 || e.Header.Codec() != CodecNone {
				t.Fatalf("empty batch %+v (%d bytes)", e.Header, len(empty))
			}
			if _, ok := e.Header.DeleteHorizon(); ok {
				t.Fatal("horizon set without a tombstone")
			}
		})
	}
}
