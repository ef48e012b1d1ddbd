package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
)

// TestOffsetForTimestamp uploads two segments whose batch timestamps go up
// and down, and checks the tier's answer for many times against a scan of
// every batch: the first batch, in offset order, whose MaxTimestamp is at
// or after the time.
func TestOffsetForTimestamp(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const t0 = 1_700_000_000_000
	type batchInfo struct {
		base, maxTS int64
		epoch       int32
	}
	var all []batchInfo
	build := func(base int64, n int, epoch int32) []byte {
		var out []byte
		for i := range n {
			off := base + int64(3*i)
			ts := t0 + (off*37)%1001 + off/3 // not monotonic, rising overall
			var recs []recordbatch.Record
			for j := range 3 {
				recs = append(recs, recordbatch.Record{Value: fmt.Appendf(nil, "%d-%d-%0700d", off, j, 0), Timestamp: ts - int64(2-j)})
			}
			b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
			if err != nil {
				t.Fatal(err)
			}
			recordbatch.SetBaseOffset(b, off)
			recordbatch.SetPartitionLeaderEpoch(b, epoch)
			out = append(out, b...)
			all = append(all, batchInfo{off, ts, epoch})
		}
		return out
	}
	seg1 := build(0, 300, 1) // several index entries
	seg2 := build(900, 50, 2)
	for _, s := range []struct {
		base int64
		b    []byte
		e    int32
	}{{0, seg1, 1}, {900, seg2, 2}} {
		if _, err := f.up.Upload(ctx, header(s.base, s.b, s.e), bytes.NewReader(s.b)); err != nil {
			t.Fatal(err)
		}
	}
	for ts := int64(t0 - 5); ts < t0+1400; ts += 3 {
		want := batchInfo{-1, -1, -1}
		for _, b := range all {
			if b.maxTS >= ts {
				want = b
				break
			}
		}
		got, err := f.rd.OffsetForTimestamp(ctx, testPart, ts)
		if err != nil {
			t.Fatalf("ts %d: %v", ts, err)
		}
		if got.Offset != want.base || got.Timestamp != want.maxTS || got.LeaderEpoch != want.epoch {
			t.Fatalf("ts %d: got offset %d (ts %d, epoch %d), want %d (ts %d, epoch %d)",
				ts, got.Offset, got.Timestamp, got.LeaderEpoch, want.base, want.maxTS, want.epoch)
		}
		if got.LogStart != 0 || got.TieredEnd != 1050 {
			t.Fatalf("ts %d: tiered range [%d, %d), want [0, 1050)", ts, got.LogStart, got.TieredEnd)
		}
	}

	// The time index leads a cold lookup to a block or two of the object.
	cold := reader.New(reader.Config{Store: f.store, BlockSize: 64 << 10})
	if got, err := cold.OffsetForTimestamp(ctx, testPart, t0+600); err != nil || got.Offset < 0 {
		t.Fatalf("cold lookup: %+v %v", got, err)
	}
	if st := cold.Stats(); st.FetchedBytes > 3*64<<10 || st.FetchedBytes >= int64(len(seg1)) {
		t.Fatalf("a lookup fetched %d bytes of a %d-byte object", st.FetchedBytes, len(seg1))
	}
}
