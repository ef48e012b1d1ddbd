package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// ErrFenced is matched (errors.Is) by a commit or heartbeat the group
// coordinator rejected because this member's epoch is stale or the member
// was removed (session timeout): a zombie. The consumer has given up its
// partitions and joins again; records it returned and did not commit are
// delivered again to whichever member owns them now. A commit of records
// read under an earlier assignment of their partition (the member lost the
// partition after Poll returned them, and was given it again since)
// matches it too: their offsets are behind where the new assignment
// started, so they are not committed.
var ErrFenced = errors.New("client: fenced by the group coordinator (stale member epoch or member removed)")

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// GroupOpt configures a GroupConsumer.
type GroupOpt func(*groupConfig)

type groupConfig struct {
	consumerOpts     []ConsumerOpt
	autoCommit       time.Duration
	start            Offset
	onAssigned       func(context.Context, []TopicPartition)
	onRevoked        func(context.Context, []TopicPartition)
	startOffsets     StartOffsetsFunc
	clientID         string
	rebalanceTimeout time.Duration
	assignor         string
	instanceID       string
}

// GroupConsumerOptions passes Consumer options (fetch sizes, transport,
// timeouts, ReadUncommitted) to the consumer that reads the assigned
// partitions.
func GroupConsumerOptions(opts ...ConsumerOpt) GroupOpt {
	return func(c *groupConfig) { c.consumerOpts = append(c.consumerOpts, opts...) }
}

// AutoCommit commits, every interval, the positions after the records that
// earlier Polls returned (never those of the latest Poll, which the
// application may still be processing), and does so too before partitions
// are revoked and on Close. Default 0: off; commit with Commit or
// CommitRecords.
func AutoCommit(interval time.Duration) GroupOpt {
	return func(c *groupConfig) { c.autoCommit = interval }
}

// StartWhenNoCommit is where a partition the group has no committed offset
// for starts (Kafka's auto.offset.reset). Default StartOffset().
func StartWhenNoCommit(o Offset) GroupOpt { return func(c *groupConfig) { c.start = o } }

// OnAssigned is called from Poll with partitions the member gained, before
// any of their records is returned; Poll waits until it returns. Default
// none.
func OnAssigned(fn func(ctx context.Context, partitions []TopicPartition)) GroupOpt {
	return func(c *groupConfig) { c.onAssigned = fn }
}

// StartOffsetsFunc decides where partitions a member gained start; see
// StartOffsets.
type StartOffsetsFunc func(ctx context.Context, memberEpoch int32, partitions []TopicPartition) (map[TopicPartition]int64, error)

// StartOffsets makes fn, rather than the group's committed offsets, say
// where the partitions the member gains start: an application that keeps
// its offsets with its own data (in the same database transaction as its
// writes) starts from those. fn is called from Poll with the partitions
// gained (sorted) and the member epoch they are assigned at, before any of
// their records is read and before OnAssigned; Poll waits until it
// returns. A partition it maps to an offset of 0 or more starts there
// (AtOffset); one it leaves out, or maps to a negative offset, starts at
// the group's committed offset, else at StartWhenNoCommit. An error makes
// Poll return it (wrapped) without starting any of the partitions, and
// the next Poll calls fn again for them. Records Poll returns from these
// partitions carry a MemberEpoch of at least memberEpoch, and records read
// under an earlier assignment of a partition carry a smaller one. Default
// none: the group's committed offsets.
func StartOffsets(fn StartOffsetsFunc) GroupOpt {
	return func(c *groupConfig) { c.startOffsets = fn }
}

// OnRevoked is called from Poll with partitions the member must give up
// (or, after it was fenced, has lost), before they are released to another
// member; Poll waits until it returns, so the application can finish and
// Commit their records. Default none.
func OnRevoked(fn func(ctx context.Context, partitions []TopicPartition)) GroupOpt {
	return func(c *groupConfig) { c.onRevoked = fn }
}

// ClientID is reported to the coordinator for DescribeGroup. Default
// "strata-go".
func ClientID(id string) GroupOpt { return func(c *groupConfig) { c.clientID = id } }

// RebalanceTimeout is how long the member may take to give up revoked
// partitions (its OnRevoked hook included) before the coordinator removes
// it. Default 5 minutes.
func RebalanceTimeout(d time.Duration) GroupOpt {
	return func(c *groupConfig) { c.rebalanceTimeout = d }
}

// ServerAssignor asks the coordinator for one of its assignors: "uniform"
// (sticky and balanced) or "range" (each topic's partitions in contiguous
// ranges in member order, so members of co-partitioned topics get the
// same partition numbers of each, which joins need), as Kafka's
// group.remote.assignor. The group uses the one most of its members ask
// for; an unknown name fails the join. Default "": the group's choice.
func ServerAssignor(name string) GroupOpt {
	return func(c *groupConfig) { c.assignor = name }
}

