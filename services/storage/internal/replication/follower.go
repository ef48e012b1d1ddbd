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
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
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

// ISRLoop periodically asks every led replica for an ISR change and sends
// the proposals to the controller with AlterPartition. A change applies
// only from the controller's answer (a compare-and-set on the partition
// epoch), never before. A call that ends without an answer leaves its
// proposals pending (the controller may have applied them) and they are
// sent again at the next check.
type ISRLoop struct {
	Replicas func() []*replica.Replica
	Meta     *metadata.Client
	Interval time.Duration // how often to check; default 100ms
	Logger   *slog.Logger
}

// Run checks until ctx ends.
func (l *ISRLoop) Run(ctx context.Context) {
	if l.Interval <= 0 {
		l.Interval = 100 * time.Millisecond
	}
	for sleep(ctx, l.Interval) {
		l.once(ctx)
	}
}

func (l *ISRLoop) once(ctx context.Context) {
	type pending struct {
		r *replica.Replica
		a replica.AlterISR
	}
	var ps []pending
	var items []*controllerv1.AlterPartitionItem
	for _, r := range l.Replicas() {
		if a, ok := r.ProposeISR(); ok {
			ps = append(ps, pending{r, a})
			items = append(items, alterItem(r, a))
		}
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
