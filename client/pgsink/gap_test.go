package pgsink

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// deletedAhead is a group of 10 records in orders-0 of which a sink
// applied offsets 0 to 2, then a deletion of records moved the log start
// to 6, past the sink's next offset.
func deletedAhead(t *testing.T, db DB) *fakecluster.Cluster {
	t.Helper()
	ctx := ctxT(t)
	fc, _ := fakeGroup(t, 10, -1)
	dead := newSinkT(t, db)
	if _, err := dead.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	if _, err := dead.Apply(ctx, recs("orders", 0, 0, 2, 1), writeEffects("dead", &got)); err != nil {
		t.Fatal(err)
	}
	fc.DeleteRecordsBefore("orders", 0, 6)
	return fc
}

// TestGapFailsByDefault: retention (here a deletion of records) moved the
// log start past the sink's next offset before the records were applied.
// Apply does not skip over them: it fails with a GapError saying which
// offsets are gone and how to go on, and applies nothing.
func TestGapFailsByDefault(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc := deletedAhead(t, db)
	var got []*client.Record
	c := newConsumerT(t, db, fc)
	rs := pollAll(t, ctx, c, 9)
	if rs[0].Offset != 6 {
		t.Fatalf("read from %d; want 6, the new log start", rs[0].Offset)
	}
	_, err := c.Apply(ctx, rs, writeEffects("next", &got))
	var ge *GapError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGap) || ge.Gap != (Gap{TopicPartition: tp0, From: 3, To: 6}) ||
		!strings.Contains(err.Error(), "offsets 3 to 5 (3 records) were deleted") || !strings.Contains(err.Error(), "RecordGapAndContinue") {
		t.Fatalf("Apply past the gap = %v; want a GapError for offsets [3, 6)", err)
	}
	if e := effects(t, db, tp0); len(e) != 3 {
		t.Fatalf("effects %v; want only the 3 applied before the gap", e)
	}
	// It stays failed: the next Poll returns the same records again.
	rs = pollAll(t, ctx, c, 9)
	if _, err := c.Apply(ctx, rs, writeEffects("next", &got)); !errors.Is(err, ErrGap) {
		t.Fatalf("Apply again = %v; want ErrGap", err)
	}
}

// TestGapRecordedAndPassed: under RecordGapAndContinue the gap is kept in
// the partition's row, in the transaction that applies the records after
// it, told to OnGap and listed in the Result; offsets a compacted topic
// leaves out (the log start did not move past them) are no gap.
func TestGapRecordedAndPassed(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc := deletedAhead(t, db)
	var got []*client.Record
	var told []Gap
	c := newConsumerT(t, db, fc, Gaps(RecordGapAndContinue), OnGap(func(g Gap) { told = append(told, g) }))
	res, err := c.Apply(ctx, pollAll(t, ctx, c, 9), writeEffects("next", &got))
	if err != nil || res.Next[tp0] != 10 || len(res.Gaps) != 1 || res.Gaps[0] != (Gap{TopicPartition: tp0, From: 3, To: 6}) {
		t.Fatalf("Apply = %v, next %v, gaps %v; want orders-0 at 10 after the gap [3, 6)", err, res.Next, res.Gaps)
	}
	if len(told) != 1 || told[0] != res.Gaps[0] {
		t.Fatalf("OnGap told %v; want %v", told, res.Gaps)
	}
	var lost, from, to int64
	if err := db.QueryRow(ctx, "SELECT gap_offsets, last_gap_from, last_gap_to FROM strata_sink_offsets WHERE last_gap_at IS NOT NULL").Scan(&lost, &from, &to); err != nil || lost != 3 || from != 3 || to != 6 {
		t.Fatalf("row: gap_offsets %d, last gap [%d, %d) (%v); want 3, [3, 6)", lost, from, to, err)
	}

	// A Sink told the log starts at 0: offsets 10..14 missing between two
	// batches were compacted away, not lost.
	s := newSinkT(t, db, LogStartOffsets(func(client.TopicPartition) (int64, bool) { return 0, true }))
	tp1 := client.TopicPartition{Topic: "orders", Partition: 1}
	if _, err := s.Assign(ctx, 1, []client.TopicPartition{tp1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, recs("orders", 1, 0, 9, 1), writeEffects("s", &got)); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Apply(ctx, recs("orders", 1, 15, 16, 1), writeEffects("s", &got)); err != nil || len(res.Gaps) != 0 || res.Next[tp1] != 17 {
		t.Fatalf("Apply after compacted offsets = %v, gaps %v, next %v; want no gap, orders-1 at 17", err, res.Gaps, res.Next)
	}
}
