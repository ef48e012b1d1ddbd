package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// The leader's side of Replicate. A follower either names every partition
// it follows here in each request (a full request, what every follower
// did before fetch sessions and what an old one still does), or opens a
// fetch session with a full request and from then on names only the
// partitions whose fetch state changed (KIP-227's incremental fetch
// requests). Either way, each partition's fetch goes through
// Replica.Replicate, which fences it, checks divergence, records the
// follower's position and reads.
//
// A session remembers, per partition, the follower's last fetch state and
// the high watermark and log start it last answered. A partition the
// request leaves out counts as fetched again at that state, as in Kafka,
// but without a walk over every partition at every request: the session
// fetches a partition again when it changes here (an append, a new high
// watermark or log start, a leadership change: the change feed marks it),
// and every partition of the session once per sessionRefresh, so that an
// idle follower that keeps polling stays caught up (replica.lag.time.max)
// on partitions it has no reason to name. Only partitions with something
// new for the follower go into the answer. A parked call waits on its
// session's own channel, which the change feed signals.
//
// Sessions are kept one per follower node (a follower has one fetch
// session per leader node): opening one closes the follower's previous
// one, and so does a full request without a session.

// sessionIdle is how long a session no call used is kept (a follower
// that died, or that has not called since).
const sessionIdle = 2 * time.Minute

// replSessions are a leader node's fetch sessions. Safe for concurrent
// use.
type replSessions struct {
	feed changeFeed

	mu        sync.Mutex
	byReplica map[int32]*replSession
}

// replSession is one follower node's fetch session with this node.
type replSession struct {
	id        int32
	replicaID int32
	nodeEpoch int64 // the follower's incarnation (KIP-903); another one opens its own
	feed      *changeFeed
	// poller counts each request as a fetch of every partition the
	// session holds, at the follower's last fetch state, for the
	// replicas its fetches came through (replica.Poller).
	poller *replica.Poller

	// Under replSessions.mu.
	nextEpoch int32     // the epoch the next request must carry
	lastUsed  time.Time // the start of the last call

	mu        sync.Mutex // serializes the rounds of calls; never held while parked
	closed    bool
	parts     map[tpKey]*sessionPart
	refreshed time.Time // when every partition was last fetched again

	dirtyMu sync.Mutex
	dirty   map[tpKey]struct{} // changed since a round last fetched them
	wake    chan struct{}      // capacity 1: a change for a parked call
}

// sessionPart is one partition of a session.
type sessionPart struct {
	key   tpKey
	fetch *storagev1.ReplicatePartition // the follower's last fetch state
	r     *replica.Replica              // the replica sub watches; nil when unknown here
	sub   *changeSub
	// The high watermark and log start last answered, so an unchanged
	// partition is left out of the answer; -2 before the first answer.
	sentHW, sentLogStart int64
}

// sessions returns s's fetch sessions.
func (s *service) sessions() *replSessions {
	s.replOnce.Do(func() {
		s.repl = &replSessions{byReplica: map[int32]*replSession{}}
	})
	return s.repl
}

// open starts a session for the follower, closing its previous one.
func (t *replSessions) open(replicaID int32, nodeEpoch int64, now time.Time) *replSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	old := t.byReplica[replicaID]
	if old != nil {
		old.close()
	}
	id := rand.Int32()
	for id == 0 || (old != nil && id == old.id) {
		id = rand.Int32()
	}
	sess := &replSession{
		id: id, replicaID: replicaID, nodeEpoch: nodeEpoch, feed: &t.feed, poller: replica.NewPoller(),
		nextEpoch: 1, lastUsed: now,
		parts: map[tpKey]*sessionPart{}, dirty: map[tpKey]struct{}{}, wake: make(chan struct{}, 1),
	}
	t.byReplica[replicaID] = sess
	return sess
}

