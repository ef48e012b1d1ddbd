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
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
	"github.com/strata-mq/strata/services/storage/internal/clock"
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
	// LeaderNodeEpoch is the node epoch the record's ISR entry of the
	// leader was made under (KIP-903); 0 when not recorded. A node leads
	// only as that registration: after it registered again (it restarted,
	// maybe with a shorter log) it waits for the controller to elect
	// again, which bumps the leader epoch.
	LeaderNodeEpoch int64
}

// Config is the per-partition configuration from the topic's configs.
type Config struct {
	// Log configures the partition log.
	Log partlog.Config
	// MinISR is min.insync.replicas. Default 2 when zero. acks=all needs
	// an ISR this large, and the high watermark only moves while the ISR
	// is this large (KIP-966) or holds every replica.
	MinISR int
	// Produce is the topic's rules for what producers send (keys,
	// timestamps, codec; see ProduceRules). Zero: none.
	Produce ProduceRules
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
	// Clock measures replica lag (on its monotonic reading). Default
	// clock.System.
	Clock clock.Clock
	// FS holds the log. Default vfs.Default (the OS).
	FS vfs.FS
	// OnLogFailure is called once when the partition log fails (see
	// partlog.WithFailureHook). Default none.
	OnLogFailure func(error)
	// NodeEpoch returns this node's current node epoch (its registration
	// with the controller), 0 while unknown. Nil skips the check of
	// State.LeaderNodeEpoch.
	NodeEpoch func() int64
	// ObserveStage receives the duration of each stage of each acks=all
	// produce this replica leads (stages.go). Nil measures nothing.
	ObserveStage func(Stage, time.Duration)
	// ISRRecheck, when set, is called each time a settled ISR mark is
	// cleared (ISRCheckAt goes to 0): the loop that keeps the marks of
	// every replica of a node (replication.ISRLoop) checks this one at
	// its next pass instead of reading every mark every second. It runs
	// with the replica's lock held: it must be short, and must neither
	// block nor call the replica.
	ISRRecheck func(*Replica)
}

// followerState is the leader's view of one follower: of one incarnation
// of it, the process that registered with nodeEpoch (KIP-903). When the
// node registers again (it restarted, maybe with a shorter or empty log),
// everything learnt from the previous process is forgotten.
type followerState struct {
	// nodeEpoch is the node epoch of the incarnation the other fields
	// describe; 0 while unknown (a new leader before the first fetch).
	nodeEpoch int64
	// leo is that incarnation's last fetch offset at our leader epoch; -1
	// before its first.
	leo int64
	// caughtUp is false while that incarnation has not yet been caught
	// up: lastCaughtUp is then meaningless and the follower out of sync.
	caughtUp bool
	// lastCaughtUp is the clock's monotonic reading of the last time a
	// fetch reached our log end offset.
	lastCaughtUp time.Duration
	// lastFetch is the monotonic reading of its previous fetch, valid when
	// leoAtLastFetch >= 0.
	lastFetch time.Duration
	// leoAtLastFetch is our log end offset at its previous fetch; -1 when
	// there was none.
	leoAtLastFetch int64
	// logStart is the log start offset that incarnation last reported; -1
	// before its first fetch (LowWatermark).
	logStart int64
	// sentUpTo is our log end offset when a fetch of that incarnation
	// last carried records away: the batches below it were measured as
	// fetched (StageFollowerFetch).
	sentUpTo int64
	// poller is the fetch session its last fetch came through, whose
	// later requests fetch again at leo (poller.go); nil when none.
	poller *Poller
}

// reset forgets a follower's previous incarnation: the node registered
// again with nodeEpoch, and until that process fetches, nothing is known
// of its log, and it has not caught up.
func (f *followerState) reset(nodeEpoch int64) {
	*f = followerState{nodeEpoch: nodeEpoch, leo: -1, leoAtLastFetch: -1, logStart: -1}
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

	appendMu sync.Mutex    // serialises appends, truncation and role changes; the idempotence checks run under it
	holding  holds         // produce requests waiting in holdAhead now, bounded (hold.go)
	verified txnVerified   // KIP-890 verifications of transactional producers (txnverify.go)
	holdFor  time.Duration // how long holdAhead waits at most: sequenceHold, longer in tests

	mu         sync.Mutex
	role       Role
	state      State
	pendingISR []int32 // ISR proposed to the controller and not answered; nil if none
	// pendingSent is true while the proposal is in flight; false after a
	// call whose outcome is unknown, so that ProposeISR sends it again.
	pendingSent bool
	// pendingEpochs are the node epochs sent with the pending proposal.
	pendingEpochs    map[int32]int64
	followers        map[int32]*followerState
	epochStartOffset int64 // our log end offset when we became leader
	// creditLEO is the log end offset at the last notifyLocked: what
	// the followers' fetch sessions are counted as fetching at (poller.go).
	creditLEO int64
	// term counts the times this replica stopped leading or had its log
	// cut (truncation, reset, a move to the tiered end). A produce waits
	// for its commit only while the term it appended in lasts: across a
	// new leader epoch that keeps us leader, nothing of our log changed,
	// and the batch is committed once the high watermark passes it.
	term     uint64
	tierWait bool          // produce refused until the tier state is applied (AwaitTierState)
	tierEnd  int64         // largest tiered end offset applied (MoveToTieredEnd)
	changed  chan struct{} // closed and replaced on any change of LEO, HW, role or ISR
	hooks    []*hook       // called at the same changes (Subscribe)
	closed   bool
	// isrCheckAt is the clock's monotonic reading before which ProposeISR
	// would propose nothing (0: check now): set when it finds the ISR
	// settled, to when the first member could fall out of time, and
	// cleared by anything that could unsettle it sooner (recheckISRLocked).
	// Read without mu, so the ISR loop skips a settled replica without
	// taking its lock.
	isrCheckAt atomic.Int64
	stages     stageMarks // recent appends as leader, for Options.ObserveStage (stages.go)

	spanAttrs trace.SpanStartOption // the partition's span attributes, made once (tracing.go)
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
	if opts.Clock == nil {
		opts.Clock = clock.System
	}
	logger := opts.Logger.With("topic", topic, "partition", partition)
	l, err := partlog.Open(dir, cfg.Log, partlog.WithLogger(logger), partlog.WithFS(opts.FS), partlog.WithFailureHook(opts.OnLogFailure))
	if err != nil {
		return nil, err
	}
	r := &Replica{
		Topic: topic, TopicID: topicID, Partition: partition,
		log: l, cfg: cfg, opts: opts, logger: logger,
		state:     State{LeaderID: -1, LeaderEpoch: -1, PartitionEpoch: -1},
		followers: make(map[int32]*followerState),
		creditLEO: l.LogEndOffset(),
		changed:   make(chan struct{}),
		spanAttrs: spanAttrs(topic, partition),
		holding:   holds{limits: defaultHoldLimits},
		holdFor:   sequenceHold,
	}
	return r, nil
}