// InstanceID makes the member static (Kafka's group.instance.id, KIP-345
// and KIP-848): an id stable across restarts of one application instance,
// unique in the group. Close then leaves saying the member will come
// back: the coordinator keeps its partitions, and gives them to nobody
// else, until the session timeout; a new process with the same id that
// joins in that time gets them back with the same member epoch, and no
// other member is moved. A join while another live member has the id
// fails. Default "": a dynamic member, whose partitions are reassigned as
// soon as it leaves.
func InstanceID(id string) GroupOpt {
	return func(c *groupConfig) { c.instanceID = id }
}

// GroupConsumer is a member of a consumer group: the group coordinator
// assigns it partitions of the subscribed topics (no partition to two
// members at once), it reads them and commits offsets to the coordinator.
//
// Delivery is at least once: a committed offset is one past a record that
// Poll returned (Commit, CommitRecords, or AutoCommit, which commits only
// records of earlier Polls), so a record returned but not committed, also
// one whose Poll's context was canceled, is returned again after a restart
// or to the partition's next owner.
//
// Every record Poll returns carries the member epoch it was read under
// (Record.MemberEpoch), and commits carry it to the coordinator: records
// read before the member lost a partition (to a rebalance or a fence) and
// got it back are never committed, so a late commit of them cannot move
// the group's offset behind what the member read and committed since. Such
// a commit fails with an error matching ErrFenced, from the consumer
// itself or from the coordinator (which checks it against the epoch it
// assigned the partition at).
//
// Rebalances happen inside Poll: OnRevoked and OnAssigned run on the
// goroutine calling Poll. Poll must not be called concurrently; Commit,
// CommitRecords and Assignment may be called from any goroutine. A
// background goroutine heartbeats, so a slow application between Polls
// keeps its membership (but holds up revocations until its next Poll).
type GroupConsumer struct {
	group  string
	topics []string
	cfg    groupConfig
	inner  *Consumer

	mu         sync.Mutex
	memberID   string
	epoch      int32
	interval   time.Duration
	link       *coordinatorLink // to the group's coordinator (coordinator_link.go)
	owned      map[TopicPartition]bool
	assignedAt map[TopicPartition]int32    // owned partition -> member epoch Poll started reading it at
	target     map[TopicPartition]bool     // last assignment received; nil before the first
	targetNew  bool                        // target not yet reconciled by Poll
	lost       []TopicPartition            // partitions dropped by a fence, for OnRevoked
	fencedOut  map[TopicPartition]bool     // dropped by a fence and not assigned since: commits for them fail with ErrFenced
	delivered  map[TopicPartition]position // after the last record Poll returned
	processed  map[TopicPartition]position // after the records of earlier Polls (AutoCommit)
	wake       chan struct{}               // closed when Poll must reconcile
	lastCommit time.Time
	closed     bool
	// coordErr is the error Poll returns next: the heartbeats have failed
	// for longer than DeliveryTimeout. nil while they succeed.
	coordErr error

	// Heartbeats for ConfirmMembership: hbSent counts the requests built,
	// hbAnswered is the latest one the coordinator answered (hbResult: nil
	// or its fence), and hbAnsweredCh is closed and replaced on each
	// answer.
	hbSent, hbAnswered uint64
	hbResult           error
	hbAnsweredCh       chan struct{}

	kick      chan struct{}
	cancel    context.CancelFunc
	hbDone    chan struct{}
	closeOnce sync.Once
}

// position is where a commit puts a partition's offset: after a record.
type position struct {
	next        int64 // offset after the record
	leaderEpoch int32 // the record's leader epoch, or -1
	memberEpoch int32 // member epoch the record was read under
}

// candidate is a position offered to commit.
type candidate struct {
	tp TopicPartition
	position
}

