package replica

import (
	"context"
	"errors"
	"testing"

	"github.com/strata-mq/strata/lib/partlog"
)

// DeleteRecords moves the leader's log start at once; the low watermark
// follows only as each in-sync follower reports its own, which it raises
// from the leader's answer (AdvanceLogStart), never past its own high
// watermark.
func TestDeleteRecordsWaitsForTheInSyncFollowers(t *testing.T) {
	st := State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}}
	leader := leaderOf(t, Config{MinISR: 1, Log: partlog.Config{SegmentBytes: 64}}, Options{}, st)
	follower, err := Open(t.TempDir(), "orders", "id", 0, Config{MinISR: 1, Log: partlog.Config{SegmentBytes: 64}}, Options{NodeID: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Close() })
	follower.ApplyState(st)

	// Ten records, each in its own segment, copied to the follower and committed.
	for range 10 {
		produceLeader(t, leader, 1)
	}
	sync := func() ReplicateResult {
		t.Helper()
		off, last, start := follower.FollowerPosition()
		res, err := leader.Replicate(Fetch{ReplicaID: 2, NodeEpoch: 10, LeaderEpoch: 1, FetchOffset: off, LastFetchedEpoch: last, LogStart: start, MaxBytes: 1 << 20})
		if err != nil || res.Diverging || res.OutOfRange {
			t.Fatalf("replicate at %d: %+v %v", off, res, err)
		}
		if err := follower.AppendFromLeader(context.Background(), 1, res.Records, res.HW); err != nil {
			t.Fatal(err)
		}
		if err := follower.AdvanceLogStart(1, res.LogStart); err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Copy everything (a fetch reads up to a segment's end), then fetch
	// once more so the follower learns the high watermark.
	syncAll := func() {
		t.Helper()
		for follower.Log().LogEndOffset() < leader.Log().LogEndOffset() {
			sync()
		}
		sync()
	}
	syncAll()
	if hw := leader.Log().HighWatermark(); hw != 10 {
		t.Fatalf("high watermark %d, want 10", hw)
	}
	if low, err := leader.LowWatermark(1); err != nil || low != 0 {
		t.Fatalf("low watermark before any delete: %d %v, want 0", low, err)
	}

	// Refused: above the high watermark, below -1, from a follower, at a stale epoch.
	var oor *partlog.OffsetOutOfRangeError
	for _, off := range []int64{11, -2} {
		if _, err := leader.DeleteRecords(1, off); !errors.As(err, &oor) {
			t.Fatalf("delete before %d: %v, want out of range", off, err)
		}
	}
	if _, err := follower.DeleteRecords(1, 3); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("delete on a follower: %v, want ErrNotLeader", err)
	}
	if _, err := leader.DeleteRecords(0, 3); !errors.Is(err, ErrFencedLeaderEpoch) {
		t.Fatalf("delete at epoch 0: %v, want fenced", err)
	}

	start, err := leader.DeleteRecords(1, 4)
	if err != nil || start != 4 || leader.Log().LogStartOffset() != 4 {
		t.Fatalf("delete before 4: start %d %v, log start %d", start, err, leader.Log().LogStartOffset())
	}
	if _, err := leader.Read(-1, 3, 1<<20); !errors.As(err, &oor) {
		t.Fatalf("read at 3 after deleting before 4: %v, want out of range", err)
	}
	// The follower has not fetched since: the low watermark is still its 0.
	if low, _ := leader.LowWatermark(1); low != 0 {
		t.Fatalf("low watermark %d before the follower fetched, want 0", low)
	}
	// Its next fetch carries the new start to it, and the one after reports it.
	if res := sync(); res.LogStart != 4 {
		t.Fatalf("the leader answered log start %d, want 4", res.LogStart)
	}
	if fs := follower.Log().LogStartOffset(); fs != 4 {
		t.Fatalf("follower log start %d, want 4", fs)
	}
	sync()
	if low, _ := leader.LowWatermark(1); low != 4 {
		t.Fatalf("low watermark %d once the follower reported, want 4", low)
	}

	// -1 is the high watermark; a replica out of the ISR (3) does not hold it back.
	if start, err := leader.DeleteRecords(1, -1); err != nil || start != 10 {
		t.Fatalf("delete before the high watermark: %d %v, want 10", start, err)
	}
	sync() // carries the new start
	sync() // reports it
	if low, _ := leader.LowWatermark(1); low != 10 {
		t.Fatalf("low watermark %d, want 10", low)
	}

	// A follower never raises its log start past its own high watermark.
	produceLeader(t, leader, 5) // 10..14, not yet copied
	if err := follower.AdvanceLogStart(1, 13); err != nil {
		t.Fatal(err)
	}
	if fs := follower.Log().LogStartOffset(); fs != 10 {
		t.Fatalf("follower log start %d after a leader start beyond its high watermark, want 10", fs)
	}
}
