package partlog

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// Segments lists every segment with its published size and max
// timestamp, and OpenSegment reads a sealed one's bytes: the batches the
// log holds between its base offset and the next segment's.
func TestSegmentsAndOpenSegment(t *testing.T) {
	b := makeBatch(t, 3, 1000, 100)
	l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: int64(2 * len(b)), IndexIntervalBytes: 1})
	defer l.Close()
	for i := range 5 {
		mustAppend(t, l, makeBatch(t, 3, 1000+int64(10*i), 100), 1)
	}
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	var total int64
	for i, s := range segs {
		total += s.Size
		if i > 0 && s.BaseOffset <= segs[i-1].BaseOffset {
			t.Fatalf("segments out of order: %+v", segs)
		}
	}
	if total != l.Stats().Bytes {
		t.Fatalf("sizes add up to %d, Stats says %d", total, l.Stats().Bytes)
	}
	for i := 0; i+1 < len(segs); i++ {
		s := segs[i]
		r, err := l.OpenSegment(s.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != s.Size || r.Size() != s.Size {
			t.Fatalf("segment %d: read %d bytes, size %d", s.BaseOffset, len(got), s.Size)
		}
		res, err := l.Read(s.BaseOffset, int(s.Size), segs[i+1].BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, res.Batches) {
			t.Fatalf("segment %d: file bytes differ from Read", s.BaseOffset)
		}
		var maxTS int64 = -1
		for it := recordbatch.NewIter(got, true); ; {
			h, _, ok := it.Next()
			if !ok {
				break
			}
			maxTS = max(maxTS, h.MaxTimestamp)
		}
		if s.MaxTimestamp != maxTS {
			t.Fatalf("segment %d: MaxTimestamp %d, batches say %d", s.BaseOffset, s.MaxTimestamp, maxTS)
		}
	}
	if _, err := l.OpenSegment(segs[len(segs)-1].BaseOffset + 1000); err == nil {
		t.Fatal("OpenSegment of a segment that does not exist succeeded")
	}
}

// The index codec round-trips and rejects what is not an index.
func TestIndexCodec(t *testing.T) {
	m := IndexMeta{BaseOffset: 100, NextOffset: 180, LogSize: 9000, MaxTimestamp: 1234}
	offs := []OffsetEntry{{Rel: 0, Pos: 0}, {Rel: 10, Pos: 4100}, {Rel: 50, Pos: 8200}}
	times := []TimeEntry{{Timestamp: 1000, Rel: 10}, {Timestamp: 1200, Rel: 50}}
	om, goff, err := DecodeOffsetIndex(EncodeOffsetIndex(m, offs))
	if err != nil || om != m || len(goff) != 3 || goff[2] != offs[2] {
		t.Fatalf("offset index: %+v %+v %v", om, goff, err)
	}
	tm, gt, err := DecodeTimeIndex(EncodeTimeIndex(m, times))
	if err != nil || tm != m || len(gt) != 2 || gt[1] != times[1] {
		t.Fatalf("time index: %+v %+v %v", tm, gt, err)
	}
	if p := LookupOffset(offs, 49); p != 4100 {
		t.Fatalf("LookupOffset(49) = %d", p)
	}
	if r := LookupTime(times, 1100); r != 10 {
		t.Fatalf("LookupTime(1100) = %d", r)
	}
	bad := EncodeOffsetIndex(m, offs)
	bad[len(bad)-1] ^= 1
	for _, b := range [][]byte{nil, bad, EncodeTimeIndex(m, times), EncodeOffsetIndex(m, []OffsetEntry{{Rel: 5, Pos: 1}, {Rel: 5, Pos: 2}})} {
		if _, _, err := DecodeOffsetIndex(b); !errors.Is(err, ErrIndex) {
			t.Errorf("DecodeOffsetIndex(%x) = %v, want ErrIndex", b, err)
		}
	}
}