// NewGroupConsumer joins group as a new member subscribed to topics,
// bootstrapping from the gateway at the given base URL. The member joins
// in the background; Poll returns records once partitions are assigned.
func NewGroupConsumer(gateway, group string, topics []string, opts ...GroupOpt) (*GroupConsumer, error) {
	cfg := groupConfig{start: StartOffset(), clientID: "strata-go", rebalanceTimeout: 5 * time.Minute}
	for _, o := range opts {
		o(&cfg)
	}
	if group == "" {
		return nil, errors.New("client: empty group id")
	}
	if len(topics) == 0 {
		return nil, errors.New("client: a group consumer needs at least one topic")
	}
	if cfg.autoCommit < 0 || cfg.rebalanceTimeout <= 0 {
		return nil, errors.New("client: AutoCommit must not be negative and RebalanceTimeout must be positive")
	}
	// Group members read committed records unless told otherwise, so an
	// exactly-once pipeline's output is whole transactions.
	inner, err := NewConsumer(gateway, append([]ConsumerOpt{ReadCommitted()}, cfg.consumerOpts...)...)
	if err != nil {
		return nil, err
	}
	inner.tracing.group = group
	var id [16]byte
	_, _ = rand.Read(id[:])
	id[6], id[8] = id[6]&0x0f|0x40, id[8]&0x3f|0x80
	g := &GroupConsumer{
		group: group, topics: slices.Clone(topics), cfg: cfg, inner: inner,
		memberID: fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]),
		interval: time.Second,
		link:     newCoordinatorLink(inner.cl, &inner.cfg, group, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP),
		owned:    map[TopicPartition]bool{}, assignedAt: map[TopicPartition]int32{}, fencedOut: map[TopicPartition]bool{},
		delivered: map[TopicPartition]position{}, processed: map[TopicPartition]position{}, wake: make(chan struct{}), lastCommit: time.Now(),
		kick: make(chan struct{}, 1), hbDone: make(chan struct{}), hbAnsweredCh: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go g.heartbeatLoop(ctx)
	return g, nil
}

// MemberID is the member id this consumer joined with.
func (g *GroupConsumer) MemberID() string { return g.memberID }

