// Package replica is one partition replica on a storage node: its log, its
// role (leader or follower) as the controller's metadata says, and the
// replication state that decides what is committed.
//
// As leader it tracks each follower's log end offset from their Replicate
// calls, computes the high watermark as the smallest log end offset in the
// ISR (only ever raising it), answers acks=all produces once the high
// watermark passes them, and proposes ISR changes that take effect only
// once the controller accepts them. As follower it appends what the leader
// sends and truncates by leader epoch when its log diverged. See
// docs/design/replication.md.
//
// Concurrency: every method is safe for concurrent use. appendMu
// serialises appends, truncation and role changes; mu guards the state
// fields and is held only briefly. Lock order: appendMu, then mu.
package replica

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Role is what this node does for the partition.
type Role uint8

// The roles. The zero value is RoleNone: no metadata applied yet, or the
// partition has no leader.
const (
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string {
	switch r {
	case RoleLeader:
		return "leader"
	case RoleFollower:
		return "follower"
	}
	return "none"
}

// Acks mirrors the produce acks levels.
type Acks uint8

// The acks levels.
const (
	AcksAll Acks = iota
	AcksLeader
	AcksNone
)

// State is the controller's record of the partition, as metadata or an
// AlterPartition answer carries it.
type State struct {
	LeaderID       int32   // -1 when offline
	LeaderEpoch    int32   // bumped on every leader change
	PartitionEpoch int32   // bumped on every change of the record
	Replicas       []int32 // all replicas
	ISR            []int32 // in-sync replicas, leader included
}

// Config is the per-partition configuration from the topic's configs.
type Config struct {
	// Log configures the partition log.
	Log partlog.Config
	// MinISR is min.insync.replicas. Default 2 when zero.
	MinISR int
}

// Options are the node-wide settings of a replica.
type Options struct {
	// NodeID is this node's id.
	NodeID int32
	// LagTime is replica.lag.time.max: a follower that has not caught up
	// for this long leaves the ISR. Default 10s when zero.
	LagTime time.Duration
	// Logger receives role changes and truncations. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// followerState is the leader's view of one follower.
type followerState struct {
	leo            int64     // last fetch offset at our leader epoch; -1 before the first
	lastCaughtUp   time.Time // last time its fetch reached our log end offset
	lastFetch      time.Time // time of its previous fetch
	leoAtLastFetch int64     // our log end offset at its previous fetch
}

// Replica is one partition replica. Create it with Open.
type Replica struct {
	Topic     string // topic name
	TopicID   string // topic id (UUID text)
	Partition int32  // partition index

	log    *partlog.Log
	cfg    Config
	opts   Options
	logger *slog.Logger

	appendMu  sync.Mutex // serialises appends, truncation and role changes
	producers *producers // idempotence state; guarded by appendMu

	mu               sync.Mutex
	role             Role
	state            State
	pendingISR       []int32 // ISR proposed to the controller, not yet answered; nil if none
	followers        map[int32]*followerState
	epochStartOffset int64         // our log end offset when we became leader
	tierWait         bool          // produce refused until the tier state is applied (AwaitTierState)
	tierEnd          int64         // largest tiered end offset applied (MoveToTieredEnd)
	changed          chan struct{} // closed and replaced on any change of LEO, HW, role or ISR
	closed           bool
}

// Open opens (or creates) the log of a partition replica in dir. The
// replica has no role until ApplyState.
func Open(dir, topic, topicID string, partition int32, cfg Config, opts Options) (*Replica, error) {
	if cfg.MinISR <= 0 {
		cfg.MinISR = 2
	}
	if opts.LagTime <= 0 {
		opts.LagTime = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	logger := opts.Logger.With("topic", topic, "partition", partition)
	l, err := partlog.Open(dir, cfg.Log, partlog.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	r := &Replica{
		Topic: topic, TopicID: topicID, Partition: partition,
		log: l, cfg: cfg, opts: opts, logger: logger,
		state:     State{LeaderID: -1, LeaderEpoch: -1, PartitionEpoch: -1},
		followers: make(map[int32]*followerState),
		changed:   make(chan struct{}),
	}
	r.rebuildProducers()
	return r, nil
}

// Log is the replica's partition log.
func (r *Replica) Log() *partlog.Log { return r.log }

// Close closes the log; later calls fail with ErrClosed. Safe to call twice.
func (r *Replica) Close() error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.role = RoleNone
	r.notifyLocked()
	r.mu.Unlock()
	return r.log.Close()
}

// notifyLocked wakes every waiter. The caller holds mu.
func (r *Replica) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the log end
// offset, high watermark, role or ISR.
func (r *Replica) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// View is a snapshot of the replica's role and state.
type View struct {
	Role       Role
	State      State
	MinISR     int
	HW         int64
	LEO        int64
	LogStart   int64
	Followers  map[int32]FollowerView // leader only
	PendingISR []int32
}

// FollowerView is the leader's view of one follower, for DescribeLog.
type FollowerView struct {
	LEO          int64
	LastCaughtUp time.Time
}

// View returns a snapshot of the replica.
func (r *Replica) View() View {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := View{
		Role: r.role, State: cloneState(r.state), MinISR: r.cfg.MinISR,
		HW: r.log.HighWatermark(), LEO: r.log.LogEndOffset(), LogStart: r.log.LogStartOffset(),
		PendingISR: slices.Clone(r.pendingISR),
	}
	if r.role == RoleLeader {
		v.Followers = make(map[int32]FollowerView, len(r.followers))
		for id, f := range r.followers {
			v.Followers[id] = FollowerView{LEO: f.leo, LastCaughtUp: f.lastCaughtUp}
		}
	}
	return v
}

func cloneState(s State) State {
	s.Replicas = slices.Clone(s.Replicas)
	s.ISR = slices.Clone(s.ISR)
	return s
}

// ApplyState applies the controller's record of the partition. A record
// older than what the replica holds (lower leader epoch, or the same leader
// epoch and a lower partition epoch) is ignored. A new leader epoch makes
// the replica leader or follower; as follower it truncates by epoch on its
// first fetch from the new leader. It reports whether the role, leader or
// leader epoch changed, so the caller restarts replication.
func (r *Replica) ApplyState(st State) (roleChanged bool) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyStateLocked(st)
}

func (r *Replica) applyStateLocked(st State) bool {
	if r.closed {
		return false
	}
	cur := r.state
	if st.LeaderEpoch < cur.LeaderEpoch || (st.LeaderEpoch == cur.LeaderEpoch && st.PartitionEpoch < cur.PartitionEpoch) {
		return false
	}
	if st.LeaderEpoch == cur.LeaderEpoch && st.PartitionEpoch == cur.PartitionEpoch && r.role != RoleNone {
		return false
	}
	newEpoch := st.LeaderEpoch > cur.LeaderEpoch || r.role == RoleNone
	r.state = cloneState(st)
	r.pendingISR = nil
	defer r.notifyLocked()
	if !newEpoch {
		// Same epoch, new ISR: a shrink the controller applied may let
		// the high watermark move.
		r.maybeAdvanceHWLocked()
		return false
	}
	switch {
	case st.LeaderID == r.opts.NodeID:
		r.role = RoleLeader
		r.epochStartOffset = r.log.LogEndOffset()
		now := r.opts.Now()
		r.followers = make(map[int32]*followerState)
		for _, id := range st.Replicas {
			if id != r.opts.NodeID {
				// Every follower gets a full lag time from now to fetch at
				// the new epoch before it can be dropped from the ISR.
				r.followers[id] = &followerState{leo: -1, lastCaughtUp: now, lastFetch: now, leoAtLastFetch: r.epochStartOffset}
			}
		}
	case st.LeaderID >= 0:
		r.role = RoleFollower
		r.followers = make(map[int32]*followerState)
	default:
		r.role = RoleNone
		r.followers = make(map[int32]*followerState)
	}
	// A leader whose ISR is itself alone (RF=1, or every follower out)
	// commits everything it has at once; otherwise this waits for the
	// followers to fetch at the new epoch. Without it a restarted leader
	// kept acknowledged records above its checkpointed high watermark
	// invisible until the next append.
	r.maybeAdvanceHWLocked()
	r.logger.Info("replica role", "role", r.role.String(), "leader", st.LeaderID, "leader_epoch", st.LeaderEpoch,
		"isr", fmt.Sprint(st.ISR), "leo", r.log.LogEndOffset(), "hw", r.log.HighWatermark())
	return true
}

// checkLeaderLocked fences a data-path request that carries epoch (-1
// skips the check) and refuses it unless we lead. The caller holds mu.
func (r *Replica) checkLeaderLocked(epoch int32) error {
	if r.closed {
		return ErrClosed
	}
	if epoch >= 0 {
		if epoch < r.state.LeaderEpoch {
			return fmt.Errorf("%w: request epoch %d, current %d", ErrFencedLeaderEpoch, epoch, r.state.LeaderEpoch)
		}
		if epoch > r.state.LeaderEpoch {
			return fmt.Errorf("%w: request epoch %d, this node knows %d", ErrUnknownLeaderEpoch, epoch, r.state.LeaderEpoch)
		}
	}
	if r.role != RoleLeader {
		return ErrNotLeader
	}
	return nil
}

// CheckLeader is checkLeaderLocked for callers outside the package.
func (r *Replica) CheckLeader(epoch int32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkLeaderLocked(epoch)
}

// effectiveISRLocked is the ISR the high watermark waits for: the
// committed ISR plus any member a pending expansion adds. A pending shrink
// does not drop anyone until the controller accepts it.
func (r *Replica) effectiveISRLocked() []int32 {
	isr := slices.Clone(r.state.ISR)
	for _, id := range r.pendingISR {
		if !slices.Contains(isr, id) {
			isr = append(isr, id)
		}
	}
	return isr
}

// maybeAdvanceHWLocked raises the high watermark to the smallest log end
// offset in the ISR. Followers count only once they have fetched at our
// leader epoch. The caller holds mu and we lead.
func (r *Replica) maybeAdvanceHWLocked() {
	if r.role != RoleLeader {
		return
	}
	hw := r.log.LogEndOffset()
	for _, id := range r.effectiveISRLocked() {
		if id == r.opts.NodeID {
			continue
		}
		f := r.followers[id]
		if f == nil || f.leo < 0 {
			return
		}
		hw = min(hw, f.leo)
	}
	if hw > r.log.HighWatermark() {
		r.log.SetHighWatermark(hw)
		r.notifyLocked()
	}
}

// ProduceResult is the outcome of a produce.
type ProduceResult struct {
	BaseOffset    int64 // offset of the first record; the original one for a duplicate
	LastOffset    int64 // offset of the last record
	LogAppendTime int64 // leader clock at append, Unix ms
	LogStart      int64 // log start offset after the append
	Duplicate     bool  // the batch duplicated an earlier one of the same producer
}

// Produce appends batches as leader at the epoch the producer believes in
// (-1 skips the check) and waits according to acks. For acks=all it
// refuses before the append when the ISR is below min.insync.replicas and
// answers only once the high watermark passes the last offset; it fails
// when the ISR drops below the minimum, leadership moves, or timeout
// passes. batches is modified in place (offsets and epoch stamped).
func (r *Replica) Produce(ctx context.Context, batches []byte, acks Acks, epoch int32, timeout time.Duration) (ProduceResult, error) {
	res, leaderEpoch, err := r.appendAsLeader(ctx, batches, acks, epoch)
	if err != nil || acks != AcksAll {
		return res, err
	}
	return res, r.waitCommitted(ctx, res.LastOffset, leaderEpoch, timeout)
}

func (r *Replica) appendAsLeader(ctx context.Context, batches []byte, acks Acks, epoch int32) (ProduceResult, int32, error) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	if err := r.checkLeaderLocked(epoch); err != nil {
		r.mu.Unlock()
		return ProduceResult{}, 0, err
	}
	if acks == AcksAll && len(r.state.ISR) < r.cfg.MinISR {
		isr := len(r.state.ISR)
		r.mu.Unlock()
		return ProduceResult{}, 0, fmt.Errorf("%w: ISR has %d, min.insync.replicas is %d", ErrNotEnoughReplicas, isr, r.cfg.MinISR)
	}
	if r.tierWait || r.log.LogEndOffset() < r.tierEnd {
		r.mu.Unlock()
		return ProduceResult{}, 0, ErrTierStateUnknown
	}
	leaderEpoch := r.state.LeaderEpoch
	r.mu.Unlock()

	// Idempotence: a duplicate of a remembered batch is answered with its
	// original offsets and not appended again.
	first, err := recordbatch.PeekHeader(batches)
	if err != nil {
		return ProduceResult{}, 0, fmt.Errorf("%w: %w", partlog.ErrInvalidBatch, err)
	}
	if first.ProducerID >= 0 {
		dup, err := r.producers.check(first)
		if err != nil {
			return ProduceResult{}, 0, err
		}
		if dup != nil {
			return ProduceResult{BaseOffset: dup.firstOffset, LastOffset: dup.lastOffset, LogAppendTime: -1,
				LogStart: r.log.LogStartOffset(), Duplicate: true}, leaderEpoch, nil
		}
	}
	info, err := r.log.AppendAsLeader(ctx, batches, leaderEpoch)
	if err != nil && info.Batches == 0 {
		return ProduceResult{}, 0, err
	}
	r.producers.recordAll(batches)
	r.mu.Lock()
	r.notifyLocked()
	r.maybeAdvanceHWLocked()
	r.mu.Unlock()
	if err != nil {
		// Appended, but a FlushSync wait failed: not acknowledged.
		return ProduceResult{}, 0, err
	}
	return ProduceResult{BaseOffset: info.FirstOffset, LastOffset: info.LastOffset, LogAppendTime: info.LogAppendTime,
		LogStart: r.log.LogStartOffset()}, leaderEpoch, nil
}

// waitCommitted waits until the high watermark passes last while we lead
// at leaderEpoch with an ISR of at least min.insync.replicas.
func (r *Replica) waitCommitted(ctx context.Context, last int64, leaderEpoch int32, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		switch {
		case r.closed:
			r.mu.Unlock()
			return ErrClosed
		case r.role != RoleLeader || r.state.LeaderEpoch != leaderEpoch:
			r.mu.Unlock()
			return ErrLeadershipLost
		case len(r.state.ISR) < r.cfg.MinISR:
			isr := len(r.state.ISR)
			r.mu.Unlock()
			return fmt.Errorf("%w: ISR has %d, min.insync.replicas is %d", ErrNotEnoughReplicasAfterAppend, isr, r.cfg.MinISR)
		case r.log.HighWatermark() > last:
			r.mu.Unlock()
			return nil
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return ErrTimedOut
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Read returns batches for a consumer: only below the high watermark.
func (r *Replica) Read(epoch int32, offset int64, maxBytes int) (partlog.ReadResult, error) {
	if err := r.CheckLeader(epoch); err != nil {
		return partlog.ReadResult{}, err
	}
	return r.log.Read(offset, maxBytes, r.log.HighWatermark())
}

// ReplicateResult is the leader's answer to one follower fetch.
type ReplicateResult struct {
	HW, LogStart   int64
	Diverging      bool  // the follower must truncate to DivergingEnd
	DivergingEpoch int32 // largest leader epoch <= the follower's last fetched epoch
	DivergingEnd   int64 // where that epoch ends on the leader
	Records        []byte
	OutOfRange     bool // fetch offset below our log start
	LEO            int64
}

// Replicate serves one follower fetch: it fences the epoch, checks the
// follower's log against our epoch history (KIP-279), records the
// follower's position, advances the high watermark, and reads from
// fetchOffset up to our log end offset.
func (r *Replica) Replicate(follower, epoch int32, fetchOffset int64, lastFetchedEpoch int32, maxBytes int) (ReplicateResult, error) {
	r.mu.Lock()
	if err := r.checkLeaderLocked(epoch); err != nil {
		r.mu.Unlock()
		return ReplicateResult{}, err
	}
	if !slices.Contains(r.state.Replicas, follower) || follower == r.opts.NodeID {
		r.mu.Unlock()
		return ReplicateResult{}, fmt.Errorf("%w: node %d", ErrIneligibleReplica, follower)
	}
	res := ReplicateResult{LogStart: r.log.LogStartOffset(), LEO: r.log.LogEndOffset()}
	if fetchOffset < res.LogStart {
		res.HW = r.log.HighWatermark()
		res.OutOfRange = true
		r.mu.Unlock()
		return res, nil
	}
	// Divergence (KIP-279): the follower's last fetched epoch must end at
	// or after its fetch offset in our history, as the same epoch.
	if lastFetchedEpoch >= 0 || fetchOffset > res.LEO {
		e, end := partlog.UndefinedEpoch, res.LEO
		if lastFetchedEpoch >= 0 {
			e, end = r.log.EndOffsetForEpoch(lastFetchedEpoch)
			if e == partlog.UndefinedEpoch {
				// Newer than our history (we have not written at our own
				// epoch yet): our latest epoch ends at our log end.
				e, end = r.log.LatestEpoch(), res.LEO
			}
		}
		if e != lastFetchedEpoch || end < fetchOffset {
			res.HW = r.log.HighWatermark()
			res.Diverging, res.DivergingEpoch, res.DivergingEnd = true, e, end
			r.mu.Unlock()
			return res, nil
		}
	}
	now := r.opts.Now()
	f := r.followers[follower]
	if f == nil {
		f = &followerState{leo: -1, lastCaughtUp: time.Time{}}
		r.followers[follower] = f
	}
	f.leo = fetchOffset
	if fetchOffset >= res.LEO {
		f.lastCaughtUp = now
	} else if fetchOffset >= f.leoAtLastFetch && f.lastFetch.After(f.lastCaughtUp) {
		f.lastCaughtUp = f.lastFetch
	}
	f.lastFetch, f.leoAtLastFetch = now, res.LEO
	r.maybeAdvanceHWLocked()
	res.HW = r.log.HighWatermark()
	r.mu.Unlock()

	if fetchOffset < res.LEO {
		rr, err := r.log.Read(fetchOffset, maxBytes, res.LEO)
		if err != nil {
			return ReplicateResult{}, err
		}
		res.Records = rr.Batches
	}
	return res, nil
}

// AlterISR is an ISR change the leader proposes to the controller.
type AlterISR struct {
	LeaderEpoch    int32
	PartitionEpoch int32
	NewISR         []int32
}

// ProposeISR returns the ISR change due now, if any, and marks it pending
// (no other proposal is made until AlterISRDone). Followers that have not
// caught up within the lag time leave; followers that fetch at our epoch
// and have reached the high watermark and our epoch start rejoin.
func (r *Replica) ProposeISR() (AlterISR, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.role != RoleLeader || r.pendingISR != nil {
		return AlterISR{}, false
	}
	now := r.opts.Now()
	hw := r.log.HighWatermark()
	var isr []int32
	for _, id := range r.state.ISR {
		if id == r.opts.NodeID {
			isr = append(isr, id)
			continue
		}
		f := r.followers[id]
		if f != nil && now.Sub(f.lastCaughtUp) <= r.opts.LagTime {
			isr = append(isr, id)
		}
	}
	if !slices.Contains(isr, r.opts.NodeID) {
		isr = append(isr, r.opts.NodeID)
	}
	for _, id := range r.state.Replicas {
		if id == r.opts.NodeID || slices.Contains(isr, id) {
			continue
		}
		f := r.followers[id]
		if f != nil && f.leo >= 0 && f.leo >= hw && f.leo >= r.epochStartOffset && now.Sub(f.lastCaughtUp) <= r.opts.LagTime {
			isr = append(isr, id)
		}
	}
	a, b := slices.Clone(isr), slices.Clone(r.state.ISR)
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return AlterISR{}, false
	}
	r.pendingISR = isr
	r.logger.Info("proposing ISR change", "isr", fmt.Sprint(r.state.ISR), "new_isr", fmt.Sprint(isr), "partition_epoch", r.state.PartitionEpoch)
	r.maybeAdvanceHWLocked()
	return AlterISR{LeaderEpoch: r.state.LeaderEpoch, PartitionEpoch: r.state.PartitionEpoch, NewISR: isr}, true
}

// AlterISRDone ends a proposal: st is the controller's answer (the new
// record on success, the current one on failure) or nil when the call
// failed without one. The ISR changes only through st.
func (r *Replica) AlterISRDone(st *State) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pendingISR = nil
	if st != nil {
		r.applyStateLocked(*st)
	}
	r.maybeAdvanceHWLocked()
	r.notifyLocked()
}

// FollowerPosition is what a follower sends in Replicate.
func (r *Replica) FollowerPosition() (fetchOffset int64, lastFetchedEpoch int32, logStart int64) {
	return r.log.LogEndOffset(), r.log.LatestEpoch(), r.log.LogStartOffset()
}

// followingLocked reports whether we still follow at leaderEpoch.
func (r *Replica) followingLocked(leaderEpoch int32) bool {
	return !r.closed && r.role == RoleFollower && r.state.LeaderEpoch == leaderEpoch
}

// AppendFromLeader appends batches fetched from the leader of leaderEpoch
// and adopts min(hw, our log end offset) as high watermark. Nothing is
// appended if we no longer follow at that epoch.
func (r *Replica) AppendFromLeader(ctx context.Context, leaderEpoch int32, batches []byte, hw int64) error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	ok := r.followingLocked(leaderEpoch)
	r.mu.Unlock()
	if !ok {
		return ErrNotLeader
	}
	if len(batches) > 0 {
		if _, err := r.log.AppendAsFollower(ctx, batches); err != nil {
			return err
		}
		r.producers.recordAll(batches)
	}
	r.log.SetHighWatermark(min(hw, r.log.LogEndOffset()))
	r.mu.Lock()
	r.notifyLocked()
	r.mu.Unlock()
	return nil
}