// resume returns the session a request names and takes its epoch, or why
// it cannot.
func (t *replSessions) resume(m *storagev1.ReplicateRequest, now time.Time) (*replSession, storagev1.ReplicateSessionError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	sess := t.byReplica[m.GetReplicaId()]
	if sess == nil || sess.id != m.GetSessionId() || sess.nodeEpoch != m.GetNodeEpoch() {
		return nil, storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_SESSION_NOT_FOUND
	}
	if m.GetSessionEpoch() != sess.nextEpoch {
		// A lost answer or a retry: what the follower holds is unknown,
		// so it starts again with a full request.
		sess.close()
		delete(t.byReplica, m.GetReplicaId())
		return nil, storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_INVALID_SESSION_EPOCH
	}
	sess.nextEpoch++
	if sess.nextEpoch <= 0 {
		sess.nextEpoch = 1
	}
	sess.lastUsed = now
	return sess, storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_UNSPECIFIED
}

// closeFor closes the follower's session, if any: it sends full requests
// without one now.
func (t *replSessions) closeFor(replicaID int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sess := t.byReplica[replicaID]; sess != nil {
		sess.close()
		delete(t.byReplica, replicaID)
	}
}

// expireLocked closes the sessions no call used for sessionIdle.
func (t *replSessions) expireLocked(now time.Time) {
	for id, sess := range t.byReplica {
		if now.Sub(sess.lastUsed) > sessionIdle {
			sess.close()
			delete(t.byReplica, id)
		}
	}
}

// close ends the session's subscriptions; a call still on it answers with
// nothing. Safe to call twice.
func (sess *replSession) close() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closed {
		return
	}
	sess.closed = true
	sess.poller.Close()
	for _, sp := range sess.parts {
		if sp.sub != nil {
			sess.feed.unsubscribe(sp.sub)
		}
	}
	sess.parts = nil
}

// markDirty is the change feed's notification for k: the next round
// fetches k again, and a parked call wakes.
func (sess *replSession) markDirty(k tpKey) {
	sess.dirtyMu.Lock()
	sess.dirty[k] = struct{}{}
	sess.dirtyMu.Unlock()
	select {
	case sess.wake <- struct{}{}:
	default:
	}
}

// takeDirty moves the changed partitions into todo.
func (sess *replSession) takeDirty(todo map[tpKey]struct{}) {
	sess.dirtyMu.Lock()
	defer sess.dirtyMu.Unlock()
	for k := range sess.dirty {
		todo[k] = struct{}{}
	}
	clear(sess.dirty)
}

// set records the follower's fetch state of one partition, adding it to
// the session if new. The caller holds mu.
func (sess *replSession) set(p *storagev1.ReplicatePartition) {
	k := tpKey{p.GetTopic(), p.GetPartition()}
	sp := sess.parts[k]
	if sp == nil {
		sp = &sessionPart{key: k, sentHW: -2, sentLogStart: -2}
		sess.parts[k] = sp
	}
	// A copy: the session outlives the request.
	sp.fetch = &storagev1.ReplicatePartition{Topic: p.GetTopic(), Partition: p.GetPartition(), CurrentLeaderEpoch: p.GetCurrentLeaderEpoch(),
		FetchOffset: p.GetFetchOffset(), LastFetchedEpoch: p.GetLastFetchedEpoch(), LogStartOffset: p.GetLogStartOffset(), MaxBytes: p.GetMaxBytes()}
}

// forget takes a partition out of the session. The caller holds mu.
func (sess *replSession) forget(k tpKey) {
	if sp := sess.parts[k]; sp != nil {
		if sp.sub != nil {
			sess.feed.unsubscribe(sp.sub)
		}
		if sp.r != nil {
			sp.r.DetachPoller(sess.replicaID, sess.poller)
		}
		delete(sess.parts, k)
	}
}

// watch makes sp's subscription follow r, the replica now hosted for it
// (nil for none): a partition deleted and created again, or moved away and
// back, is another Replica. Its old one closed, and closing notified the
// session, which is how this runs. The caller holds mu.
func (sess *replSession) watch(sp *sessionPart, r *replica.Replica) {
	if sp.r == r && (r == nil || sp.sub != nil) {
		return
	}
	if sp.sub != nil {
		sess.feed.unsubscribe(sp.sub)
		sp.sub = nil
	}
	sp.r = r
	if r != nil {
		k := sp.key
		sp.sub = sess.feed.subscribe(r, func() { sess.markDirty(k) })
	}
}

