package recordbatch

import (
	"bytes"
	"testing"
)

// Rebuild keeps the source batch's offset range, timestamps and epoch, and
// each kept record's own offset and timestamp.
func TestRebuildKeepsOffsetDeltas(t *testing.T) {
	var recs []Record
	for i := range 5 {
		recs = append(recs, Record{Key: []byte{'k', byte('0' + i)}, Value: []byte{byte(i)}, Timestamp: 1000 + int64(10*i),
			Headers: []RecordHeader{{Key: "h", Value: []byte("v")}}})
	}
	b, err := Build(BuildOptions{Codec: CodecGzip, LogAppendTime: true}, recs)
	if err != nil {
		t.Fatal(err)
	}
	SetBaseOffset(b, 100)
	SetPartitionLeaderEpoch(b, 3)
	src, err := Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	kept := []Record{all[1], all[3]}
	out := Rebuild(src, kept)
	h, err := Verify(out)
	if err != nil {
		t.Fatalf("rebuilt batch: %v", err)
	}
	if h.BaseOffset != 100 || h.LastOffset() != 104 || h.PartitionLeaderEpoch != 3 || h.Codec() != CodecNone ||
		!h.LogAppendTime() || h.BaseTimestamp != src.BaseTimestamp || h.MaxTimestamp != src.MaxTimestamp ||
		h.ProducerID != -1 || h.ProducerEpoch != -1 || h.BaseSequence != -1 || h.RecordCount != 2 {
		t.Fatalf("header = %+v (source %+v)", h, src)
	}
	got, err := Records(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		w := kept[i]
		if r.Offset != w.Offset || r.Timestamp != w.Timestamp || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
			len(r.Headers) != 1 || r.Headers[0].Key != "h" {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
}

// With nothing kept the batch still covers the source's offsets.
func TestRebuildEmpty(t *testing.T) {
	b, err := Build(BuildOptions{}, []Record{{Value: []byte("x"), Timestamp: 5}, {Value: nil, Timestamp: 6}})
	if err != nil {
		t.Fatal(err)
	}
	SetBaseOffset(b, 7)
	src, _ := Verify(b)
	h, err := Verify(Rebuild(src, nil))
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 7 || h.NextOffset() != 9 || h.RecordCount != 0 || h.MaxTimestamp != 6 {
		t.Fatalf("header = %+v", h)
	}
}
