// Package replication moves data between replicas: the follower side pulls
// from each leader node with one Replicate long poll at a time in a fetch
// session over every partition it follows there (Fetcher) and truncates by
// epoch when told its log diverged; the leader side periodically proposes
// ISR changes to the controller.
package replication

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/services/storage/internal/clock"
	"github.com/strata-mq/strata/services/storage/internal/metadata"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Follower is one partition this node follows at one leader epoch: what a
// Fetcher needs to fetch it and to apply what the leader sends. A Fetcher
// drops it when its ctx (given to Add) ends; the node adds a new one on
// every leader or epoch change.
type Follower struct {
	Replica     *replica.Replica
	LeaderEpoch int32
	Logger      *slog.Logger

	ctx     context.Context // from Add
	unsub   func()          // ends Add's subscription to the replica's changes
	retryAt time.Time       // after a failure; the Fetcher's goroutine only
	sent    sentState       // the Fetcher's goroutine only
}

var errPartition = errors.New("replication: partition error from leader")

func (f *Follower) handle(ctx context.Context, res *storagev1.ReplicatePartitionResult, fetchOffset int64) error {
	if e := res.GetError(); e != nil {
		if e.GetReason() == commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE && fetchOffset < res.GetLogStartOffset() {
			return f.Replica.ResetTo(f.LeaderEpoch, res.GetLogStartOffset(), res.GetProducerState())
		}
		f.Logger.Debug("replicate partition error", "code", e.GetCode().String(), "reason", e.GetReason().String(), "msg", e.GetMessage())
		return errPartition
	}
	if d := res.GetDivergingEpoch(); d != nil {
		return f.Replica.TruncateDiverging(f.LeaderEpoch, d.GetEpoch(), d.GetEndOffset())
	}
	if err := f.Replica.AppendFromLeader(ctx, f.LeaderEpoch, res.GetRecords(), res.GetHighWatermark()); err != nil {
		return err
	}
	return f.Replica.AdvanceLogStart(f.LeaderEpoch, res.GetLogStartOffset())
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ISRLoop periodically asks the led replicas for an ISR change and sends
// the proposals to the controller with AlterPartition. A change applies
// only from the controller's answer (a compare-and-set on the partition
// epoch), never before. A call that ends without an answer leaves its
// proposals pending (the controller may have applied them) and they are
// sent again at the next check.
//
// It asks only the replicas that may propose: it keeps each replica's
// mark (Replica.ISRCheckAt) in one slice of its own, so a pass over
// thousands of settled replicas compares numbers in order instead of
// loading a field of every replica (a cache miss each). A replica whose
// mark is cleared tells the loop through Recheck, which the node passes
// as the replicas' Options.ISRRecheck; every mark is read again from its
// replica every RefreshInterval, in case.
type ISRLoop struct {
	// Replicas returns the hosted replicas. It is called on every pass,
	// and should return the same slice while the set is unchanged.
	Replicas func() []*replica.Replica
	Meta     *metadata.Client
	Clock    clock.Clock   // the replicas' clock (replica.Options.Clock); default clock.System
	Interval time.Duration // how often to check; default 100ms
	// RefreshInterval is how often every mark is read again from its
	// replica; default 10s.
	RefreshInterval time.Duration
	Logger          *slog.Logger

	mu       sync.Mutex
	rechecks []*replica.Replica // marks cleared since the last pass (Recheck)

	// The Run goroutine's alone:
	hosted      []*replica.Replica       // Replicas' answer at the last pass
	marks       []int64                  // hosted[i]'s mark as last read
	index       map[*replica.Replica]int // position in hosted
	refreshedAt time.Duration            // when every mark was last read
}

// Recheck makes the next pass ask r: its mark was cleared. It is the
// replicas' Options.ISRRecheck, called with r's lock held.
func (l *ISRLoop) Recheck(r *replica.Replica) {
	l.mu.Lock()
	l.rechecks = append(l.rechecks, r)
	l.mu.Unlock()
}

// Run checks until ctx ends.
func (l *ISRLoop) Run(ctx context.Context) {
	if l.Interval <= 0 {
		l.Interval = 100 * time.Millisecond
	}
	if l.Clock == nil {
		l.Clock = clock.System
	}
	if l.RefreshInterval <= 0 {
		l.RefreshInterval = 10 * time.Second
	}
	for sleep(ctx, l.Interval) {
		l.once(ctx)
	}
}

// due returns the replicas to ask in this pass: the hosted ones whose mark
// is cleared or has passed.
func (l *ISRLoop) due() []int {
	now := l.Clock.Mono()
	rs := l.Replicas()
	refresh := now-l.refreshedAt >= l.RefreshInterval
	if !slices.Equal(rs, l.hosted) {
		// The set changed: keep the marks of the replicas still here (a
		// new one, 0, is asked now).
		marks := make([]int64, len(rs))
		index := make(map[*replica.Replica]int, len(rs))
		for i, r := range rs {
			if j, ok := l.index[r]; ok {
				marks[i] = l.marks[j]
			}
			index[r] = i
		}
		l.hosted, l.marks, l.index = rs, marks, index
	}
	l.mu.Lock()
	rechecks := l.rechecks
	l.rechecks = nil
	l.mu.Unlock()
	for _, r := range rechecks {
		if i, ok := l.index[r]; ok {
			l.marks[i] = 0
		}
	}
	if refresh {
		for i, r := range l.hosted {
			l.marks[i] = r.ISRCheckAt()
		}
		l.refreshedAt = now
	}
	var due []int
	for i, at := range l.marks {
		if at == 0 || int64(now) >= at {
			due = append(due, i)
		}
	}
	return due
}

func (l *ISRLoop) once(ctx context.Context) {
	type pending struct {
		r *replica.Replica
		a replica.AlterISR
	}
	var ps []pending
	var items []*controllerv1.AlterPartitionItem
	for _, i := range l.due() {
		r := l.hosted[i]
		if a, ok := r.ProposeISR(); ok {
			ps = append(ps, pending{r, a})
			items = append(items, alterItem(r, a))
		}
		// A clearing after this read is in rechecks for the next pass.
		l.marks[i] = r.ISRCheckAt()
	}
	if len(ps) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := l.Meta.AlterPartition(cctx, items)
	if err != nil {
		l.Logger.Warn("AlterPartition failed; the ISR changes stay pending and are sent again", "err", err)
		for _, p := range ps {
			p.r.AlterISRUnknown()
		}
		return
	}
	results := resp.GetPartitions()
	for i, p := range ps {
		if i >= len(results) {
			p.r.AlterISRUnknown()
			continue
		}
		res := results[i]
		if e := res.GetError(); e != nil {
			l.Logger.Info("AlterPartition refused", "topic", p.r.Topic, "partition", p.r.Partition,
				"reason", e.GetReason().String(), "msg", e.GetMessage())
		}
		var st *replica.State
		if s := res.GetState(); s != nil {
			st = stateOf(s)
		}
		p.r.AlterISRDone(st)
	}
}

// StateOf converts the controller's partition record.
func StateOf(p *commonv1.PartitionMetadata) replica.State { return *stateOf(p) }

func stateOf(p *commonv1.PartitionMetadata) *replica.State {
	return &replica.State{
		LeaderID: p.GetLeaderId(), LeaderEpoch: p.GetLeaderEpoch(), PartitionEpoch: p.GetPartitionEpoch(),
		Replicas: append([]int32(nil), p.GetReplicas()...), ISR: append([]int32(nil), p.GetIsr()...),
		LeaderNodeEpoch: p.GetIsrNodeEpochs()[p.GetLeaderId()],
	}
}

func alterItem(r *replica.Replica, a replica.AlterISR) *controllerv1.AlterPartitionItem {
	it := &controllerv1.AlterPartitionItem{
		Topic: r.Topic, TopicId: r.TopicID, Partition: r.Partition,
		LeaderEpoch: a.LeaderEpoch, PartitionEpoch: a.PartitionEpoch, NewIsr: a.NewISR,
	}
	for _, id := range a.NewISR {
		if e, ok := a.NodeEpochs[id]; ok {
			it.NewIsrMembers = append(it.NewIsrMembers, &controllerv1.IsrMember{NodeId: id, NodeEpoch: e})
		}
	}
	return it
}
