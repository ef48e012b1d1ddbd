package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// A long poll over many partitions waits on one channel that a change of
// any of them signals (waiter, changefeed.go): it wakes once when several
// change at the same moment, wakes for a change of one among many while
// it waits, counts each replica once however often it is watched, and
// stops being signalled once closed.
func TestLongPollWakesOnAnyOfItsReplicas(t *testing.T) {
	s := &service{n: &Node{ctx: context.Background()}}
	feed := &s.sessions().feed
	rs := make([]*replica.Replica, 64)
	for i := range rs {
		r, err := replica.Open(t.TempDir(), "t", "id", int32(i), replica.Config{}, replica.Options{NodeID: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs[i] = r
	}
	epoch := int32(0)
	change := func(r *replica.Replica) { // a new record: a change
		r.ApplyState(replica.State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: epoch, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	}
	far := time.Now().Add(time.Hour)
	w := newWaiter(feed)
	for range 2 {
		for _, r := range rs {
			w.watch(r)
		}
	}
	if n := feed.watching(); n != len(rs) {
		t.Fatalf("%d replicas watched, want %d", n, len(rs))
	}
	for range 50 {
		epoch++
		woke := make(chan bool, 1)
		go func() { woke <- s.park(context.Background(), w.wake, far) }()
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Go(func() { change(r) })
		}
		wg.Wait()
		if !<-woke {
			t.Fatal("park reported a shutdown")
		}
		// The changes that came after the wake-up leave one signal, not
		// one each: the next park returns at once, the one after waits.
		select {
		case <-w.wake:
		default:
		}
		if len(w.wake) != 0 {
			t.Fatal("more than one signal pending")
		}
	}
	// One change among many, while parked.
	epoch++
	woke := make(chan bool, 1)
	go func() { woke <- s.park(context.Background(), w.wake, far) }()
	change(rs[len(rs)-1])
	if !<-woke {
		t.Fatal("park reported a shutdown")
	}
	// A canceled request ends the wait and says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.park(ctx, w.wake, far) {
		t.Fatal("park on a canceled request reported a change")
	}
	// Closed, it is signalled no more and watches nothing.
	w.close()
	epoch++
	for _, r := range rs {
		change(r)
	}
	if len(w.wake) != 0 || feed.watching() != 0 {
		t.Fatalf("after close: %d signals, %d replicas watched", len(w.wake), feed.watching())
	}
}
