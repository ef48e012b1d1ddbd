package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
)

func openLeader(t *testing.T) *Replica {
	t.Helper()
	r, err := Open(t.TempDir(), "orders", "id", 0, Config{MinISR: 1}, Options{NodeID: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
	return r
}

func records(t *testing.T, n int, tag string) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: []byte(fmt.Sprintf("%s-%d", tag, i))}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Produce racing MoveToTieredEnd never gives two records one offset: every
// acknowledged range is disjoint from every other, and the log holds one
// record per offset from its start to its end.
func TestMoveToTieredEndRacingProduce(t *testing.T) {
	r := openLeader(t)
	ctx := context.Background()
	type span struct{ base, last int64 }
	var mu sync.Mutex
	var spans []span
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := r.Produce(ctx, records(t, 3, fmt.Sprintf("w%d-%d", w, i)), AcksLeader, -1, 0)
				if err != nil {
					t.Errorf("produce: %v", err)
					return
				}
				mu.Lock()
				spans = append(spans, span{res.BaseOffset, res.LastOffset})
				mu.Unlock()
			}
		}()
	}
	var moves int
	for range 50 {
		end := r.Log().LogEndOffset() + 7
		moved, err := r.MoveToTieredEnd(end)
		if err != nil {
			t.Fatal(err)
		}
		if moved {
			moves++
		}
		if leo := r.Log().LogEndOffset(); leo < end {
			t.Fatalf("log end %d below the tiered end %d after the move", leo, end)
		}
		if hw := r.Log().HighWatermark(); hw < end {
			t.Fatalf("high watermark %d below the tiered end %d after the move", hw, end)
		}
	}
	close(stop)
	wg.Wait()
	if moves == 0 {
		t.Fatal("the log never moved")
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].base < spans[j].base })
	for i := 1; i < len(spans); i++ {
		if spans[i].base <= spans[i-1].last {
			t.Fatalf("two produces share offsets: %v and %v", spans[i-1], spans[i])
		}
	}
	seen := map[int64]bool{}
	leo := r.Log().LogEndOffset()
	for off := r.Log().LogStartOffset(); off < leo; {
		rr, err := r.Log().Read(off, 1<<20, leo)
		if err != nil {
			t.Fatal(err)
		}
		it := recordbatch.NewIter(rr.Batches, true)
		for {
			h, _, ok := it.Next()
			if !ok {
				break
			}
			for o := h.BaseOffset; o <= h.LastOffset(); o++ {
				if seen[o] {
					t.Fatalf("offset %d twice in the log", o)
				}
				seen[o] = true
			}
		}
		off = rr.NextOffset
	}
	if int64(len(seen)) != leo-r.Log().LogStartOffset() {
		t.Fatalf("log holds %d records between %d and %d", len(seen), r.Log().LogStartOffset(), leo)
	}
}

// An empty log held by AwaitTierState refuses produce until the tier state
// arrives; a non-empty log is never held.
func TestAwaitTierStateHoldsEmptyLogOnly(t *testing.T) {
	ctx := context.Background()
	r := openLeader(t)
	if !r.AwaitTierState() {
		t.Fatal("empty log not held")
	}
	_, err := r.Produce(ctx, records(t, 1, "a"), AcksAll, -1, 0)
	if !errors.Is(err, ErrTierStateUnknown) || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("produce while the tier state is unknown: %v", err)
	}
	if leo := r.Log().LogEndOffset(); leo != 0 {
		t.Fatalf("refused produce appended: log end %d", leo)
	}
	if moved, err := r.MoveToTieredEnd(-1); err != nil || moved { // nothing tiered
		t.Fatalf("nothing tiered: moved %v, %v", moved, err)
	}
	if res, err := r.Produce(ctx, records(t, 1, "b"), AcksLeader, -1, 0); err != nil || res.BaseOffset != 0 {
		t.Fatalf("produce once the tier answered: %v %v", res, err)
	}
	if r.AwaitTierState() {
		t.Fatal("non-empty log held")
	}
	if _, err := r.Produce(ctx, records(t, 1, "c"), AcksLeader, -1, 0); err != nil {
		t.Fatal(err)
	}

	// A lost disk: the tier ends at 40, the log restarts there.
	r2 := openLeader(t)
	r2.AwaitTierState()
	if moved, err := r2.MoveToTieredEnd(40); err != nil || !moved {
		t.Fatalf("move to 40: %v %v", moved, err)
	}
	if v := r2.View(); v.LogStart != 40 || v.LEO != 40 || v.HW != 40 {
		t.Fatalf("after the move: %+v", v)
	}
	if res, err := r2.Produce(ctx, records(t, 2, "d"), AcksAll, -1, 0); err != nil || res.BaseOffset != 40 {
		t.Fatalf("produce after the move: %v %v", res, err)
	}
}