// TruncateDiverging truncates after the leader of leaderEpoch said our log
// diverged: its epoch ends at leaderEnd there. We cut to where that epoch
// ends in both histories (KIP-279); the next fetch checks again, so the
// logs converge in a few rounds. Never to our own high watermark.
func (r *Replica) TruncateDiverging(leaderEpoch, epoch int32, leaderEnd int64) error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	ok := r.followingLocked(leaderEpoch)
	r.mu.Unlock()
	if !ok {
		return ErrNotLeader
	}
	to := leaderEnd
	if epoch >= 0 {
		switch e, end := r.log.EndOffsetForEpoch(epoch); {
		case e == epoch:
			to = min(leaderEnd, end)
		case e != partlog.UndefinedEpoch:
			// We lack that epoch: cut to where our largest older epoch
			// ends; the next fetch compares that one.
			to = end
		}
	}
	leo := r.log.LogEndOffset()
	if to >= leo {
		return nil
	}
	r.logger.Warn("truncating divergent log tail", "from", leo, "to", to, "leader_epoch", leaderEpoch, "diverging_epoch", epoch)
	if err := r.log.TruncateTo(to); err != nil {
		return err
	}
	r.rebuildProducersLocked()
	r.mu.Lock()
	r.notifyLocked()
	r.mu.Unlock()
	return nil
}

