package server

import (
	"context"
	"sync"

	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// changeFeed fans each replica's change channel (Replica.Changed: closed at
// every change of its log end, high watermark, log start, role or ISR) out
// to the parked calls that cover it, so a call over thousands of
// partitions waits on one channel of its own instead of a select over
// theirs. One goroutine per watched replica waits on the replica's channel
// while anyone subscribes, and stops with the last subscription or the
// node; it costs nothing while the replica does not change.
//
// Safe for concurrent use. The zero value is ready once ctx is set.
type changeFeed struct {
	ctx context.Context // the node's: watchers stop with it

	mu      sync.Mutex
	watches map[*replica.Replica]*watch
}

// watch is one replica's watcher and its subscribers.
type watch struct {
	subs map[*changeSub]struct{} // under changeFeed.mu
	stop chan struct{}           // closed when the last subscriber leaves
}

// changeSub is one subscription: notify is called, from the watcher's
// goroutine, after every change of r made after subscribe returned. It
// must not block.
type changeSub struct {
	r      *replica.Replica
	notify func()
}

// subscribe calls notify after every change of r from now on until
// unsubscribe. A change made before subscribe returns may or may not be
// notified, so a caller subscribes before it reads the replica's state.
func (f *changeFeed) subscribe(r *replica.Replica, notify func()) *changeSub {
	sub := &changeSub{r: r, notify: notify}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watches == nil {
		f.watches = map[*replica.Replica]*watch{}
	}
	w := f.watches[r]
	if w == nil {
		w = &watch{subs: map[*changeSub]struct{}{}, stop: make(chan struct{})}
		f.watches[r] = w
		// Taken here, not in the goroutine, so a change between
		// subscribe's return and the goroutine's start is not missed.
		go f.run(r, w, r.Changed())
	}
	w.subs[sub] = struct{}{}
	return sub
}

// unsubscribe ends sub; notify may still be running or be called once
// more while it returns. Safe to call twice.
func (f *changeFeed) unsubscribe(sub *changeSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.watches[sub.r]
	if w == nil {
		return
	}
	if _, ok := w.subs[sub]; !ok {
		return
	}
	delete(w.subs, sub)
	if len(w.subs) == 0 {
		close(w.stop)
		delete(f.watches, sub.r)
	}
}

// watching is the number of replicas watched, for tests.
func (f *changeFeed) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watches)
}

func (f *changeFeed) run(r *replica.Replica, w *watch, ch <-chan struct{}) {
	var done <-chan struct{}
	if f.ctx != nil {
		done = f.ctx.Done()
	}
	var subs []*changeSub
	for {
		select {
		case <-ch:
		case <-w.stop:
			return
		case <-done:
			return
		}
		// The next channel before the notifications: a change made
		// while they run closes it, so none is missed.
		ch = r.Changed()
		f.mu.Lock()
		subs = subs[:0]
		for s := range w.subs {
			subs = append(subs, s)
		}
		f.mu.Unlock()
		for _, s := range subs {
			s.notify()
		}
	}
}