// Epoch is the member epoch last granted (0 before joining).
func (g *GroupConsumer) Epoch() int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// Assignment returns the partitions this member owns now, sorted.
func (g *GroupConsumer) Assignment() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]TopicPartition, 0, len(g.owned))
	for tp := range g.owned {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

// Position returns the next offset Poll returns from an owned partition.
func (g *GroupConsumer) Position(topic string, partition int32) (int64, bool) {
	return g.inner.Position(topic, partition)
}

// Seek moves the position of a partition this member owns: the next Poll
// returns its records from offset on (or from the nearest end of the log,
// when offset is outside it), and Commit commits no further than offset
// until Poll has returned records past it. Records earlier Polls returned
// are not affected, and a fetch answer in flight for the old position is
// dropped. It fails when the member does not own the partition. An
// application uses it to read again what it could not process (a failed
// database transaction, say). Safe to call from any goroutine; called
// while a Poll runs, that Poll may still return records from the old
// position, so call it between Polls for the next one to start at offset.
func (g *GroupConsumer) Seek(tp TopicPartition, offset int64) error {
	if offset < 0 {
		return fmt.Errorf("client: seek %s to %d: negative offset", tp, offset)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.owned[tp] {
		return fmt.Errorf("client: seek %s: partition not owned by this member", tp)
	}
	pos := position{next: offset, leaderEpoch: -1, memberEpoch: g.epoch}
	g.delivered[tp], g.processed[tp] = pos, pos
	g.inner.AddAssignment(map[string]map[int32]Offset{tp.Topic: {tp.Partition: AtOffset(offset)}})
	return nil
}

// HighWatermark returns the last high watermark seen for a partition.
func (g *GroupConsumer) HighWatermark(topic string, partition int32) (int64, bool) {
	return g.inner.HighWatermark(topic, partition)
}

// LogStartOffset returns the last log start offset seen for an owned
// partition (see Consumer.LogStartOffset).
func (g *GroupConsumer) LogStartOffset(topic string, partition int32) (int64, bool) {
	return g.inner.LogStartOffset(topic, partition)
}

// ConfirmMembership sends a heartbeat now and waits for the coordinator's
// answer to it (heartbeats already in flight do not count). With a nil
// error, the coordinator still holds this member, at Epoch(), and it
// returns the partitions the coordinator assigns the member as of that
// answer, sorted (Assignment() may still hold partitions being revoked,
// until the next Poll gives them up). An error matching ErrFenced means
// the member was fenced (it has given up its partitions and joins again);
// ctx's error means no answer came, as for a member cut off from the
// coordinator. Heartbeats that fail to reach the coordinator are retried
// as usual meanwhile. An application keeping its own fencing state (a
// database generation, say) calls it before taking a partition over
// again, so a member that only believes it owns the partition does not
// take it from its rightful owner. Safe to call from any goroutine.
func (g *GroupConsumer) ConfirmMembership(ctx context.Context) ([]TopicPartition, error) {
	g.mu.Lock()
	want := g.hbSent + 1
	g.mu.Unlock()
	g.kickHeartbeat()
	for {
		g.mu.Lock()
		if g.hbAnswered >= want {
			err := g.hbResult
			var target []TopicPartition
			if err == nil {
				target = sortedTPs(g.target)
			}
			g.mu.Unlock()
			return target, err
		}
		if g.closed {
			g.mu.Unlock()
			return nil, ErrClosed
		}
		ch := g.hbAnsweredCh
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// answeredLocked records the coordinator's answer to heartbeat seq (nil,
// or an error matching ErrFenced) for ConfirmMembership.
func (g *GroupConsumer) answeredLocked(seq uint64, err error) {
	if seq > g.hbAnswered {
		g.hbAnswered, g.hbResult = seq, err
	}
	close(g.hbAnsweredCh)
	g.hbAnsweredCh = make(chan struct{})
}

func sortTPs(l []TopicPartition) {
	sort.Slice(l, func(i, j int) bool {
		return l[i].Topic < l[j].Topic || l[i].Topic == l[j].Topic && l[i].Partition < l[j].Partition
	})
}

// Poll returns records of the owned partitions, waiting until some are
// available or ctx ends (then ctx.Err()). It first runs any pending
// rebalance (OnRevoked, OnAssigned) and, with AutoCommit, commits what
// earlier Polls returned when the interval has passed. With a
// DeliveryTimeout (GroupConsumerOptions), it returns an error wrapping
// ErrDeliveryTimeout when the fetches, or the heartbeats to the
// coordinator, have kept failing for that long.
func (g *GroupConsumer) Poll(ctx context.Context) ([]*Record, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	for tp, off := range g.delivered {
		g.processed[tp] = off
	}
	g.mu.Unlock()
	for {
		if err := g.reconcile(ctx); err != nil {
			return nil, err
		}
		g.mu.Lock()
		coordErr := g.coordErr
		g.coordErr = nil
		g.mu.Unlock()
		if coordErr != nil {
			return nil, coordErr
		}
		if g.cfg.autoCommit > 0 {
			g.mu.Lock()
			due := time.Since(g.lastCommit) >= g.cfg.autoCommit
			g.mu.Unlock()
			if due {
				_ = g.commitProcessed(ctx, nil) // a failed auto-commit is retried at the next interval
			}
		}
		g.mu.Lock()
		wake := g.wake
		g.mu.Unlock()
		pctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-wake:
				cancel()
			case <-pctx.Done():
			}
		}()
		recs, err := g.inner.Poll(pctx)
		cancel()
		recs = g.deliver(recs)
		if len(recs) > 0 {
			return recs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
}

// deliver keeps the records of owned partitions, stamps them with the
// member epoch, and records their positions as delivered.
func (g *GroupConsumer) deliver(recs []*Record) []*Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := recs[:0]
	for _, r := range recs {
		tp := TopicPartition{r.Topic, r.Partition}
		if !g.owned[tp] {
			continue
		}
		r.MemberEpoch = g.epoch
		out = append(out, r)
		if r.Offset+1 > g.delivered[tp].next {
			g.delivered[tp] = position{next: r.Offset + 1, leaderEpoch: r.LeaderEpoch, memberEpoch: g.epoch}
		}
	}
	return out
}

// reconcile applies the latest assignment: revoke, then assign.
func (g *GroupConsumer) reconcile(ctx context.Context) error {
	g.mu.Lock()
	lost := g.lost
	g.lost = nil
	var revoked, added []TopicPartition
	epoch := g.epoch // the member epoch the added partitions are assigned at
	if g.targetNew {
		for tp := range g.owned {
			if !g.target[tp] {
				revoked = append(revoked, tp)
			}
		}
		for tp := range g.target {
			if !g.owned[tp] {
				added = append(added, tp)
			}
		}
		g.targetNew = false
	}
	select {
	case <-g.wake:
		g.wake = make(chan struct{})
	default:
	}
	g.mu.Unlock()
	sortTPs(revoked)
	sortTPs(added)
	if len(lost) > 0 && g.cfg.onRevoked != nil {
		g.cfg.onRevoked(ctx, lost)
	}
	if len(revoked) > 0 {
		if g.cfg.autoCommit > 0 {
			_ = g.commitProcessed(ctx, revoked)
		}
		if g.cfg.onRevoked != nil {
			g.cfg.onRevoked(ctx, revoked)
		}
		// Dropped from owned before the consumer stops reading them, so
		// a Seek meanwhile cannot start them again.
		g.mu.Lock()
		for _, tp := range revoked {
			delete(g.owned, tp)
			delete(g.assignedAt, tp)
			delete(g.delivered, tp)
			delete(g.processed, tp)
		}
		g.mu.Unlock()
		for _, tp := range revoked {
			g.inner.Unassign(tp.Topic, tp.Partition)
		}
	}
	if len(added) > 0 {
		start, err := g.startOffsets(ctx, epoch, added)
		if err != nil {
			// Try again on the next reconcile.
			g.mu.Lock()
			g.targetNew = true
			g.mu.Unlock()
			return err
		}
		assign := map[string]map[int32]Offset{}
		var took []TopicPartition
		g.mu.Lock()
		for _, tp := range added {
			if !g.target[tp] {
				// Revoked again while the start offsets were read: never
				// taken, so neither assigned nor reported to OnAssigned
				// (the coordinator may already have given it to another
				// member, which the heartbeat allowed by no longer
				// reporting it).
				continue
			}
			took = append(took, tp)
			if assign[tp.Topic] == nil {
				assign[tp.Topic] = map[int32]Offset{}
			}
			off := g.cfg.start
			if o, ok := start[tp]; ok && o >= 0 {
				off = AtOffset(o)
				pos := position{next: o, leaderEpoch: -1, memberEpoch: g.epoch}
				g.delivered[tp], g.processed[tp] = pos, pos
			}
			assign[tp.Topic][tp.Partition] = off
			g.owned[tp] = true
			g.assignedAt[tp] = g.epoch
			delete(g.fencedOut, tp)
		}
		g.mu.Unlock()
		g.inner.AddAssignment(assign)
		if g.cfg.onAssigned != nil && len(took) > 0 {
			g.cfg.onAssigned(ctx, took)
		}
	}
	if len(revoked) > 0 || len(added) > 0 {
		g.kickHeartbeat()
	}
	return nil
}

func (g *GroupConsumer) kickHeartbeat() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// startOffsets returns where each of the added partitions starts: the
// StartOffsets hook's offset, else the group's committed one; -1 when
// neither has one.
func (g *GroupConsumer) startOffsets(ctx context.Context, epoch int32, added []TopicPartition) (map[TopicPartition]int64, error) {
	start := map[TopicPartition]int64{}
	need := added
	if fn := g.cfg.startOffsets; fn != nil {
		got, err := fn(ctx, epoch, slices.Clone(added))
		if err != nil {
			return nil, fmt.Errorf("client: start offsets of %d partitions gained: %w", len(added), err)
		}
		need = nil
		for _, tp := range added {
			if o, ok := got[tp]; ok && o >= 0 {
				start[tp] = o
			} else {
				need = append(need, tp)
			}
		}
	}
	if len(need) == 0 {
		return start, nil
	}
	committed, err := g.committed(ctx, need)
	if err != nil {
		return nil, err
	}
	maps.Copy(start, committed)
	return start, nil
}

// committed fetches the group's committed offsets of tps; -1 when none.
//
// A read-committed member asks for stable offsets (KIP-447's
// require_stable, as Kafka's consumer does under read_committed): while a
// transaction has offsets of one of tps staged, the coordinator answers
// that partition UNSTABLE_OFFSET_COMMIT and the member asks again after a
// backoff, rather than start from an offset the transaction's commit
// would move (which would process its inputs twice).
func (g *GroupConsumer) committed(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	req := &coordinatorv1.OffsetFetchRequest{GroupId: g.group, RequireStable: g.inner.cfg.readCommitted}
	byTopic := map[string]*commonv1.TopicPartitions{}
	for _, tp := range tps {
		t := byTopic[tp.Topic]
		if t == nil {
			t = &commonv1.TopicPartitions{Topic: tp.Topic}
			byTopic[tp.Topic] = t
			req.Topics = append(req.Topics, t)
		}
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	bo := newBackoff(&g.inner.cfg)
	for attempt := 1; ; attempt++ {
		out := map[TopicPartition]int64{}
		var unstable *commonv1.ErrorDetail
		err := g.coordCall(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
			resp, err := c.OffsetFetch(ctx, connect.NewRequest(req))
			if err != nil {
				return err
			}
			for _, o := range resp.Msg.GetOffsets() {
				if d := o.GetError(); d != nil {
					if d.GetReason() != commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT {
						return fromConnect(apierr.Error(d))
					}
					unstable = d
					continue
				}
				out[TopicPartition{o.GetTopic(), o.GetPartition()}] = o.GetCommittedOffset()
			}
			return nil
		})
		if err != nil || unstable == nil {
			return out, err
		}
		wait := bo.NextBackOff()
		g.inner.cfg.retried(retryEvent(fromConnect(apierr.Error(unstable)), attempt, wait))
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// Commit commits, for every owned partition, the position after the last
// record Poll returned.
func (g *GroupConsumer) Commit(ctx context.Context) error {
	g.mu.Lock()
	cands := make([]candidate, 0, len(g.delivered))
	for tp, pos := range g.delivered {
		cands = append(cands, candidate{tp, pos})
	}
	g.mu.Unlock()
	return g.commit(ctx, cands)
}

// CommitRecords commits the position after each given record (the highest
// per partition), records that Poll returned. Records of partitions this
// member gave up in a rebalance are left out: their new owner commits
// them. Records of partitions it lost because it was fenced, and records
// read under an earlier assignment of a partition it was given again
// since, make the commit fail with an error matching ErrFenced (the other
// partitions are still committed).
func (g *GroupConsumer) CommitRecords(ctx context.Context, recs ...*Record) error {
	cands := make([]candidate, len(recs))
	for i, r := range recs {
		cands[i] = candidate{TopicPartition{r.Topic, r.Partition}, position{next: r.Offset + 1, leaderEpoch: r.LeaderEpoch, memberEpoch: r.MemberEpoch}}
	}
	return g.commit(ctx, cands)
}

// commitProcessed commits what earlier Polls returned, for only (or every
// partition when only is nil).
func (g *GroupConsumer) commitProcessed(ctx context.Context, only []TopicPartition) error {
	g.mu.Lock()
	var cands []candidate
	for tp, pos := range g.processed {
		if only == nil || slices.Contains(only, tp) {
			cands = append(cands, candidate{tp, pos})
		}
	}
	g.lastCommit = time.Now()
	g.mu.Unlock()
	return g.commit(ctx, cands)
}

// commit commits, per partition, the highest candidate read under the
// current assignment of the partition.
func (g *GroupConsumer) commit(ctx context.Context, cands []candidate) error {
	g.mu.Lock()
	req := &coordinatorv1.OffsetCommitRequest{GroupId: g.group, MemberId: g.memberID, MemberEpoch: g.epoch}
	best := map[TopicPartition]position{}
	lost := map[TopicPartition]bool{}
	stale := map[TopicPartition]int32{} // partition -> epoch of records read under an earlier assignment
	for _, c := range cands {
		switch {
		case !g.owned[c.tp]:
			// A partition lost to a fence is refused here, not skipped:
			// the heartbeat may learn of the fence before the commit is
			// sent, and the commit must then fail as it would at the
			// coordinator.
			if g.fencedOut[c.tp] {
				lost[c.tp] = true
			}
		case c.memberEpoch < g.assignedAt[c.tp]:
			stale[c.tp] = c.memberEpoch
		case c.next >= 0:
			if b, ok := best[c.tp]; !ok || c.next > b.next {
				best[c.tp] = c.position
			}
		}
	}
	var errs []error
	for _, tp := range sortedTPs(lost) {
		errs = append(errs, fmt.Errorf("%w: %s: lost when the member was fenced; not committed", ErrFenced, tp))
	}
	for _, tp := range sortedTPs(stale) {
		errs = append(errs, fmt.Errorf("%w: %s: records read under member epoch %d, before the partition was assigned to this member again at epoch %d; "+
			"not committed, as that would move the offset back", ErrFenced, tp, stale[tp], g.assignedAt[tp]))
	}
	for _, tp := range sortedTPs(best) {
		pos := best[tp]
		req.Partitions = append(req.Partitions, &coordinatorv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition,
			CommittedOffset: pos.next, CommittedLeaderEpoch: pos.leaderEpoch, MemberEpoch: pos.memberEpoch})
	}
	g.mu.Unlock()
	if len(req.Partitions) == 0 {
		return errors.Join(errs...)
	}
	var resp *coordinatorv1.OffsetCommitResponse
	err := g.coordCall(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
		r, err := c.OffsetCommit(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		if r := ReasonOf(err); r == commonv1.Reason_REASON_FENCED_MEMBER_EPOCH || r == commonv1.Reason_REASON_UNKNOWN_MEMBER_ID {
			return errors.Join(append([]error{fmt.Errorf("%w: %v", ErrFenced, fromConnect(err))}, errs...)...)
		}
		return errors.Join(append([]error{fromConnect(err)}, errs...)...)
	}
	for _, p := range resp.GetPartitions() {
		if d := p.GetError(); d != nil {
			e := fmt.Errorf("client: commit %s-%d: %w", p.GetTopic(), p.GetPartition(), fromDetail(d))
			if d.GetReason() == commonv1.Reason_REASON_FENCED_MEMBER_EPOCH {
				e = fmt.Errorf("%w: %s-%d: %s", ErrFenced, p.GetTopic(), p.GetPartition(), d.GetMessage())
			}
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

// sortedTPs returns the keys of m, sorted.
func sortedTPs[V any](m map[TopicPartition]V) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

// coordinator returns a client for the group's coordinator, asking the
// gateway's FindCoordinator when none is known.
func (g *GroupConsumer) coordinator(ctx context.Context) (coordinatorv1connect.CoordinatorServiceClient, string, error) {
	return g.link.coordinator(ctx)
}

// coordCall runs call against the group's coordinator, following
// NOT_COORDINATOR hints and finding the coordinator again when it is
// unreachable, until ctx ends or the error is final.
func (g *GroupConsumer) coordCall(ctx context.Context, call func(context.Context, coordinatorv1connect.CoordinatorServiceClient) error) error {
	bo := newBackoff(&g.inner.cfg)
	for attempt := 1; ; attempt++ {
		c, addr, err := g.coordinator(ctx)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, g.inner.cfg.requestTimeout)
			err = call(cctx, c)
			cancel()
			if err == nil {
				return nil
			}
			d := DetailOf(err)
			code := connect.CodeOf(err)
			switch {
			case d.GetReason() == commonv1.Reason_REASON_NOT_COORDINATOR:
				g.link.forget(addr, d.GetCoordinator().GetAddress())
			case code == connect.CodeUnavailable || code == connect.CodeUnknown || code == connect.CodeDeadlineExceeded && ctx.Err() == nil:
				g.link.forget(addr, "")
			default:
				return fromConnect(err)
			}
		} else if c := connect.CodeOf(err); c != connect.CodeUnavailable && c != connect.CodeUnknown && c != connect.CodeDeadlineExceeded {
			return fromConnect(err)
		}
		if attempt >= 20 {
			return err
		}
		wait := bo.NextBackOff()
		g.inner.cfg.retried(coordinatorRetry(err, attempt, wait))
		if serr := sleep(ctx, wait); serr != nil {
			return err
		}
	}
}

// coordinatorRetry describes a retry of a call to the group coordinator
// (or of the gateway's FindCoordinator): a node that cannot be reached or
// serve is the coordinator being unavailable.
func coordinatorRetry(err error, attempt int, wait time.Duration) RetryEvent {
	ev := retryEvent(err, attempt, wait)
	if ev.Reason == RetryUnavailable || ev.Reason == RetryNodeUnreachable {
		ev.Reason = RetryCoordinatorUnavailable
	}
	return ev
}

// heartbeatLoop keeps the membership: it reports the subscription and the
// owned partitions, and hands new assignments to Poll. Failed heartbeats
// are retried with backoff; when they have failed for longer than
// DeliveryTimeout (when set), the next Poll returns the error.
func (g *GroupConsumer) heartbeatLoop(ctx context.Context) {
	defer close(g.hbDone)
	cfg := &g.inner.cfg
	bo := newBackoff(cfg)
	var failingSince time.Time // zero while heartbeats succeed
	failures := 0
	for {
		wait, err := g.heartbeat(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			wait = bo.NextBackOff()
			failures++
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if refused(err) {
				// Credentials or ACLs refused: Poll reports it at once.
				// Heartbeats go on at the backoff, so a grant made
				// meanwhile lets the member join.
				g.mu.Lock()
				g.coordErr = fromConnect(err)
				g.wakeLocked()
				g.mu.Unlock()
			} else if cfg.deliveryTimeoutSet && time.Now().Add(wait).After(failingSince.Add(cfg.deliveryTimeout)) {
				g.mu.Lock()
				g.coordErr = fmt.Errorf("%w: group %q: heartbeat: %w", ErrDeliveryTimeout, g.group, fromConnect(err))
				g.wakeLocked()
				g.mu.Unlock()
				failingSince = time.Time{} // a new period for the next Poll
			}
			cfg.retried(coordinatorRetry(err, failures, wait))
		} else {
			bo.Reset()
			failingSince, failures = time.Time{}, 0
			g.mu.Lock()
			g.coordErr = nil
			g.mu.Unlock()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-g.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

func (g *GroupConsumer) heartbeat(ctx context.Context) (time.Duration, error) {
	g.mu.Lock()
	req := &coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: g.group, MemberId: g.memberID, MemberEpoch: g.epoch, SubscribedTopicNames: g.topics,
		ClientId: g.cfg.clientID, RebalanceTimeoutMs: int32(g.cfg.rebalanceTimeout / time.Millisecond), ServerAssignor: g.cfg.assignor,
		InstanceId: g.cfg.instanceID,
	}
	g.hbSent++
	seq := g.hbSent
	// Report what is owned and what Poll may be about to take, so the
	// coordinator never frees a partition this member could still start on.
	var own []TopicPartition
	for tp := range g.owned {
		own = append(own, tp)
	}
	for tp := range g.target {
		if !g.owned[tp] {
			own = append(own, tp)
		}
	}
	g.mu.Unlock()
	sortTPs(own)
	for _, tp := range own {
		if n := len(req.OwnedPartitions); n == 0 || req.OwnedPartitions[n-1].Topic != tp.Topic {
			req.OwnedPartitions = append(req.OwnedPartitions, &commonv1.TopicPartitions{Topic: tp.Topic})
		}
		last := req.OwnedPartitions[len(req.OwnedPartitions)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	c, addr, err := g.coordinator(ctx)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.inner.cfg.requestTimeout)
	resp, err := c.ConsumerGroupHeartbeat(cctx, connect.NewRequest(req))
	cancel()
	if err != nil {
		d := DetailOf(err)
		switch d.GetReason() {
		case commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID:
			g.fenced()
			g.mu.Lock()
			g.answeredLocked(seq, fmt.Errorf("%w: group %q: heartbeat: %v", ErrFenced, g.group, fromConnect(err)))
			g.mu.Unlock()
			return 0, nil // rejoin at once
		case commonv1.Reason_REASON_NOT_COORDINATOR:
			g.link.forget(addr, d.GetCoordinator().GetAddress())
			return 0, err
		}
		if code := connect.CodeOf(err); code == connect.CodeUnavailable || code == connect.CodeUnknown || code == connect.CodeDeadlineExceeded {
			g.link.forget(addr, "")
		}
		return 0, err
	}
	m := resp.Msg
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.MemberEpoch != g.epoch {
		g.answeredLocked(seq, fmt.Errorf("%w: group %q: fenced while a heartbeat ran", ErrFenced, g.group))
		return 0, nil // fenced while the call ran: rejoin
	}
	defer g.answeredLocked(seq, nil)
	g.epoch = m.GetMemberEpoch()
	if ms := m.GetHeartbeatIntervalMs(); ms > 0 {
		g.interval = time.Duration(ms) * time.Millisecond
	}
	if a := m.GetAssignment(); a != nil {
		t := map[TopicPartition]bool{}
		for _, tps := range a.GetPartitions() {
			for _, p := range tps.GetPartitions() {
				t[TopicPartition{tps.GetTopic(), p}] = true
			}
		}
		// The coordinator repeats an assignment it is not sure arrived;
		// the same one again changes nothing.
		if g.target == nil || !maps.Equal(t, g.target) {
			g.target, g.targetNew = t, true
			g.wakeLocked()
		}
	}
	return g.interval, nil
}

func (g *GroupConsumer) wakeLocked() {
	select {
	case <-g.wake:
	default:
		close(g.wake)
	}
}

// fenced drops every partition at once (their records can no longer be
// committed, and the coordinator may already have given them to another
// member) and makes the next heartbeat a join.
func (g *GroupConsumer) fenced() {
	g.mu.Lock()
	var lost []TopicPartition
	for tp := range g.owned {
		lost = append(lost, tp)
		g.fencedOut[tp] = true
	}
	sortTPs(lost)
	g.owned = map[TopicPartition]bool{}
	g.assignedAt = map[TopicPartition]int32{}
	g.delivered = map[TopicPartition]position{}
	g.processed = map[TopicPartition]position{}
	g.target, g.targetNew = nil, false
	g.lost = append(g.lost, lost...)
	g.epoch = 0
	g.wakeLocked()
	g.mu.Unlock()
	g.inner.Assign(nil)
}

// Close leaves the group (with AutoCommit, after committing what earlier
// Polls returned; a static member, InstanceID, saying it will come back)
// and releases the consumer. Records of the last Poll that
// were not committed are delivered again to the partitions' next owner.
// Safe to call twice.
func (g *GroupConsumer) Close(ctx context.Context) error {
	var err error
	g.closeOnce.Do(func() {
		if g.cfg.autoCommit > 0 {
			err = g.commitProcessed(ctx, nil)
		}
		g.cancel()
		<-g.hbDone
		g.mu.Lock()
		g.closed = true
		epoch := g.epoch
		g.mu.Unlock()
		if epoch > 0 {
			leave := int32(-1)
			if g.cfg.instanceID != "" {
				leave = -2 // a static member comes back (InstanceID)
			}
			lerr := g.coordCall(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
				_, err := c.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
					GroupId: g.group, MemberId: g.memberID, MemberEpoch: leave, InstanceId: g.cfg.instanceID,
				}))
				return err
			})
			err = errors.Join(err, lerr)
		}
		g.inner.Close()
	})
	return err
}
