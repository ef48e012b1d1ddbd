package replication

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Fetcher is this node's fetch session with one leader node, as Kafka's
// replica fetcher: one Replicate long poll at a time carries every
// partition the node follows from that leader, so the number of RPCs (and
// of parked long polls) grows with the leader nodes, not the partitions.
//
// Every rule of a follower holds per partition as it did with a loop per
// partition: each partition carries the leader epoch it follows and is
// fenced by the leader on it; the answer for a partition is applied only
// if the Follower is still registered and its ctx alive, and the replica
// refuses it anyway unless it still follows at that epoch (truncation,
// resets and appends alike); the high watermark comes from the leader's
// answer; and the node epoch of the request is read from the node at every
// call, so a position the leader records always belongs to the current
// incarnation. A partition whose result failed is left out of the session
// for a short backoff without holding back the others.
//
// With a leader that opens one, the fetch session is also a KIP-227 one:
// after the first, full, request, a request names only the partitions
// whose fetch state changed (see Run), so an idle session costs the two
// nodes a small request and an empty answer whatever the partition count.
// Building that request costs the follower no walk either: it looks only
// at the partitions touched since the last one (added, removed, given a
// result, out of a backoff, or changed by anything else: the Fetcher
// subscribes to each replica's changes), and at every partition once per
// WalkEvery.
//
// Add and Remove are safe for concurrent use with Run.
type Fetcher struct {
	NodeID int32
	// Leader returns the leader node's client, or nil while its address
	// is unknown.
	Leader    func() storagev1connect.StorageServiceClient
	NodeEpoch func() int64
	MaxWait   time.Duration // long-poll wait; default 500ms
	// WalkEvery is how often a session's request looks at every
	// partition rather than only the touched ones; default 10s. A
	// follower's fetch state changes when a result is applied or the
	// replica notifies a change (a move to the tier's end), which
	// touches the partition; the walk is the safety net for a change
	// that does neither (a log start raised by local retention).
	WalkEvery time.Duration
	Logger    *slog.Logger

	mu       sync.Mutex
	parts    map[partKey]*Follower
	added    chan struct{}          // closed and replaced by Add
	touched  map[*Follower]struct{} // to look at in the next request
	retrying map[*Follower]struct{} // waiting out a backoff (retryAt)
	due      []*Follower            // dueNow's answer, reused
	examined atomic.Uint64          // partitions whose fetch state a request read, for tests

	// The fetch session with the leader (KIP-227); Run's goroutine only.
	sessionID    int32 // 0: none, the next request is a full one
	sessionEpoch int32 // the next request's
	// sent holds the partitions the leader holds: the session's, or those
	// of the full request in flight; each one's state is its Follower's
	// sent.
	sent   map[partKey]*Follower
	gen    uint64    // one more for each full request: which sent map a sentState belongs to
	round  uint64    // the request being built, for sentState.round
	walked time.Time // when a request last looked at every partition
}

// sentState is a partition's fetch state as last sent to the leader, kept
// on its Follower so that an unchanged partition costs the request no map
// operation.
type sentState struct {
	gen         uint64 // the Fetcher's gen when sent; 0: not in the leader's session
	round       uint64 // the last request that wanted it fetched
	fetchOffset int64
	lastEpoch   int32
	logStart    int64
}

type partKey struct {
	topic     string
	partition int32
}

// backoff is how long a failed call, or a partition whose result failed,
// waits before the next try.
const backoff = 50 * time.Millisecond

// Add puts fl's partition in the session until ctx ends or Remove, in
// place of any Follower of the same partition. The call in flight is cut
// short so the next one carries it.
func (f *Fetcher) Add(ctx context.Context, fl *Follower) {
	fl.ctx = ctx
	// Before it is registered, so no change after it is missed.
	fl.unsub = fl.Replica.Subscribe(func() { f.touch(fl) })
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	f.parts[partKey{fl.Replica.Topic, fl.Replica.Partition}] = fl
	f.touched[fl] = struct{}{}
	close(f.added)
	f.added = make(chan struct{})
}

// Remove takes fl's partition out of the session if fl is still the one
// registered for it.
func (f *Fetcher) Remove(fl *Follower) {
	if fl.unsub != nil {
		fl.unsub()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	k := partKey{fl.Replica.Topic, fl.Replica.Partition}
	if f.parts[k] == fl {
		delete(f.parts, k)
		f.touched[fl] = struct{}{} // to be forgotten by the session
	}
	delete(f.retrying, fl)
}

// Len is the number of partitions in the session.
func (f *Fetcher) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.parts)
}

func (f *Fetcher) initLocked() {
	if f.parts == nil {
		f.parts = map[partKey]*Follower{}
		f.added = make(chan struct{})
		f.touched = map[*Follower]struct{}{}
		f.retrying = map[*Follower]struct{}{}
	}
}

// current reports whether fl is still registered and alive.
func (f *Fetcher) current(fl *Follower) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.currentLocked(fl)
}