// ResetTo empties the log and restarts it at offset, for a follower whose
// log lies wholly below the leader's log start.
func (r *Replica) ResetTo(leaderEpoch int32, offset int64) error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	ok := r.followingLocked(leaderEpoch)
	r.mu.Unlock()
	if !ok {
		return ErrNotLeader
	}
	if err := r.log.TruncateFullyAndStartAt(offset); err != nil {
		return err
	}
	r.rebuildProducersLocked()
	return nil
}

// AwaitTierState holds produce back (ErrTierStateUnknown) until
// MoveToTieredEnd, if the log is empty at offset 0: a replica of a tiered
// topic that lost its directory must not assign offsets the tier already
// holds. It reports whether produce is held; a non-empty log never is.
func (r *Replica) AwaitTierState() bool {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	if r.log.LogEndOffset() != 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tierWait = true
	return true
}

// MoveToTieredEnd applies the tier's state of the partition: end is its
// tiered end offset (<= 0 when nothing is tiered). Everything below end is
// durable in the tier, so a log ending below it (leader or follower) is
// replaced by an empty log starting at end, high watermark end. Produce,
// held by AwaitTierState, is accepted again, and refused while the log end
// is below the largest end applied. It reports whether the log moved.
func (r *Replica) MoveToTieredEnd(end int64) (moved bool, err error) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if leo := r.log.LogEndOffset(); leo < end {
		r.logger.Warn("local log ends below the tiered end; restarting it empty at the tiered end", "leo", leo, "tiered_end", end)
		if err := r.log.TruncateFullyAndStartAt(end); err != nil {
			return false, err
		}
		r.rebuildProducersLocked()
		moved = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tierWait = false
	r.tierEnd = max(r.tierEnd, end)
	if moved {
		r.epochStartOffset = max(r.epochStartOffset, end)
		r.notifyLocked()
	}
	return moved, nil
}