// Log is the replica's partition log.
func (r *Replica) Log() *partlog.Log { return r.log }

// Config returns the configuration in force.
func (r *Replica) Config() Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// SetConfig applies a changed topic configuration to the open replica:
// the log's part at once (flush policy, retention, segment and batch
// limits; see partlog.Log.Reconfigure), and min.insync.replicas to the
// next produce, to produces waiting for acks=all (which fail with
// ErrNotEnoughReplicasAfterAppend if the ISR is now too small) and to the
// high watermark. An invalid configuration changes nothing.
func (r *Replica) SetConfig(cfg Config) error {
	if cfg.MinISR <= 0 {
		cfg.MinISR = 2
	}
	if err := r.log.Reconfigure(cfg.Log); err != nil {
		return err
	}
	if cfg.Log.Flush.Mode == partlog.FlushSync && r.Config().Log.Flush.Mode != partlog.FlushSync {
		// The high watermark now counts our log only up to its fsynced
		// end: fsync what was appended before, or it would wait for the
		// next append.
		if err := r.log.Flush(context.Background()); err != nil {
			r.logger.Warn("flush on switching to flush.messages=1 failed", "err", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.MinISR != cfg.MinISR || r.cfg.Log.Flush != cfg.Log.Flush {
		r.logger.Info("replica configuration changed", "min_insync_replicas", cfg.MinISR, "flush", cfg.Log.Flush.Mode.String())
	}
	r.cfg = cfg
	r.maybeAdvanceHWLocked()
	r.notifyLocked()
	return nil
}

// Close closes the log; later calls fail with ErrClosed. Safe to call twice.
func (r *Replica) Close() error { return r.stop(r.log.Close) }

// Discard closes a replica whose directory is removed next, writing
// nothing to its log (partlog.Log.Discard).
func (r *Replica) Discard() error { return r.stop(r.log.Discard) }

// stop ends the replica's role, wakes its waiters and closes its log with
// closeLog, under the append lock; nil when it was closed already.
func (r *Replica) stop(closeLog func() error) error {
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
	return closeLog()
}

// notifyLocked wakes every waiter, after recording what the followers'
// fetch sessions fetched at the log end it had (creditPollsLocked). The
// caller holds mu.
func (r *Replica) notifyLocked() {
	if leo := r.log.LogEndOffset(); leo != r.creditLEO {
		r.creditPollsLocked()
		r.creditLEO = leo
	}
	close(r.changed)
	r.changed = make(chan struct{})
	for _, h := range r.hooks {
		h.fn()
	}
	r.recheckISRLocked()
}

// hook is one Subscribe.
type hook struct{ fn func() }

// Subscribe calls fn after every change of the log end offset, high
// watermark, log start, role or ISR made after Subscribe returns, until
// cancel (which may be called more than once). fn runs with the replica's
// lock held, in the goroutine that made the change: it must be short, and
// must neither block nor call the replica. A wait over many replicas
// subscribes to each with one channel of its own instead of selecting
// over their Changed channels.
func (r *Replica) Subscribe(fn func()) (cancel func()) {
	h := &hook{fn: fn}
	r.mu.Lock()
	r.hooks = append(r.hooks, h)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if i := slices.Index(r.hooks, h); i >= 0 {
			r.hooks = slices.Delete(r.hooks, i, i+1)
		}
	}
}

// recheckISRLocked makes the next ProposeISR look at the ISR again: a
// change of role, records, high watermark or followers may unsettle it.
// The first clearing of a mark is told to Options.ISRRecheck.
func (r *Replica) recheckISRLocked() {
	if r.isrCheckAt.Swap(0) != 0 && r.opts.ISRRecheck != nil {
		r.opts.ISRRecheck(r)
	}
}

// ISRCheckAt is the clock's monotonic reading (Options.Clock, in
// nanoseconds) before which ProposeISR would propose nothing: 0 when it
// may propose now, math.MaxInt64 when only a change would let it (not
// leading). Only ProposeISR raises it; anything that clears it again
// calls Options.ISRRecheck.
func (r *Replica) ISRCheckAt() int64 { return r.isrCheckAt.Load() }

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
	NodeEpoch    int64     // incarnation the view describes; 0 while unknown
	LEO          int64     // -1 before that incarnation's first fetch at our epoch
	LastCaughtUp time.Time // wall time, for display; zero if never
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
			fv := FollowerView{NodeEpoch: f.nodeEpoch, LEO: f.leo}
			if f.caughtUp {
				fv.LastCaughtUp = clock.WallAt(r.opts.Clock, r.lastCaughtUpLocked(f))
			}
			v.Followers[id] = fv
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
	stale := st.LeaderID == r.opts.NodeID && !r.leadsAsLocked(st)
	newEpoch := st.LeaderEpoch > cur.LeaderEpoch || r.role == RoleNone || (stale && r.role == RoleLeader)
	r.state = cloneState(st)
	// A newer record settles any pending proposal: it was made against an
	// older partition epoch, so either this record is its outcome or its
	// compare-and-set failed.
	r.pendingISR, r.pendingSent, r.pendingEpochs = nil, false, nil
	defer r.notifyLocked()
	if !newEpoch {
		// A follower the record removes from the replicas is forgotten at
		// once (Kafka's updateAssignmentAndIsr): its directory is deleted,
		// and if a later record adds it back, what it fetched before must
		// count for nothing, neither toward the high watermark nor toward
		// its return to the ISR. The controller also bumps the leader
		// epoch when it removes replicas (metastore's reassign.go), so this
		// matters only for a record that does not.
		for id := range r.followers {
			if !slices.Contains(st.Replicas, id) {
				delete(r.followers, id)
			}
		}
		// Same epoch, new ISR: a shrink the controller applied may let
		// the high watermark move.
		r.maybeAdvanceHWLocked()
		return false
	}
	if r.role == RoleLeader && (st.LeaderID != r.opts.NodeID || stale) {
		r.term++
	}
	switch {
	case stale:
		r.role = RoleNone
		r.followers = make(map[int32]*followerState)
		r.logger.Warn("record names this node leader under an earlier registration; waiting for the controller to elect again",
			"leader_epoch", st.LeaderEpoch, "recorded_node_epoch", st.LeaderNodeEpoch)
		return true
	case st.LeaderID == r.opts.NodeID:
		r.role = RoleLeader
		r.epochStartOffset = r.log.LogEndOffset()
		r.stages.reset()
		now := r.opts.Clock.Mono()
		r.followers = make(map[int32]*followerState)
		for _, id := range st.Replicas {
			if id != r.opts.NodeID {
				// Every follower gets a full lag time from now to fetch at
				// the new epoch before it can be dropped from the ISR.
				r.followers[id] = &followerState{leo: -1, caughtUp: true, lastCaughtUp: now, lastFetch: now, leoAtLastFetch: r.epochStartOffset, logStart: -1}
			}
		}
	case st.LeaderID >= 0:
		r.role = RoleFollower
		r.followers = make(map[int32]*followerState)
	default:
		r.role = RoleNone
		r.followers = make(map[int32]*followerState)
	}
	// A leader whose ISR is itself alone and large enough (RF=1) commits
	// everything it has at once; otherwise this waits for the followers to
	// fetch at the new epoch. Without it a restarted leader kept
	// acknowledged records above its checkpointed high watermark invisible
	// until the next append.
	r.maybeAdvanceHWLocked()
	r.logger.Info("replica role", "role", r.role.String(), "leader", st.LeaderID, "leader_epoch", st.LeaderEpoch,
		"isr", fmt.Sprint(st.ISR), "leo", r.log.LogEndOffset(), "hw", r.log.HighWatermark())
	return true
}

// leadsAsLocked reports whether this node may lead under st: its ISR
// entry of the leader was made under this node's current registration
// (or records none). The caller holds mu.
func (r *Replica) leadsAsLocked(st State) bool {
	if st.LeaderNodeEpoch == 0 || r.opts.NodeEpoch == nil {
		return true
	}
	return r.opts.NodeEpoch() == st.LeaderNodeEpoch
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

// effectiveISRLocked is the ISR the high watermark waits for: the maximal
// ISR, the committed ISR plus any member a pending expansion adds (the
// controller may already have added it, and may elect it). A pending
// shrink does not drop anyone until the controller accepts it; an
// expansion stays pending until its outcome is known.
func (r *Replica) effectiveISRLocked() []int32 {
	isr := slices.Clone(r.state.ISR)
	for _, id := range r.pendingISR {
		if !slices.Contains(isr, id) {
			isr = append(isr, id)
		}
	}
	return isr
}

// minISRLocked is the ISR size below which the high watermark stands
// still: min.insync.replicas, or every replica when there are fewer (a
// min.insync.replicas above the replication factor refuses acks=all, as
// Kafka does, but must not freeze the log for consumers).
func (r *Replica) minISRLocked() int {
	return max(1, min(r.cfg.MinISR, len(r.state.Replicas)))
}

// maybeAdvanceHWLocked raises the high watermark to the smallest log end
// offset in the ISR. Followers count only once they have fetched at our
// leader epoch. It does nothing while the committed ISR is smaller than
// min.insync.replicas (KIP-966): a record is visible to consumers only
// once at least that many replicas hold it, so a leader left alone that
// loses its unflushed tail cannot hand out again offsets consumers read.
// Under flush.messages=1 our own log counts only up to what is fsynced.
// The caller holds mu and we lead.
func (r *Replica) maybeAdvanceHWLocked() {
	if r.role != RoleLeader || len(r.state.ISR) < r.minISRLocked() {
		return
	}
	hw := r.log.LogEndOffset()
	if r.cfg.Log.Flush.Mode == partlog.FlushSync {
		// Below the log start nothing is held here to lose.
		hw = min(hw, max(r.log.RecoveryPoint(), r.log.LogStartOffset()))
	}
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
	if old := r.log.HighWatermark(); hw > old {
		r.log.SetHighWatermark(hw)
		r.notifyLocked()
		if r.opts.ObserveStage != nil {
			now := r.opts.Clock.Mono()
			r.stages.each(old, hw, func(m appendMark) { r.observe(StageCommit, now-m.at) })
			r.stages.hwAt = now
			r.stages.dropBelow(hw)
		}
	}
}

// ProduceResult is the outcome of a produce.
type ProduceResult struct {
	BaseOffset    int64 // offset of the first record; the original one for a duplicate
	LastOffset    int64 // offset of the last record
	LogAppendTime int64 // the time stamped on the batches (ProduceRules.LogAppendTime), Unix ms; else -1
	LogStart      int64 // log start offset after the append
	Duplicate     bool  // the batch duplicated an earlier one of the same producer
	Held          bool  // it arrived ahead of its producer's sequence and waited for the batches before it
}

// Produce appends batches as leader at the epoch the producer believes in
// (-1 skips the check) and waits according to acks. Every batch is first
// validated as a producer's batch (recordbatch.ValidateProducedFor, with
// the topic's ProduceRules) and checked against the idempotence rules (checkProducers); one failure
// refuses the whole request before anything is appended, except that a
// producer's batch ahead of its next sequence is first held for the
// batches before it (holdAhead). A request whose batches were all
// appended before is answered with their original offsets and Duplicate
// set. For acks=all it refuses before the append
// when the ISR is below min.insync.replicas and answers only once the high
// watermark passes the last offset; it fails when the ISR drops below the
// minimum, leadership moves, or timeout passes. batches is modified in
// place (offsets and epoch stamped, and the log-append time), unless the
// topic's codec differs: then recompressed copies are appended.
func (r *Replica) Produce(ctx context.Context, batches []byte, acks Acks, epoch int32, timeout time.Duration) (ProduceResult, error) {
	return r.ProduceTxn(ctx, batches, acks, epoch, timeout, nil)
}

// ProduceTxn is Produce for a request that may hold transactional
// batches: verify asks the producer's transaction coordinator whether
// this partition is in the producer's transaction (KIP-890 part 1), and
// is called, before the append lock, for a producer whose first
// transactional batch of a transaction this is (verifyTxn). nil refuses
// every transactional batch.
func (r *Replica) ProduceTxn(ctx context.Context, batches []byte, acks Acks, epoch int32, timeout time.Duration, verify TxnVerifier) (ProduceResult, error) {
	a, err := r.produceAppend(ctx, batches, acks, epoch, min(timeout, r.holdFor), verify)
	if err != nil {
		return a.res, err
	}
	return a.Wait(ctx, timeout)
}

// Appended is a produce whose batches are in the log (or were already:
// a duplicate) and, for acks=all, not yet known to be committed: Wait
// answers it.
type Appended struct {
	r       *Replica
	res     ProduceResult
	at      leadership
	acks    Acks
	arrived time.Duration // for Options.ObserveStage
}

// ProduceAppend is ProduceTxn's first half, for a caller that appends to
// several partitions in turn and then waits for them (one goroutine for a
// request over many partitions instead of one per partition): it returns
// once the batches are appended or refused, and Wait answers the produce.
// A batch ahead of its producer's sequence is not held as in ProduceTxn:
// the error then satisfies IsAhead, nothing was appended, and the caller
// makes the produce with ProduceTxn, which holds it.
func (r *Replica) ProduceAppend(ctx context.Context, batches []byte, acks Acks, epoch int32, verify TxnVerifier) (*Appended, error) {
	return r.produceAppend(ctx, batches, acks, epoch, 0, verify)
}

// IsAhead reports whether ProduceAppend refused a batch as ahead of its
// producer's sequence, which ProduceTxn would have held.
func IsAhead(err error) bool { return errors.Is(err, errSequenceAhead) }

// produceAppend checks, validates and appends batches, holding a batch
// ahead of its sequence for up to hold (none when hold is 0).
func (r *Replica) produceAppend(ctx context.Context, batches []byte, acks Acks, epoch int32, hold time.Duration, verify TxnVerifier) (*Appended, error) {
	a := &Appended{r: r, acks: acks}
	// Validation reads every record, so it runs before the append lock:
	// concurrent producers of a partition validate in parallel. A node
	// that does not lead says so first (and again under the lock), so a
	// producer with stale metadata learns of the leader, not of its batch.
	if r.opts.ObserveStage != nil {
		a.arrived = r.opts.Clock.Mono()
	}
	if err := r.CheckLeader(epoch); err != nil {
		return a, err
	}
	cfg := r.Config()
	maxBatch := cfg.Log.MaxBatchBytes
	if maxBatch <= 0 {
		maxBatch = partlog.DefaultMaxBatchBytes
	}
	now := r.opts.Clock.Wall().UnixMilli()
	hdrs, err := validateRequest(batches, maxBatch, cfg.Produce.topicRules(now))
	if err != nil {
		return a, err
	}
	if err := r.verifyTxn(ctx, hdrs, verify); err != nil { // txnverify.go
		return a, err
	}
	if batches, err = cfg.Produce.rewrite(batches, now); err != nil { // topicrules.go
		return a, err
	}
	a.res, a.at, err = r.tracedAppend(ctx, batches, hdrs, acks, epoch) // tracing.go
	if err == nil {
		a.res.LogAppendTime = -1
		if cfg.Produce.LogAppendTime && !a.res.Duplicate {
			a.res.LogAppendTime = now
		}
	}
	if errors.Is(err, errSequenceAhead) && hold > 0 {
		a.res, a.at, err = r.holdAhead(ctx, batches, hdrs, acks, epoch, hold, maxBatch, err)
	}
	if err == nil && acks == AcksAll && r.opts.ObserveStage != nil && !a.res.Duplicate {
		r.observeSince(StageAppend, a.arrived)
	}
	return a, err
}

// Replica is the replica appended to.
func (a *Appended) Replica() *Replica { return a.r }

// Wait answers an appended produce: at once for acks other than all,
// else once the high watermark passes its last offset. It fails when the
// ISR drops below min.insync.replicas, leadership moves, ctx ends, or
// timeout passes (<= 0: the commit is checked once, not waited for).
func (a *Appended) Wait(ctx context.Context, timeout time.Duration) (ProduceResult, error) {
	r := a.r
	if a.acks != AcksAll {
		return a.res, nil
	}
	if err := r.tracedWaitCommitted(ctx, a.res.LastOffset, a.at, timeout); err != nil {
		return a.res, err
	}
	if r.opts.ObserveStage != nil && !a.res.Duplicate {
		r.observeSince(StageTotal, a.arrived)
	}
	return a.res, nil
}

// sequenceHold bounds how long Produce holds a batch that is ahead of its
// producer's next sequence (errSequenceAhead) for the batches before it to
// arrive. A producer with several batches in flight sends them in order,
// but the calls that carry them are served concurrently, so the second
// can reach the log first; it waits here rather than failing and being
// sent again. A batch whose predecessors were lost (their call failed)
// is refused with ErrOutOfOrderSequence after the hold, and the producer
// resends in order.
const sequenceHold = time.Second

// holdAhead waits, without the append lock, for the log to change and
// tries the append again, until the batches are no longer ahead of their
// sequence, the request ends, or hold passes. err is the first attempt's
// errSequenceAhead, returned when the hold ends without an append. A
// request past the hold's bounds (hold.go) is refused at once with
// errHoldFull; maxBatch is the partition's batch limit.
func (r *Replica) holdAhead(ctx context.Context, batches []byte, hdrs []recordbatch.Header, acks Acks, epoch int32,
	hold time.Duration, maxBatch int, err error) (ProduceResult, leadership, error) {
	var gap *aheadError
	if !errors.As(err, &gap) {
		return ProduceResult{}, leadership{}, err
	}
	pid, n := gap.producerID, int64(len(batches))
	if !r.holding.acquire(pid, n, maxBatch) {
		return ProduceResult{}, leadership{}, fmt.Errorf("%w (producer %d)", errHoldFull, pid)
	}
	defer r.holding.release(pid, n)
	timer := time.NewTimer(hold)
	defer timer.Stop()
	var (
		res ProduceResult
		at  leadership
	)
	for {
		if !errors.As(err, &gap) {
			res.Held = err == nil
			return res, at, err
		}
		resume := quota.Pause(ctx) // a wait, not handling
		select {
		case <-gap.changed:
		case <-timer.C:
			resume()
			return ProduceResult{}, leadership{}, gap.err
		case <-ctx.Done():
			resume()
			return ProduceResult{}, leadership{}, gap.err
		}
		resume()
		res, at, err = r.tracedAppend(ctx, batches, hdrs, acks, epoch)
	}
}

// HoldingAhead is the number of produce requests waiting now for an
// idempotent producer's earlier batches (holdAhead).
func (r *Replica) HoldingAhead() int { return r.holding.requests() }

// aheadError is errSequenceAhead for the batch of producerID, with the
// replica's change channel as it was under the append lock (set by
// appendAsLeader), so no append between the check and the wait goes
// unseen.
type aheadError struct {
	err        error
	producerID int64
	changed    <-chan struct{}
}

func (e *aheadError) Error() string { return e.err.Error() }
func (e *aheadError) Unwrap() error { return e.err }

// leadership is when a batch was appended: the leader epoch it was stamped
// with and the replica's term (see Replica.term), which decides whether
// its commit can still be waited for.
type leadership struct {
	epoch int32
	term  uint64
}

func (r *Replica) appendAsLeader(ctx context.Context, batches []byte, hdrs []recordbatch.Header, acks Acks, epoch int32) (ProduceResult, leadership, error) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	if err := r.checkLeaderLocked(epoch); err != nil {
		r.mu.Unlock()
		return ProduceResult{}, leadership{}, err
	}
	if acks == AcksAll && len(r.state.ISR) < r.cfg.MinISR {
		isr := len(r.state.ISR)
		r.mu.Unlock()
		return ProduceResult{}, leadership{}, fmt.Errorf("%w: ISR has %d, min.insync.replicas is %d", ErrNotEnoughReplicas, isr, r.cfg.MinISR)
	}
	if r.tierWait || r.log.LogEndOffset() < r.tierEnd {
		r.mu.Unlock()
		return ProduceResult{}, leadership{}, ErrTierStateUnknown
	}
	at := leadership{epoch: r.state.LeaderEpoch, term: r.term}
	leaderEpoch := at.epoch
	r.mu.Unlock()

	// Idempotence: every batch is checked; duplicates are answered with
	// their original offsets and not appended again. The log records the
	// appended batches in its producer state.
	dup, err := checkProducers(r.log, hdrs)
	if ahead, ok := err.(*aheadError); ok {
		r.mu.Lock()
		ahead.changed = r.changed
		r.mu.Unlock()
		return ProduceResult{}, leadership{}, ahead
	}
	if err != nil {
		return ProduceResult{}, leadership{}, err
	}
	if dup != nil {
		return ProduceResult{BaseOffset: dup.firstOffset, LastOffset: dup.lastOffset, LogAppendTime: -1,
			LogStart: r.log.LogStartOffset(), Duplicate: true}, at, nil
	}
	if err := r.checkTxnVerified(hdrs, at.term); err != nil { // txnverify.go
		return ProduceResult{}, leadership{}, err
	}
	info, err := r.log.AppendAsLeader(ctx, batches, leaderEpoch)
	if err != nil && info.Batches == 0 {
		return ProduceResult{}, leadership{}, err
	}
	r.mu.Lock()
	if r.opts.ObserveStage != nil && acks == AcksAll {
		r.stages.add(info.LastOffset, r.opts.Clock.Mono())
	}
	r.notifyLocked()
	r.maybeAdvanceHWLocked()
	r.mu.Unlock()
	if err != nil {
		// Appended, but a FlushSync wait failed: not acknowledged.
		return ProduceResult{}, leadership{}, err
	}
	return ProduceResult{BaseOffset: info.FirstOffset, LastOffset: info.LastOffset, LogAppendTime: info.LogAppendTime,
		LogStart: r.log.LogStartOffset()}, at, nil
}

// waitCommitted waits until the high watermark passes last while we lead
// in the term the batch was appended in (a newer leader epoch that keeps
// us leader does not end it) with an ISR of at least min.insync.replicas.
func (r *Replica) waitCommitted(ctx context.Context, last int64, at leadership, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for waited := false; ; waited = true {
		r.mu.Lock()
		switch {
		case r.closed:
			r.mu.Unlock()
			return ErrClosed
		case r.role != RoleLeader || r.term != at.term:
			r.mu.Unlock()
			return ErrLeadershipLost
		case len(r.state.ISR) < r.cfg.MinISR:
			isr := len(r.state.ISR)
			r.mu.Unlock()
			return fmt.Errorf("%w: ISR has %d, min.insync.replicas is %d", ErrNotEnoughReplicasAfterAppend, isr, r.cfg.MinISR)
		case r.log.HighWatermark() > last:
			if waited && r.opts.ObserveStage != nil {
				r.observeSince(StageWakeup, r.stages.hwAt)
			}
			r.mu.Unlock()
			return nil
		}
		ch := r.changed
		r.mu.Unlock()
		if err := waitCommit(ctx, ch, timer.C); err != nil {
			return err
		}
	}
}

// waitCommit waits for the replica to change, the timeout or ctx, outside
// the request's handling time (lib/quota's Pause): an acks=all produce
// waiting for its followers costs its principal's request quota nothing,
// as a Kafka produce in the purgatory holds no handler thread.
func waitCommit(ctx context.Context, changed <-chan struct{}, timeout <-chan time.Time) error {
	defer quota.Pause(ctx)()
	select {
	case <-changed:
		return nil
	case <-timeout:
		return ErrTimedOut
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read returns batches for a consumer: only below the high watermark.
func (r *Replica) Read(epoch int32, offset int64, maxBytes int) (partlog.ReadResult, error) {
	return r.ReadInto(nil, epoch, offset, maxBytes, true)
}

// ReadInto is Read into a caller-supplied buffer (partlog.Log.ReadInto):
// the result's Batches aliases buf when buf has the capacity for the read.
// Without minOne a first batch over maxBytes is not read
// (partlog.Log.ReadIntoWithin).
func (r *Replica) ReadInto(buf []byte, epoch int32, offset int64, maxBytes int, minOne bool) (partlog.ReadResult, error) {
	if err := r.CheckLeader(epoch); err != nil {
		return partlog.ReadResult{}, err
	}
	if !minOne {
		return r.log.ReadIntoWithin(buf, offset, maxBytes, r.log.HighWatermark())
	}
	return r.log.ReadInto(buf, offset, maxBytes, r.log.HighWatermark())
}

// ReplicateResult is the leader's answer to one follower fetch.
type ReplicateResult struct {
	HW, LogStart   int64
	Diverging      bool  // the follower must truncate to DivergingEnd
	DivergingEpoch int32 // largest leader epoch <= the follower's last fetched epoch
	DivergingEnd   int64 // where that epoch ends on the leader
	Records        []byte
	OutOfRange     bool // fetch offset below our log start
	// ProducerState is, with OutOfRange, our producer state as of
	// LogStart (partlog's ProducerStateAt), for the follower to start its
	// log with; nil if it could not be read.
	ProducerState []byte
	LEO           int64
}

// Fetch is one follower's Replicate request for this partition.
type Fetch struct {
	ReplicaID        int32 // the follower's node id
	NodeEpoch        int64 // the follower's node epoch: which incarnation fetches
	LeaderEpoch      int32 // the leader epoch it follows; -1 skips the check
	FetchOffset      int64 // its log end offset
	LastFetchedEpoch int32 // epoch of its last batch; -1 for an empty log
	LogStart         int64 // its log start offset (LowWatermark)
	MaxBytes         int   // limit on the records returned
	// Buf, when not nil, is the buffer to read into: the result's Records
	// aliases it when it has the capacity (partlog.Log.ReadInto).
	Buf []byte
	// Poller is the fetch session the fetch came in, nil for a request
	// without one: its later requests count as fetches at this fetch's
	// offset while that is our log end (poller.go).
	Poller *Poller
}

// Replicate serves one follower fetch: it fences the epoch and the node
// epoch, checks the follower's log against our epoch history (KIP-279),
// records the follower's position, advances the high watermark, and reads
// from the fetch offset up to our log end offset.
//
// The position counts for the incarnation that sent it (KIP-903): a fetch
// from a newer node epoch than the one recorded means the follower
// restarted, and what was known of its previous process is forgotten
// first; a fetch from an older one (a request of a dead process arriving
// late) is refused with ErrStaleNodeEpoch.
func (r *Replica) Replicate(req Fetch) (ReplicateResult, error) {
	r.mu.Lock()
	if err := r.checkLeaderLocked(req.LeaderEpoch); err != nil {
		r.mu.Unlock()
		return ReplicateResult{}, err
	}
	id := req.ReplicaID
	if !slices.Contains(r.state.Replicas, id) || id == r.opts.NodeID {
		r.mu.Unlock()
		return ReplicateResult{}, fmt.Errorf("%w: node %d", ErrIneligibleReplica, id)
	}
	f := r.followers[id]
	if f == nil {
		f = &followerState{}
		f.reset(0)
		r.followers[id] = f
	}
	switch {
	case req.NodeEpoch <= 0 || req.NodeEpoch < f.nodeEpoch:
		cur := f.nodeEpoch
		r.mu.Unlock()
		return ReplicateResult{}, fmt.Errorf("%w: node %d fetches with node epoch %d, its current one is %d", ErrStaleNodeEpoch, id, req.NodeEpoch, cur)
	case f.nodeEpoch == 0:
		f.nodeEpoch = req.NodeEpoch
	case req.NodeEpoch > f.nodeEpoch:
		r.forgetIncarnationLocked(id, f, req.NodeEpoch)
	}
	f.poller = nil // until this fetch is recorded
	res := ReplicateResult{LogStart: r.log.LogStartOffset(), LEO: r.log.LogEndOffset()}
	if req.FetchOffset < res.LogStart {
		res.HW = r.log.HighWatermark()
		res.OutOfRange = true
		r.mu.Unlock()
		if ps, err := r.log.ProducerStateAt(res.LogStart); err == nil {
			res.ProducerState = ps
		} else {
			r.logger.Warn("cannot read the producer state for a follower starting at our log start", "follower", id, "err", err)
		}
		return res, nil
	}
	// Divergence (KIP-279): the follower's last fetched epoch must end at
	// or after its fetch offset in our history, as the same epoch.
	if req.LastFetchedEpoch >= 0 || req.FetchOffset > res.LEO {
		e, end := partlog.UndefinedEpoch, res.LEO
		if req.LastFetchedEpoch >= 0 {
			e, end = r.log.EndOffsetForEpoch(req.LastFetchedEpoch)
			if e == partlog.UndefinedEpoch {
				// Newer than our history (we have not written at our own
				// epoch yet): our latest epoch ends at our log end.
				e, end = r.log.LatestEpoch(), res.LEO
			}
		}
		if e != req.LastFetchedEpoch || end < req.FetchOffset {
			res.HW = r.log.HighWatermark()
			res.Diverging, res.DivergingEpoch, res.DivergingEnd = true, e, end
			r.mu.Unlock()
			return res, nil
		}
	}
	now := r.opts.Clock.Mono()
	if r.opts.ObserveStage != nil {
		if f.leo >= 0 && req.FetchOffset > f.leo {
			r.stages.each(f.leo, req.FetchOffset, func(m appendMark) { r.observe(StageFollowerAck, now-m.at) })
		}
		if req.FetchOffset < res.LEO {
			r.stages.each(max(req.FetchOffset, f.sentUpTo), res.LEO, func(m appendMark) { r.observe(StageFollowerFetch, now-m.at) })
			f.sentUpTo = res.LEO
		}
	}
	r.recordFetchLocked(id, f, req.FetchOffset, res.LEO, now)
	f.poller = req.Poller
	if req.LogStart > f.logStart {
		// A DeleteRecords may be waiting for the low watermark.
		f.logStart = req.LogStart
		r.notifyLocked()
	}
	r.maybeAdvanceHWLocked()
	res.HW = r.log.HighWatermark()
	r.mu.Unlock()

	if req.FetchOffset < res.LEO {
		rr, err := r.log.ReadInto(req.Buf, req.FetchOffset, req.MaxBytes, res.LEO)
		if err != nil {
			return ReplicateResult{}, err
		}
		res.Records = rr.Batches
	}
	return res, nil
}

// Refetch records a fetch of follower id that repeats its last one with
// nothing to read: the same incarnation and leader epoch, at the fetch
// offset it last fetched, which is our log end. A fetch session's
// periodic pass over every partition it holds (a safety net; the session's
// Poller counts its requests otherwise, see the storage server's
// replicate.go) records such a fetch this way; Replicate would record the
// same, at several times the cost. It records nothing and reports
// false when the fetch is not such a repeat: the caller then makes it
// with Replicate.
func (r *Replica) Refetch(id int32, nodeEpoch int64, leaderEpoch int32, fetchOffset int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if leaderEpoch < 0 || r.checkLeaderLocked(leaderEpoch) != nil {
		return false
	}
	f := r.followers[id]
	if f == nil || f.nodeEpoch <= 0 || f.nodeEpoch != nodeEpoch || f.leo != fetchOffset || fetchOffset != r.log.LogEndOffset() {
		return false
	}
	r.recordFetchLocked(id, f, fetchOffset, fetchOffset, r.opts.Clock.Mono())
	return true
}

// recordFetchLocked records follower id's fetch at fetchOffset, made at
// now when our log ended at leo: its position and, by Kafka's rule, when
// it was last caught up. The caller holds mu.
func (r *Replica) recordFetchLocked(id int32, f *followerState, fetchOffset, leo int64, now time.Duration) {
	f.leo = fetchOffset
	switch {
	case fetchOffset >= leo:
		f.lastCaughtUp, f.caughtUp = now, true
	case f.leoAtLastFetch >= 0 && fetchOffset >= f.leoAtLastFetch && (!f.caughtUp || f.lastFetch > f.lastCaughtUp):
		// This fetch reached what we had at its previous one: it was
		// caught up then.
		f.lastCaughtUp, f.caughtUp = f.lastFetch, true
	}
	f.lastFetch, f.leoAtLastFetch = now, leo
	if !slices.Contains(r.state.ISR, id) {
		r.recheckISRLocked() // it may be eligible to join now
	}
}

// forgetIncarnationLocked resets follower id, which registered again with
// nodeEpoch: its log end and catch-up time described the previous process,
// which may have had a longer log than the new one (a wiped directory, an
// unflushed tail lost to a power cut). The caller holds mu.
func (r *Replica) forgetIncarnationLocked(id int32, f *followerState, nodeEpoch int64) {
	r.logger.Info("follower restarted; forgetting its previous incarnation", "follower", id,
		"node_epoch", nodeEpoch, "previous_node_epoch", f.nodeEpoch, "previous_leo", f.leo)
	f.reset(nodeEpoch)
	r.recheckISRLocked()
}

// ObserveNodeEpochs gives the leader the node epoch of every registered
// node, from the controller's metadata (ids missing or with an epoch <= 0
// are ignored). A follower whose recorded incarnation is older restarted:
// it is forgotten (see Replicate) before the next ISR check can count it,
// and the older process's fetches are refused from then on.
func (r *Replica) ObserveNodeEpochs(epochs map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.role != RoleLeader {
		return
	}
	for id, f := range r.followers {
		if e := epochs[id]; e > 0 && e > f.nodeEpoch {
			if f.nodeEpoch == 0 {
				// Nothing of an older incarnation is recorded; later
				// fetches must come from this one or newer.
				f.nodeEpoch = e
				continue
			}
			r.forgetIncarnationLocked(id, f, e)
		}
	}
}

// AlterISR is an ISR change the leader proposes to the controller.
type AlterISR struct {
	LeaderEpoch    int32
	PartitionEpoch int32
	NewISR         []int32
	// NodeEpochs holds, for each follower in NewISR that the leader has
	// seen fetch, the node epoch of the incarnation that fetched (KIP-903).
	// The controller refuses to add a member whose epoch is missing or is
	// not its current registration.
	NodeEpochs map[int32]int64
}

// ProposeISR returns the ISR change due now, if any, and marks it pending
// until AlterISRDone or a newer record settles it. Followers that have not
// caught up within the lag time leave; followers whose current incarnation
// fetches at our epoch and has reached the high watermark and our epoch
// start rejoin. A proposal whose call ended without an answer
// (AlterISRUnknown) is returned again, unchanged: only an answer or a newer
// record tells whether the controller applied it.
func (r *Replica) ProposeISR() (AlterISR, bool) {
	if at := r.isrCheckAt.Load(); at != 0 && int64(r.opts.Clock.Mono()) < at {
		return AlterISR{}, false // settled, as found last time
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.role != RoleLeader {
		// Until a new record or role (recheckISRLocked).
		r.isrCheckAt.Store(math.MaxInt64)
		return AlterISR{}, false
	}
	if r.pendingISR != nil {
		if r.pendingSent {
			return AlterISR{}, false
		}
		r.pendingSent = true
		r.logger.Info("sending again an ISR change whose outcome is unknown", "isr", fmt.Sprint(r.state.ISR),
			"new_isr", fmt.Sprint(r.pendingISR), "partition_epoch", r.state.PartitionEpoch)
		return AlterISR{LeaderEpoch: r.state.LeaderEpoch, PartitionEpoch: r.state.PartitionEpoch,
			NewISR: slices.Clone(r.pendingISR), NodeEpochs: maps.Clone(r.pendingEpochs)}, true
	}
	now := r.opts.Clock.Mono()
	inTime := func(f *followerState) bool { return f.caughtUp && now-r.lastCaughtUpLocked(f) <= r.opts.LagTime }
	hw := r.log.HighWatermark()
	eligible := func(f *followerState) bool {
		return f != nil && f.nodeEpoch > 0 && f.leo >= 0 && f.leo >= hw && f.leo >= r.epochStartOffset && inTime(f)
	}
	if r.isrSettledLocked(inTime, eligible) {
		// The usual answer, found without building anything: the ISR
		// loop asks every leader each second, thousands on a node. It
		// stays so until a member's lag time runs out, unless something
		// changes first.
		r.isrCheckAt.Store(int64(r.isrSettledUntilLocked(now)))
		return AlterISR{}, false
	}
	var isr []int32
	for _, id := range r.state.ISR {
		if id == r.opts.NodeID {
			isr = append(isr, id)
			continue
		}
		if f := r.followers[id]; f != nil && inTime(f) {
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
		if eligible(r.followers[id]) {
			isr = append(isr, id)
		}
	}
	a, b := slices.Clone(isr), slices.Clone(r.state.ISR)
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return AlterISR{}, false
	}
	epochs := map[int32]int64{}
	for _, id := range isr {
		if f := r.followers[id]; f != nil && f.nodeEpoch > 0 {
			epochs[id] = f.nodeEpoch
		}
	}
	r.pendingISR, r.pendingSent, r.pendingEpochs = isr, true, epochs
	r.logger.Info("proposing ISR change", "isr", fmt.Sprint(r.state.ISR), "new_isr", fmt.Sprint(isr), "partition_epoch", r.state.PartitionEpoch)
	r.maybeAdvanceHWLocked()
	return AlterISR{LeaderEpoch: r.state.LeaderEpoch, PartitionEpoch: r.state.PartitionEpoch, NewISR: isr, NodeEpochs: maps.Clone(epochs)}, true
}

// isrSettledLocked reports whether ProposeISR would propose nothing: this
// node is in the ISR, every other member is in time, and no replica
// outside it is eligible to join.
func (r *Replica) isrSettledLocked(inTime, eligible func(*followerState) bool) bool {
	if !slices.Contains(r.state.ISR, r.opts.NodeID) {
		return false
	}
	for _, id := range r.state.ISR {
		if id == r.opts.NodeID {
			continue
		}
		if f := r.followers[id]; f == nil || !inTime(f) {
			return false
		}
	}
	for _, id := range r.state.Replicas {
		if id != r.opts.NodeID && !slices.Contains(r.state.ISR, id) && eligible(r.followers[id]) {
			return false
		}
	}
	return true
}

// isrSettledUntilLocked is when a settled ISR could next change without
// anything else happening: the first time a member other than this node
// is out of time, the lag time from now when there is none.
func (r *Replica) isrSettledUntilLocked(now time.Duration) time.Duration {
	until := now + r.opts.LagTime + 1
	for _, id := range r.state.ISR {
		if f := r.followers[id]; id != r.opts.NodeID && f != nil {
			until = min(until, r.lastCaughtUpLocked(f)+r.opts.LagTime+1)
		}
	}
	return until
}

// AlterISRDone ends a proposal with the controller's answer: st is the
// record it returned (the new one on success, the current one on refusal),
// or nil for a refusal without one. The ISR changes only through st.
func (r *Replica) AlterISRDone(st *State) {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pendingISR, r.pendingSent, r.pendingEpochs = nil, false, nil
	if st != nil {
		r.applyStateLocked(*st)
	}
	r.maybeAdvanceHWLocked()
	r.notifyLocked()
}

// AlterISRUnknown ends a call for the pending proposal that got no answer
// (a transport error or timeout): the controller may or may not have
// applied it. The proposal stays pending, so the high watermark keeps
// waiting for the members it adds, and the next ProposeISR sends it again.
func (r *Replica) AlterISRUnknown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pendingISR != nil {
		r.pendingSent = false
		r.recheckISRLocked()
	}
}

// DeleteRecords raises the leader's log start offset to offset (Kafka's
// DeleteRecords, Partition.deleteRecordsOnLeader): -1 stands for the high
// watermark, and an offset above the high watermark or below -1 is
// refused as out of range. It returns the offset the log now starts at
// (at least offset). The followers raise theirs from ours on their next
// fetch (AdvanceLogStart); LowWatermark tells when they have.
func (r *Replica) DeleteRecords(epoch int32, offset int64) (int64, error) {
	if err := r.CheckLeader(epoch); err != nil {
		return 0, err
	}
	l := r.log
	if offset == -1 {
		offset = l.HighWatermark()
	}
	if offset < 0 {
		return 0, &partlog.OffsetOutOfRangeError{Offset: offset, LogStart: l.LogStartOffset(), LogEnd: l.HighWatermark()}
	}
	if err := l.DeleteRecordsBefore(offset); err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.notifyLocked() // Replicate long polls answer with the new log start
	r.mu.Unlock()
	return l.LogStartOffset(), nil
}

// LowWatermark is the smallest log start offset among the leader and its
// in-sync followers, as each last reported it (Kafka's
// Partition.lowWatermarkIfLeader, which takes every live replica; the ISR
// here, as only an in-sync replica can be elected). A follower that has not
// fetched from this leader yet counts as -1.
func (r *Replica) LowWatermark(epoch int32) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLeaderLocked(epoch); err != nil {
		return -1, err
	}
	low := r.log.LogStartOffset()
	for _, id := range r.effectiveISRLocked() {
		if id == r.opts.NodeID {
			continue
		}
		f := r.followers[id]
		if f == nil {
			return -1, nil
		}
		low = min(low, f.logStart)
	}
	return low, nil
}

// AdvanceLogStart raises a follower's log start offset to the leader's
// (leaderStart, from a Replicate answer of the leader of leaderEpoch), as
// far as our high watermark: records the leader deleted (DeleteRecords,
// retention) go here too, as Kafka's follower does
// (ReplicaFetcherThread.processPartitionData). Never lowers it.
func (r *Replica) AdvanceLogStart(leaderEpoch int32, leaderStart int64) error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	ok := r.followingLocked(leaderEpoch)
	r.mu.Unlock()
	if !ok {
		return ErrNotLeader
	}
	to := min(leaderStart, r.log.HighWatermark())
	if to <= r.log.LogStartOffset() {
		return nil
	}
	return r.log.DeleteRecordsBefore(to)
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
	r.mu.Lock()
	r.notifyLocked()
	r.mu.Unlock()
	return nil
}

// ResetTo empties the log and restarts it at offset, for a follower whose
// log lies wholly below the leader's log start, with the leader's producer
// state as of offset (nil when the leader sent none: then the log knows it
// lacks producers below offset, partlog's ProducersComplete).
func (r *Replica) ResetTo(leaderEpoch int32, offset int64, producerState []byte) error {
	r.appendMu.Lock()
	defer r.appendMu.Unlock()
	r.mu.Lock()
	ok := r.followingLocked(leaderEpoch)
	r.mu.Unlock()
	if !ok {
		return ErrNotLeader
	}
	if producerState != nil {
		err := r.log.ResetWithProducers(offset, producerState)
		if err == nil {
			return nil
		}
		r.logger.Warn("leader's producer state unusable; starting the log without it", "offset", offset, "err", err)
	}
	return r.log.TruncateFullyAndStartAt(offset)
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
		moved = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tierWait = false
	r.tierEnd = max(r.tierEnd, end)
	if moved {
		r.term++ // what a produce waits for may be gone with the log
		r.epochStartOffset = max(r.epochStartOffset, end)
		r.notifyLocked()
	}
	return moved, nil
}

// Dir returns the replica directory name for a partition under dataDir.
func Dir(dataDir, topic string, partition int32) string {
	return filepath.Join(dataDir, fmt.Sprintf("%s-%d", topic, partition))
}
