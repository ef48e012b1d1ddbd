package server

import (
	"sync"

	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// changeFeed hands each replica's changes (Replica.Subscribe: every change
// of its log end, high watermark, log start, role or ISR) to the calls
// that cover it, so a call over thousands of partitions waits on one
// channel of its own instead of a select over theirs. A notification runs
// in the goroutine that made the change, under the replica's lock: no
// goroutine per replica, and no wake-up of one between an append and the
// fetch sessions it concerns.
//
// Safe for concurrent use. The zero value is ready.
type changeFeed struct {
	mu      sync.Mutex
	watched map[*replica.Replica]int // subscriptions per replica, for watching
}

// changeSub is one subscription.
type changeSub struct {
	r      *replica.Replica
	cancel func() // Replica.Subscribe's
	once   sync.Once
}

// subscribe calls notify after every change of r made after subscribe
// returns, until unsubscribe. notify runs under r's lock: it must not
// block or call r. A caller subscribes before it reads the replica's
// state, so no change after the read is missed.
func (f *changeFeed) subscribe(r *replica.Replica, notify func()) *changeSub {
	sub := &changeSub{r: r, cancel: r.Subscribe(notify)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watched == nil {
		f.watched = map[*replica.Replica]int{}
	}
	f.watched[r]++
	return sub
}

// unsubscribe ends sub: notify is not called after it returns. Safe to
// call twice.
func (f *changeFeed) unsubscribe(sub *changeSub) {
	sub.once.Do(func() {
		sub.cancel()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.watched[sub.r]--; f.watched[sub.r] <= 0 {
			delete(f.watched, sub.r)
		}
	})
}

// watching is the number of replicas watched, for tests.
func (f *changeFeed) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watched)
}

// waiter is one long poll's wait on the replicas it reads: a change of any
// of them signals its one channel. Not safe for concurrent use; close it
// when the call ends.
type waiter struct {
	feed *changeFeed
	wake chan struct{} // capacity 1: a change since the last park
	subs map[*replica.Replica]*changeSub
}

func newWaiter(feed *changeFeed) *waiter {
	return &waiter{feed: feed, wake: make(chan struct{}, 1), subs: map[*replica.Replica]*changeSub{}}
}

// watch makes a change of r wake the waiter from now on. Call it before
// reading r, so that no change after the read is missed.
func (w *waiter) watch(r *replica.Replica) {
	if _, ok := w.subs[r]; ok {
		return
	}
	w.subs[r] = w.feed.subscribe(r, func() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
}

// watched reports whether the waiter watches any replica.
func (w *waiter) watched() bool { return len(w.subs) > 0 }

// close ends the waiter's subscriptions.
func (w *waiter) close() {
	for _, sub := range w.subs {
		w.feed.unsubscribe(sub)
	}
	clear(w.subs)
}