// sessionRefresh is how often a session fetches every partition again at
// the follower's last state, a safety net for a change the change feed
// did not report: an idle follower that keeps polling is kept in time by
// the session's requests themselves (replica.Poller), so this is
// several times replica.lag.time.max.
func (s *service) sessionRefresh() time.Duration {
	lag := s.n.cfg.ReplicaLagTime
	if lag <= 0 {
		lag = 10 * time.Second
	}
	return max(3*lag, time.Millisecond)
}

func (s *service) Replicate(ctx context.Context, req *connect.Request[storagev1.ReplicateRequest]) (*connect.Response[storagev1.ReplicateResponse], error) {
	m := req.Msg
	// Only storage node replica_id itself replicates as replica_id: its
	// fetches move the ISR and the high watermark.
	if err := s.n.cfg.Guard.RequireStorageNode(ctx, m.GetReplicaId()); err != nil {
		return nil, err
	}
	if m.GetMaxWaitMs() < 0 || m.GetMinBytes() < 0 || m.GetMaxBytes() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("negative limits"))
	}
	if ns := s.n.currentView().Nodes[m.GetReplicaId()]; ns != nil && ns.GetNodeEpoch() > 0 && m.GetNodeEpoch() < ns.GetNodeEpoch() {
		return nil, apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_ABORTED, Reason: commonv1.Reason_REASON_STALE_NODE_EPOCH,
			Message: "replica's node epoch is older than its current registration"})
	}
	now := time.Now()
	sessions := s.sessions()
	switch {
	case m.GetSessionId() != 0:
		sess, serr := sessions.resume(m, now)
		if sess == nil {
			return connect.NewResponse(&storagev1.ReplicateResponse{SessionError: serr}), nil
		}
		return connect.NewResponse(s.replicateSession(ctx, m, sess)), nil
	case m.GetOpenSession():
		sess := sessions.open(m.GetReplicaId(), m.GetNodeEpoch(), now)
		return connect.NewResponse(s.replicateSession(ctx, m, sess)), nil
	default:
		sessions.closeFor(m.GetReplicaId())
		return connect.NewResponse(s.replicateFull(ctx, m)), nil
	}
}

// replicateLimits returns a request's byte limit and the end of its long
// poll.
func replicateLimits(m *storagev1.ReplicateRequest) (maxBytes int, deadline time.Time) {
	maxBytes = int(m.GetMaxBytes())
	if maxBytes == 0 {
		maxBytes = defaultReplicateMaxBytes
	}
	return maxBytes, time.Now().Add(min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, maxLongPoll))
}

// partitionLimit is the byte limit of one partition's read, total bytes
// being in the answer already.
func (s *service) partitionLimit(replicaID int32, p *storagev1.ReplicatePartition, maxBytes, total int) int {
	limit := int(p.GetMaxBytes())
	if limit == 0 {
		limit = defaultPartitionMaxBytes
	}
	limit = s.n.throttle.capReplicate(tpKey{p.GetTopic(), p.GetPartition()}, replicaID, limit) // throttle.go
	return max(min(limit, maxBytes-total), 1)
}

// replicateOne serves one partition of a Replicate into res (whose topic and
// partition are set) and reports whether the result must reach the
// follower whatever else the answer holds (an error, a diverging epoch,
// out of range), and the leader's log end offset (-1 when unknown).
// poller is the fetch session the partition is fetched in, nil for a
// request without one.
func (s *service) replicateOne(ctx context.Context, m *storagev1.ReplicateRequest, r *replica.Replica, p *storagev1.ReplicatePartition,
	poller *replica.Poller, limit int, buf *[]byte, res *storagev1.ReplicatePartitionResult) (urgent bool, leo int64) {
	if r == nil {
		res.Error = s.detail(p.GetTopic(), p.GetPartition(), nil, nil)
		return true, -1
	}
	if *buf == nil && p.GetFetchOffset() < r.Log().LogEndOffset() {
		*buf = readBuf(ctx, limit)
	}
	rr, err := r.Replicate(replica.Fetch{
		ReplicaID: m.GetReplicaId(), NodeEpoch: m.GetNodeEpoch(), LeaderEpoch: p.GetCurrentLeaderEpoch(),
		FetchOffset: p.GetFetchOffset(), LastFetchedEpoch: p.GetLastFetchedEpoch(), LogStart: p.GetLogStartOffset(),
		MaxBytes: limit, Buf: *buf, Poller: poller,
	})
	if err != nil {
		res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
		return true, -1
	}
	res.HighWatermark, res.LogStartOffset = rr.HW, rr.LogStart
	switch {
	case rr.OutOfRange:
		res.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_OUT_OF_RANGE, Reason: commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE,
			Message: "fetch offset below the leader's log start",
			Hint:    &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{LogStartOffset: rr.LogStart, HighWatermark: rr.HW}}}
		res.ProducerState = rr.ProducerState
		urgent = true
	case rr.Diverging:
		res.DivergingEpoch = &storagev1.DivergingEpoch{Epoch: rr.DivergingEpoch, EndOffset: rr.DivergingEnd}
		urgent = true
	}
	res.Records = rr.Records
	return urgent, rr.LEO
}

