package replica

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/storage/internal/clock"
)

// An acks=all produce reports each stage once from the leader's clock:
// each follower's fetch and acknowledgement of the batch, the commit when
// the slower one acknowledged, then the request's wake-up and total.
func TestProduceStages(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	var (
		mu  sync.Mutex
		got = map[Stage][]time.Duration{}
	)
	observe := func(s Stage, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got[s] = append(got[s], d)
	}
	r := leaderOf(t, Config{MinISR: 2}, Options{Clock: clk, LagTime: time.Hour, ObserveStage: observe},
		State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	fetch(t, r, 2, 0)
	fetch(t, r, 3, 0)

	done := make(chan error, 1)
	go func() {
		_, err := r.Produce(context.Background(), testBatch(t, 3), AcksAll, -1, time.Minute)
		done <- err
	}()
	testwait.Until(t, 10*time.Second, "the batch appended", func() error {
		if r.Log().LogEndOffset() != 3 {
			return testwait.ErrNotYet
		}
		return nil
	})
	clk.Advance(2 * time.Millisecond)
	fetch(t, r, 2, 0) // follower 2 carries it away at 2 ms
	clk.Advance(time.Millisecond)
	fetch(t, r, 3, 0) // follower 3 at 3 ms
	fetch(t, r, 3, 0) // a fetch again from the same offset measures nothing new
	clk.Advance(4 * time.Millisecond)
	fetch(t, r, 2, 3) // follower 2 has it at 7 ms
	if hw := r.Log().HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before follower 3 acknowledged", hw)
	}
	clk.Advance(time.Millisecond)
	fetch(t, r, 3, 3) // follower 3 at 8 ms: committed
	if err := <-done; err != nil {
		t.Fatalf("produce: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	ms := time.Millisecond
	for s, want := range map[Stage][]time.Duration{
		StageFollowerFetch: {2 * ms, 3 * ms},
		StageFollowerAck:   {7 * ms, 8 * ms},
		StageCommit:        {8 * ms},
		StageAppend:        {0},
	} {
		if !slices.Equal(got[s], want) {
			t.Errorf("%v: %v, want %v", s, got[s], want)
		}
	}
	if len(got[StageWakeup]) != 1 || len(got[StageTotal]) != 1 || got[StageTotal][0] < 8*ms {
		t.Errorf("wakeup %v, total %v; want one each, the total at least 8ms", got[StageWakeup], got[StageTotal])
	}

	// acks=1 produces measure nothing: no follower is waited for.
	before := len(got[StageTotal])
	mu.Unlock()
	produceLeader(t, r, 1)
	fetch(t, r, 2, 4)
	fetch(t, r, 3, 4)
	mu.Lock()
	if len(got[StageTotal]) != before || len(got[StageCommit]) != 1 {
		t.Errorf("an acks=1 produce was measured: %v", got)
	}
}