func (f *Fetcher) currentLocked(fl *Follower) bool {
	return fl.ctx.Err() == nil && f.parts[partKey{fl.Replica.Topic, fl.Replica.Partition}] == fl
}

// Examined is the number of partitions whose fetch state requests have
// read so far: with a session, what changed, not every partition.
func (f *Fetcher) Examined() uint64 { return f.examined.Load() }

// touch marks fls to be looked at by the next request. A replica's
// change notification calls it under the replica's lock.
func (f *Fetcher) touch(fls ...*Follower) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	for _, fl := range fls {
		f.touched[fl] = struct{}{}
	}
}

// due is what the next request looks at.
type due struct {
	fls []*Follower // reused by the next dueNow
	// all: fls is every live partition not in a backoff, so the
	// session's others are to be forgotten. Else fls is the partitions
	// touched since the last request or out of their backoff, live or
	// not.
	all  bool
	none bool // no partition at all, or all in a backoff: nothing to fetch
}

// dueNow returns what the next request looks at (every partition when
// there is no session or a walk is due, else the touched ones), the
// channel Add closes, and the earliest end of a partition's backoff (zero
// when none waits).
func (f *Fetcher) dueNow(now time.Time) (due, <-chan struct{}, time.Time) {
	var dead []*Follower
	defer func() {
		for _, fl := range dead {
			fl.unsub() // outside mu: it takes the replica's lock, under which touch takes mu
		}
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	d := due{fls: f.due[:0], all: f.sessionID == 0 || now.Sub(f.walked) >= f.WalkEvery}
	var next time.Time
	waiting := func(fl *Follower) bool {
		if !now.Before(fl.retryAt) {
			return false
		}
		if next.IsZero() || fl.retryAt.Before(next) {
			next = fl.retryAt
		}
		return true
	}
	if d.all {
		for k, fl := range f.parts {
			if fl.ctx.Err() != nil {
				delete(f.parts, k)
				if fl.unsub != nil {
					dead = append(dead, fl)
				}
				continue
			}
			if !waiting(fl) {
				d.fls = append(d.fls, fl)
			}
		}
		d.none = len(d.fls) == 0
	} else {
		for fl := range f.touched {
			d.fls = append(d.fls, fl)
		}
		d.none = len(f.parts) == 0
	}
	clear(f.touched)
	for fl := range f.retrying {
		if !waiting(fl) {
			delete(f.retrying, fl)
			if !d.all && f.currentLocked(fl) {
				d.fls = append(d.fls, fl)
			}
		}
	}
	f.due = d.fls
	return d, f.added, next
}

// Run fetches until ctx ends.
//
// The first request to a leader is a full one, naming every partition due,
// and asks the leader to open a fetch session (KIP-227). Once the leader
// answers a session id, each request names only the partitions added or
// whose fetch state (log end, last epoch, log start, or the Follower that
// fetches it) changed since it was last sent, and the partitions taken out
// of the session (removed, superseded by nothing, or waiting out a
// backoff) as forgotten; the leader counts the others as fetched again at
// the state it holds. Any failure of a call, a refused session, or an
// answer without the session's id (an old leader) starts again with a full
// request. A leader that does not open sessions gets full requests, as
// before sessions.
func (f *Fetcher) Run(ctx context.Context) {
	if f.MaxWait <= 0 {
		f.MaxWait = 500 * time.Millisecond
	}
	if f.WalkEvery <= 0 {
		f.WalkEvery = 10 * time.Second
	}
	for ctx.Err() == nil {
		now := time.Now()
		batch, added, next := f.dueNow(now)
		if batch.none {
			f.resetSession()
			wait(ctx, added, next)
			continue
		}
		cl := f.Leader()
		if cl == nil {
			sleep(ctx, backoff)
			continue
		}
		req := f.request(batch, now)
		// A partition added meanwhile cuts the long poll short, so the
		// next call carries it without waiting for this one's answer.
		rctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-added:
				cancel()
			case <-rctx.Done():
			}
		}()
		resp, err := cl.Replicate(rctx, connect.NewRequest(req))
		cut := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			// Whether the leader took this request is unknown: start the
			// session again.
			f.resetSession()
			if cut {
				continue // a partition was added
			}
			if ctx.Err() == nil {
				f.Logger.Debug("replicate failed", "err", err)
			}
			sleep(ctx, backoff)
			continue
		}
		msg := resp.Msg
		if se := msg.GetSessionError(); se != storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_UNSPECIFIED {
			f.Logger.Debug("replicate session refused; sending a full request", "session", req.GetSessionId(), "error", se.String())
			f.resetSession()
			continue
		}
		f.apply(msg.GetPartitions())
		switch {
		case req.GetSessionId() == 0:
			f.sessionID, f.sessionEpoch = msg.GetSessionId(), 1 // 0 from a leader without sessions: full requests again
		case msg.GetSessionId() != req.GetSessionId():
			f.resetSession() // the leader no longer keeps it
		default:
			f.sessionEpoch++
			if f.sessionEpoch <= 0 {
				f.sessionEpoch = 1
			}
		}
	}
}