// replicateFull serves a request that names every partition, in its
// order: the protocol of followers without a session.
func (s *service) replicateFull(ctx context.Context, m *storagev1.ReplicateRequest) *storagev1.ReplicateResponse {
	maxBytes, deadline := replicateLimits(m)
	hw0, start0 := map[int]int64{}, map[int]int64{}
	bufs := make([][]byte, len(m.GetPartitions())) // as in Fetch
	// One channel for the call, signalled by each of its replicas.
	w := newWaiter(&s.sessions().feed)
	defer w.close()
	for round := 0; ; round++ {
		out := &storagev1.ReplicateResponse{}
		total, answer := 0, false
		for i, p := range m.GetPartitions() {
			res := &storagev1.ReplicatePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), HighWatermark: -1, LogStartOffset: -1}
			out.Partitions = append(out.Partitions, res)
			r := s.n.replica(p.GetTopic(), p.GetPartition())
			if r != nil && round == 0 {
				w.watch(r) // before the first read, so no change after it is missed
				hw0[i], start0[i] = r.Log().HighWatermark(), r.Log().LogStartOffset()
			}
			urgent, _ := s.replicateOne(ctx, m, r, p, nil, s.partitionLimit(m.GetReplicaId(), p, maxBytes, total), &bufs[i], res)
			answer = answer || urgent
			total += len(res.Records)
			if r != nil && res.Error == nil && (res.HighWatermark != hw0[i] || res.LogStartOffset != start0[i]) {
				answer = true // a new log start (DeleteRecords) reaches the follower at once
			}
		}
		if answer || total >= max(int(m.GetMinBytes()), 1) || !time.Now().Before(deadline) || !w.watched() {
			s.n.throttle.delayReplicate(ctx, m.GetReplicaId(), out) // throttle.go
			return out
		}
		if !s.park(ctx, w.wake, deadline) {
			return out
		}
	}
}

// park blocks a long poll until wake is signalled or until, when it
// passes first, the deadline. It reports false when the request or the
// node is shutting down, so the caller answers with what it has.
func (s *service) park(ctx context.Context, wake <-chan struct{}, until time.Time) bool {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	resume := quota.Pause(ctx) // waiting is not handling (lib/quota, requests.go)
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	case <-s.n.ctx.Done():
	}
	resume()
	return ctx.Err() == nil && s.n.ctx.Err() == nil
}

