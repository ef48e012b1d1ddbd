package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
)

// startGroup runs a scripted one-member coordinator for topic "t" of parts
// partitions, produces n records to each partition, and joins a group
// consumer with opts.
func startGroup(t *testing.T, parts int32, n int, committed map[int32]int64, opts ...GroupOpt) (*GroupConsumer, *scriptedCoordinator) {
	t.Helper()
	return startGroupWith(t, parts, n, committed, nil, opts...)
}

// startGroupWith is startGroup with setup run on the coordinator before
// the consumer joins.
func startGroupWith(t *testing.T, parts int32, n int, committed map[int32]int64, setup func(*scriptedCoordinator), opts ...GroupOpt) (*GroupConsumer, *scriptedCoordinator) {
	t.Helper()
	fc := newFake(t, 1, "t", parts)
	co := &scriptedCoordinator{topic: "t", parts: parts, committed: committed}
	if setup != nil {
		setup(co)
	}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)
	p := newProducer(t, fc, ManualPartitioning())
	for part := range parts {
		for range n {
			if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Partition: part, Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := []GroupOpt{GroupConsumerOptions(RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond), FetchMaxWait(50*time.Millisecond))}
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"}, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close(context.Background()) })
	return gc, co
}

// firstOffsets polls until every partition of want has returned a record,
// and returns the first offset each returned.
func firstOffsets(t *testing.T, ctx context.Context, gc *GroupConsumer, want int) map[int32]int64 {
	t.Helper()
	first := map[int32]int64{}
	for len(first) < want {
		recs, err := gc.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (first offsets so far %v)", err, first)
		}
		for _, r := range recs {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
		}
	}
	return first
}

// TestStartOffsets: the hook is asked, with the member epoch of the
// assignment, where the gained partitions start; what it leaves out or
// maps to a negative offset starts at the group's committed offset, and
// failing that at StartWhenNoCommit.
func TestStartOffsets(t *testing.T) {
	var mu sync.Mutex
	var calls [][]TopicPartition
	var epochs []int32
	hook := func(_ context.Context, epoch int32, tps []TopicPartition) (map[TopicPartition]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls, epochs = append(calls, tps), append(epochs, epoch)
		return map[TopicPartition]int64{{"t", 0}: 3, {"t", 1}: -1}, nil
	}
	// Partition 1 falls back to its committed offset 2, partition 2 (no
	// commit) to StartWhenNoCommit, partition 3 to its committed 4
	// although the hook had nothing to say about it.
	gc, _ := startGroup(t, 4, 6, map[int32]int64{1: 2, 3: 4}, StartOffsets(hook), StartWhenNoCommit(EndOffsetMinus(1)))
	got := firstOffsets(t, ctxT(t), gc, 4)
	want := map[int32]int64{0: 3, 1: 2, 2: 5, 3: 4}
	for p, o := range want {
		if got[p] != o {
			t.Errorf("partition %d started at %d, want %d", p, got[p], o)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	all := []TopicPartition{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 3}}
	if len(calls) != 1 || !slices.Equal(calls[0], all) || epochs[0] != 2 {
		t.Fatalf("hook called with %v at epochs %v; want once with %v at epoch 2", calls, epochs, all)
	}
}

// TestStartOffsetsError: a failing hook makes Poll return its error and
// start nothing; the next Poll asks it again.
func TestStartOffsetsError(t *testing.T) {
	boom := errors.New("database down")
	var mu sync.Mutex
	fail := true
	hook := func(_ context.Context, _ int32, tps []TopicPartition) (map[TopicPartition]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return nil, boom
		}
		return map[TopicPartition]int64{{"t", 0}: 1}, nil
	}
	gc, _ := startGroup(t, 1, 3, map[int32]int64{}, StartOffsets(hook))
	ctx := ctxT(t)
	var err error
	for err == nil {
		var recs []*Record
		recs, err = gc.Poll(ctx)
		if len(recs) > 0 {
			t.Fatalf("poll returned records %d.. before the hook answered", recs[0].Offset)
		}
	}
	if !errors.Is(err, boom) {
		t.Fatalf("poll = %v; want the hook's error", err)
	}
	if got := firstOffsets(t, ctx, gc, 1); got[0] != 1 {
		t.Fatalf("after the hook answered, partition 0 started at %d; want 1", got[0])
	}
}

// TestSeek: Seek moves an owned partition back (or forward), the next
// Poll reads from there and Commit commits no further; a partition not
// owned is refused.
func TestSeek(t *testing.T) {
	gc, co := startGroup(t, 1, 6, map[int32]int64{})
	ctx := ctxT(t)
	pollUntil(t, ctx, gc, 5)
	tp := TopicPartition{"t", 0}
	if err := gc.Seek(tp, 2); err != nil {
		t.Fatal(err)
	}
	if err := gc.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cs := co.Commits()
	if len(cs) != 1 || cs[0].GetPartitions()[0].GetCommittedOffset() != 2 {
		t.Fatalf("commit after Seek(2) sent %v; want offset 2", cs)
	}
	again := pollUntil(t, ctx, gc, 5)
	if again[0].Offset != 2 || len(again) != 4 {
		t.Fatalf("after Seek(2) poll returned %d records from %d; want 4 from 2", len(again), again[0].Offset)
	}
	if err := gc.Seek(TopicPartition{"t", 7}, 0); err == nil {
		t.Fatal("Seek of a partition not owned succeeded")
	}
	if err := gc.Seek(tp, -1); err == nil {
		t.Fatal("Seek to a negative offset succeeded")
	}
}

// TestStableOffsets: a read-committed member (the default) asks for
// stable offsets and waits out a transaction's staged offsets (KIP-447)
// instead of starting from the offset the transaction is about to move;
// a read-uncommitted one asks for what is committed now.
func TestStableOffsets(t *testing.T) {
	var mu sync.Mutex
	var reasons []RetryReason
	onRetry := GroupConsumerOptions(OnRetry(func(ev RetryEvent) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, ev.Reason)
	}))
	gc, co := startGroupWith(t, 1, 4, map[int32]int64{0: 2}, func(co *scriptedCoordinator) { co.unstable = map[int32]int{0: 2} }, onRetry)
	if got := firstOffsets(t, ctxT(t), gc, 1); got[0] != 2 {
		t.Fatalf("started at %d, want the committed 2", got[0])
	}
	mu.Lock()
	if n := slices.Index(reasons, RetryUnstableOffsets); n < 0 || slices.Index(reasons[n+1:], RetryUnstableOffsets) < 0 {
		t.Errorf("retries %v; want two for the staged offsets", reasons)
	}
	mu.Unlock()
	co.mu.Lock()
	if len(co.stable) != 3 || slices.Contains(co.stable, false) {
		t.Errorf("require_stable of each fetch %v; want three, all set", co.stable)
	}
	co.mu.Unlock()

	gc, co = startGroupWith(t, 1, 4, map[int32]int64{0: 2}, func(co *scriptedCoordinator) { co.unstable = map[int32]int{0: 2} },
		GroupConsumerOptions(ReadUncommitted()))
	if got := firstOffsets(t, ctxT(t), gc, 1); got[0] != 2 {
		t.Fatalf("read uncommitted: started at %d, want 2", got[0])
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if len(co.stable) != 1 || co.stable[0] {
		t.Errorf("read uncommitted: require_stable of each fetch %v; want one, unset", co.stable)
	}
}
