package replica

import (
	"sync/atomic"
	"time"
)

// Poller is one follower node's fetch session as a leader node sees it
// (KIP-227): each request of the session fetches again, at its last fetch
// offset, every partition the session holds and the request does not
// name. A leader counts those fetches without visiting the partitions: a
// follower whose last fetch of a partition came through the session
// (Fetch.Poller) and reached our log end is caught up as of the
// session's last request, for as long as our log end has not moved and
// the session holds the partition (DetachPoller) and is open (Close).
//
// Before, the session visited every partition it held each quarter of
// the lag time to record such a fetch (Refetch): at thousands of
// partitions, a third of an idle node's CPU.
type Poller struct {
	at atomic.Int64 // the clock's monotonic reading of the last request; -1 once closed
}

// NewPoller returns the Poller of a new session.
func NewPoller() *Poller { return &Poller{} }

// Polled records a request of the session, at now on the replicas'
// clock (Options.Clock's Mono).
func (p *Poller) Polled(now time.Duration) {
	for {
		old := p.at.Load()
		if old < 0 || old >= int64(now) || p.at.CompareAndSwap(old, int64(now)) {
			return
		}
	}
}

// Close ends the session: its requests count no more.
func (p *Poller) Close() { p.at.Store(-1) }

// last is the time of the session's last request; false once closed or
// before the first.
func (p *Poller) last() (time.Duration, bool) {
	at := p.at.Load()
	return time.Duration(at), at > 0
}

// lastCaughtUpLocked is when follower f was last caught up, counting the
// requests of its fetch session since its last named fetch: while that
// fetch's offset is our log end, each of them fetched at our log end.
// The log end is the one at the last change notification (creditLEO) or
// the log's own: an append moves the log's before its notification, and
// a request that came before the append must still count until the
// notification records it (creditPollsLocked). The caller holds mu.
func (r *Replica) lastCaughtUpLocked(f *followerState) time.Duration {
	t := f.lastCaughtUp
	if f.poller == nil || !f.caughtUp || (f.leo != r.creditLEO && f.leo != r.log.LogEndOffset()) {
		return t
	}
	if at, ok := f.poller.last(); ok && at > t {
		t = at
	}
	return t
}

// creditPollsLocked records, as our log end moves on from creditLEO, the
// session requests each follower caught up at creditLEO made since its
// last named fetch: each was a fetch at our log end, and its time is the
// "previous fetch" against which the follower's next named fetch is
// judged (recordFetchLocked). The caller holds mu.
func (r *Replica) creditPollsLocked() {
	for _, f := range r.followers {
		if f.poller == nil || !f.caughtUp || f.leo != r.creditLEO {
			continue
		}
		if at, ok := f.poller.last(); ok && at > f.lastFetch {
			f.lastCaughtUp = max(f.lastCaughtUp, at)
			f.lastFetch, f.leoAtLastFetch = at, f.leo
		}
	}
}

// DetachPoller stops counting p's requests as fetches of this partition
// by follower id: the session no longer holds it.
func (r *Replica) DetachPoller(id int32, p *Poller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.followers[id]; f != nil && f.poller == p {
		f.poller = nil
	}
}
