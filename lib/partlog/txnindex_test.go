package partlog

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// DecodeAbortedTxns, which tiering uses to check the index a storage node
// uploads with a segment, reads what AppendAbortedTxns writes and refuses
// what a segment of the given offsets cannot hold.
func TestDecodeAbortedTxns(t *testing.T) {
	good := []AbortedTxn{{ProducerID: 7, FirstOffset: 3, LastOffset: 12, LastStableOffset: 10}, {ProducerID: 8, FirstOffset: 11, LastOffset: 14, LastStableOffset: 15}}
	b := AppendAbortedTxns(nil, good)
	got, err := DecodeAbortedTxns(b, 10, 20)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(good) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, good)
	}
	if got, err := DecodeAbortedTxns(nil, 10, 20); err != nil || len(got) != 0 {
		t.Fatalf("empty index: %+v, %v", got, err)
	}
	badVersion := bytes.Clone(b)
	badVersion[1] = 1
	for _, tc := range []struct {
		name       string
		b          []byte
		base, next int64
	}{
		{"torn entry", b[:len(b)-1], 10, 20},
		{"version", badVersion, 10, 20},
		{"marker below the segment", b, 13, 20},
		{"marker past the segment", b, 10, 14},
		{"markers out of order", AppendAbortedTxns(nil, []AbortedTxn{good[1], good[0]}), 10, 20},
		{"first offset after the marker", AppendAbortedTxns(nil, []AbortedTxn{{ProducerID: 1, FirstOffset: 13, LastOffset: 12}}), 10, 20},
		{"negative producer", AppendAbortedTxns(nil, []AbortedTxn{{ProducerID: -1, FirstOffset: 1, LastOffset: 12}}), 10, 20},
	} {
		if _, err := DecodeAbortedTxns(tc.b, tc.base, tc.next); !errors.Is(err, ErrTxnIndex) {
			t.Errorf("%s: %v, want ErrTxnIndex", tc.name, err)
		}
	}
}

// OpenSegment hands a sealed segment's transaction index with its bytes:
// the entries of the markers in that segment, decodable against its
// offsets, and nothing for a segment without an abort.
func TestOpenSegmentCarriesTxnIndex(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: 300})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, 1, 0, 0, 2), 0) // producer 1 opens
	mustAppend(t, l, txnBatch(t, 2, 0, 0, 2), 0) // producer 2 opens
	mustMarker(t, l, 1, 0, recordbatch.ControlAbort, 1)
	mustAppend(t, l, makeBatch(t, 3, 0, 200), 0)
	mustMarker(t, l, 2, 0, recordbatch.ControlAbort, 1)
	mustAppend(t, l, makeBatch(t, 3, 0, 200), 0)
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	all, err := l.AbortedTxns(0, l.LogEndOffset())
	if err != nil || len(all) != 2 {
		t.Fatalf("aborted %+v, %v; want two", all, err)
	}
	// Each segment's index decodes against its offsets (so holds only its
	// own markers), and together they are the log's.
	var seen []AbortedTxn
	for i := 0; i+1 < len(segs); i++ {
		base, next := segs[i].BaseOffset, segs[i+1].BaseOffset
		r, err := l.OpenSegment(base)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		got, err := DecodeAbortedTxns(r.TxnIndex, base, next)
		if err != nil {
			t.Fatalf("segment %d: %v", base, err)
		}
		seen = append(seen, got...)
	}
	if fmt.Sprint(seen) != fmt.Sprint(all) {
		t.Fatalf("the sealed segments' indexes hold %+v, the log %+v", seen, all)
	}
}