func (r *Replica) rebuildProducers() {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.rebuildProducersLocked()
}

// rebuildProducersLocked rebuilds the idempotence state from the batch
// headers of the last two segments (enough to hold the last few batches of
// every active producer in practice). The caller holds appendMu.
func (r *Replica) rebuildProducersLocked() {
	r.producers = newProducers()
	from := r.log.LogStartOffset()
	if bases := segmentBases(r.log.Dir()); len(bases) >= 2 {
		from = max(from, bases[len(bases)-2])
	}
	end := r.log.LogEndOffset()
	for from < end {
		rr, err := r.log.Read(from, 1<<20, end)
		if err != nil || len(rr.Batches) == 0 {
			if err != nil {
				r.logger.Warn("rebuilding producer state stopped early", "offset", from, "err", err)
			}
			return
		}
		r.producers.recordAll(rr.Batches)
		from = rr.NextOffset
	}
}

// segmentBases lists the base offsets of the segment files in dir, sorted.
func segmentBases(dir string) []int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var bases []int64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || len(name) != 20 {
			continue
		}
		if b, err := strconv.ParseInt(name, 10, 64); err == nil {
			bases = append(bases, b)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases
}

// Dir returns the replica directory name for a partition under dataDir.
func Dir(dataDir, topic string, partition int32) string {
	return filepath.Join(dataDir, fmt.Sprintf("%s-%d", topic, partition))
}