// resetSession makes the next request a full one.
func (f *Fetcher) resetSession() {
	f.sessionID, f.sessionEpoch, f.sent = 0, 0, nil
}

// request builds the next Replicate for the partitions due: a full one
// without a session, else the session's changes.
func (f *Fetcher) request(batch due, now time.Time) *storagev1.ReplicateRequest {
	req := &storagev1.ReplicateRequest{
		ReplicaId: f.NodeID,
		NodeEpoch: f.NodeEpoch(),
		MaxWaitMs: int32(f.MaxWait / time.Millisecond),
		MinBytes:  1,
	}
	f.round++
	full := f.sessionID == 0
	if full {
		req.OpenSession = true
		f.gen++
		f.sent = make(map[partKey]*Follower, len(batch.fls))
	} else {
		req.SessionId, req.SessionEpoch = f.sessionID, f.sessionEpoch
	}
	if batch.all {
		f.walked = now
	}
	var gone []*Follower
	for _, fl := range batch.fls {
		st := &fl.sent
		k := partKey{fl.Replica.Topic, fl.Replica.Partition}
		if !batch.all && (now.Before(fl.retryAt) || !f.current(fl)) {
			gone = append(gone, fl)
			continue
		}
		f.examined.Add(1)
		fetchOffset, lastEpoch, logStart := fl.Replica.FollowerPosition()
		if !full && st.gen == f.gen && st.fetchOffset == fetchOffset && st.lastEpoch == lastEpoch && st.logStart == logStart {
			st.round = f.round // unchanged: the leader counts it as fetched
			continue
		}
		// New in the session (or superseding another Follower of the
		// partition), or changed.
		f.sent[k] = fl
		*st = sentState{gen: f.gen, round: f.round, fetchOffset: fetchOffset, lastEpoch: lastEpoch, logStart: logStart}
		req.Partitions = append(req.Partitions, &storagev1.ReplicatePartition{
			Topic: fl.Replica.Topic, Partition: fl.Replica.Partition,
			CurrentLeaderEpoch: fl.LeaderEpoch, FetchOffset: fetchOffset,
			LastFetchedEpoch: lastEpoch, LogStartOffset: logStart,
		})
	}
	// Removed, superseded by nothing, or waiting out a backoff: no longer
	// fetched, so the leader must stop counting them as fetched. A
	// partition whose new Follower this request names is not forgotten.
	for _, fl := range gone {
		k := partKey{fl.Replica.Topic, fl.Replica.Partition}
		if fl.sent.gen == f.gen && f.sent[k] == fl {
			req.ForgottenPartitions = append(req.ForgottenPartitions, &commonv1.TopicPartition{Topic: k.topic, Partition: k.partition})
			delete(f.sent, k)
		}
		fl.sent.gen = 0
	}
	if !full && batch.all {
		for k, fl := range f.sent {
			if fl.sent.round != f.round {
				req.ForgottenPartitions = append(req.ForgottenPartitions, &commonv1.TopicPartition{Topic: k.topic, Partition: k.partition})
				delete(f.sent, k)
				fl.sent.gen = 0
			}
		}
	}
	return req
}

// apply hands each partition's result to its Follower, with the fetch
// offset the leader answered for. Results are matched by partition: a
// session's answer holds only the partitions with something new.
func (f *Fetcher) apply(results []*storagev1.ReplicatePartitionResult) {
	now := time.Now()
	var touched, failed []*Follower
	defer func() {
		// A result moves the follower's fetch state; a failure takes the
		// partition out of the session for the backoff.
		f.touch(touched...)
		f.mu.Lock()
		for _, fl := range failed {
			f.retrying[fl] = struct{}{}
		}
		f.mu.Unlock()
	}()
	for _, res := range results {
		fl, ok := f.sent[partKey{res.GetTopic(), res.GetPartition()}]
		if !ok {
			f.Logger.Warn("replicate answer names a partition not asked for", "topic", res.GetTopic(), "partition", res.GetPartition())
			continue
		}
		if !f.current(fl) {
			continue // removed or superseded while the call was in flight
		}
		touched = append(touched, fl)
		if err := fl.handle(fl.ctx, res, fl.sent.fetchOffset); err != nil {
			if !errors.Is(err, replica.ErrNotLeader) && fl.ctx.Err() == nil {
				fl.Logger.Warn("replicate result not applied", "err", err)
			}
			fl.retryAt = now.Add(backoff)
			failed = append(failed, fl)
		}
	}
}

// wait blocks until ctx ends, added is closed, or next (when not zero).
func wait(ctx context.Context, added <-chan struct{}, next time.Time) {
	var timeout <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-added:
	case <-timeout:
	}
}