// replicateSession serves a request of sess: it records the fetch states
// the request carries, then fetches those partitions, the partitions that
// changed here since the session last fetched them and, once per
// sessionRefresh, all of them; it answers with the partitions that have
// something new, or parks until one has.
func (s *service) replicateSession(ctx context.Context, m *storagev1.ReplicateRequest, sess *replSession) *storagev1.ReplicateResponse {
	sess.poller.Polled(s.n.cfg.Clock.Mono()) // the request fetches every partition the session holds
	maxBytes, deadline := replicateLimits(m)
	refresh := s.sessionRefresh()
	empty := &storagev1.ReplicateResponse{SessionId: sess.id}
	todo := make(map[tpKey]struct{}, len(m.GetPartitions()))
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return &storagev1.ReplicateResponse{SessionError: storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_SESSION_NOT_FOUND}
	}
	for _, p := range m.GetPartitions() {
		sess.set(p)
		todo[tpKey{p.GetTopic(), p.GetPartition()}] = struct{}{}
	}
	for _, tp := range m.GetForgottenPartitions() {
		k := tpKey{tp.GetTopic(), tp.GetPartition()}
		sess.forget(k)
		delete(todo, k)
	}
	sess.mu.Unlock()
	for {
		out, ok := s.sessionRound(ctx, m, sess, todo, maxBytes)
		if !ok {
			return &storagev1.ReplicateResponse{SessionError: storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_SESSION_NOT_FOUND}
		}
		if out != nil || !time.Now().Before(deadline) {
			if out == nil {
				return empty
			}
			s.n.throttle.delayReplicate(ctx, m.GetReplicaId(), out) // throttle.go
			return out
		}
		sess.mu.Lock()
		until := sess.refreshed.Add(refresh)
		if deadline.Before(until) {
			until = deadline
		}
		sess.mu.Unlock()
		if !s.park(ctx, sess.wake, until) {
			return empty
		}
	}
}

// sessionRound is one pass of replicateSession over todo (which it leaves
// holding the partitions to fetch again in the next round): the answer,
// or nil when nothing is new yet; ok is false when the session was closed.
func (s *service) sessionRound(ctx context.Context, m *storagev1.ReplicateRequest, sess *replSession, todo map[tpKey]struct{},
	maxBytes int) (_ *storagev1.ReplicateResponse, ok bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closed {
		return nil, false
	}
	sess.takeDirty(todo)
	if now := time.Now(); now.Sub(sess.refreshed) >= s.sessionRefresh() {
		// A partition neither named nor changed here is fetched again at
		// the follower's last state: in one step when that fetch has
		// nothing to read (Refetch), the usual case, else in full below.
		for k, sp := range sess.parts {
			if _, ok := todo[k]; ok {
				continue
			}
			if p := sp.fetch; sp.r == nil || !sp.r.Refetch(m.GetReplicaId(), m.GetNodeEpoch(), p.GetCurrentLeaderEpoch(), p.GetFetchOffset()) {
				todo[k] = struct{}{}
			}
		}
		sess.refreshed = now
	}
	type result struct {
		sp  *sessionPart
		res *storagev1.ReplicatePartitionResult
	}
	var (
		sent    []result
		pending []tpKey // data left to send
		total   int
		urgent  bool
	)
	for k := range todo {
		sp := sess.parts[k]
		if sp == nil {
			continue // forgotten
		}
		r := s.n.replica(k.topic, k.partition)
		sess.watch(sp, r) // before the read, so no change after it is missed
		p := sp.fetch
		res := &storagev1.ReplicatePartitionResult{Topic: k.topic, Partition: k.partition, HighWatermark: -1, LogStartOffset: -1}
		var buf []byte
		u, leo := s.replicateOne(ctx, m, r, p, sess.poller, s.partitionLimit(m.GetReplicaId(), p, maxBytes, total), &buf, res)
		urgent = urgent || u
		total += len(res.Records)
		changed := res.Error == nil && (res.HighWatermark != sp.sentHW || res.LogStartOffset != sp.sentLogStart)
		if u || changed || len(res.Records) > 0 {
			sent = append(sent, result{sp, res})
			if changed {
				urgent = true
			}
		} else if leo > p.GetFetchOffset() {
			pending = append(pending, k)
		}
	}
	clear(todo)
	if !urgent && total < max(int(m.GetMinBytes()), 1) {
		// Nothing new yet: fetch again what has data, after the wait.
		for _, x := range sent {
			todo[x.sp.key] = struct{}{}
		}
		for _, k := range pending {
			todo[k] = struct{}{}
		}
		return nil, true
	}
	out := &storagev1.ReplicateResponse{SessionId: sess.id, Partitions: make([]*storagev1.ReplicatePartitionResult, len(sent))}
	for i, x := range sent {
		out.Partitions[i] = x.res
		if x.res.Error == nil {
			x.sp.sentHW, x.sp.sentLogStart = x.res.HighWatermark, x.res.LogStartOffset
		}
	}
	for _, k := range pending {
		sess.markDirty(k) // the next call sends it
	}
	return out, true
}
