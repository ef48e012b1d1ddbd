package replication

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/services/storage/internal/clock"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// TestISRLoopAsksOnlyDueReplicas: a pass asks the replicas that are new,
// whose mark was cleared (Recheck, wired as the replicas' ISRRecheck) or
// has passed, and no settled one; a mark the loop holds stale is read
// again after RefreshInterval; a replica that leaves the hosted set is
// forgotten and one that joins is asked at once.
func TestISRLoopAsksOnlyDueReplicas(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const lag = 10 * time.Second
	hosted := []*replica.Replica{}
	l := &ISRLoop{Replicas: func() []*replica.Replica { return hosted }, Clock: clk, RefreshInterval: time.Hour}
	open := func(partition int32) *replica.Replica {
		r, err := replica.Open(t.TempDir(), "orders", "id", partition, replica.Config{MinISR: 2},
			replica.Options{Clock: clk, LagTime: lag, NodeID: 1, ISRRecheck: l.Recheck})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	leader := replica.State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}}
	follower := replica.State{LeaderID: 2, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}}
	a, b := open(0), open(1)
	a.ApplyState(leader)
	b.ApplyState(follower)
	hosted = []*replica.Replica{a, b}
	dueOf := func() []*replica.Replica {
		var rs []*replica.Replica
		for _, i := range l.due() {
			rs = append(rs, l.hosted[i])
		}
		return rs
	}
	want := func(what string, rs ...*replica.Replica) {
		t.Helper()
		if got := dueOf(); !slices.Equal(got, rs) {
			t.Fatalf("%s: %d replicas due, want %d", what, len(got), len(rs))
		}
	}

	want("new replicas", a, b)
	l.once(context.Background()) // a settles (its followers have a lag time from its election), b follows: nothing to send
	want("settled and following")

	// b is elected: its role change clears its mark and tells the loop.
	b.ApplyState(replica.State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	want("b elected", b)
	l.once(context.Background())
	want("both settled")

	// The lag time runs out for both leaders' silent followers.
	clk.Advance(lag + time.Millisecond)
	want("marks passed", a, b)

	// A mark held stale is corrected by the refresh.
	l.marks[0], l.marks[1] = math.MaxInt64, math.MaxInt64
	want("stale marks before the refresh")
	clk.Advance(time.Hour)
	want("after the refresh", a, b)

	// b leaves, c joins.
	c := open(2)
	c.ApplyState(follower)
	hosted = []*replica.Replica{a, c}
	want("c joined", a, c)
	if _, ok := l.index[b]; ok {
		t.Fatal("the loop still holds the replica that left")
	}
}
