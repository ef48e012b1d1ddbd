// Package replication moves data between replicas: the follower side pulls
// from the leader with the Replicate long poll and truncates by epoch when
// told its log diverged; the leader side periodically proposes ISR changes
// to the controller.
package replication

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/services/storage/internal/metadata"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Follower is one partition's fetch loop from its leader at one leader
// epoch. It ends when its ctx is canceled (the node starts a new one on
// every leader or epoch change).
type Follower struct {
	Replica     *replica.Replica
	NodeID      int32
	LeaderEpoch int32
	// Leader returns the leader's client, or nil while its address is
	// unknown.
	Leader    func() storagev1connect.StorageServiceClient
	NodeEpoch func() int64
	MaxWait   time.Duration // long-poll wait; default 500ms
	Logger    *slog.Logger
}

// Run fetches until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	if f.MaxWait <= 0 {
		f.MaxWait = 500 * time.Millisecond
	}
	backoff := func() bool { return sleep(ctx, 50*time.Millisecond) }
	for ctx.Err() == nil {
		cl := f.Leader()
		if cl == nil {
			if !backoff() {
				return
			}
			continue
		}
		fetchOffset, lastEpoch, logStart := f.Replica.FollowerPosition()
		resp, err := cl.Replicate(ctx, connect.NewRequest(&storagev1.ReplicateRequest{
			ReplicaId: f.NodeID,
			NodeEpoch: f.NodeEpoch(),
			Partitions: []*storagev1.ReplicatePartition{{
				Topic: f.Replica.Topic, Partition: f.Replica.Partition,
				CurrentLeaderEpoch: f.LeaderEpoch, FetchOffset: fetchOffset,
				LastFetchedEpoch: lastEpoch, LogStartOffset: logStart,
			}},
			MaxWaitMs: int32(f.MaxWait / time.Millisecond),
			MinBytes:  1,
		}))
		if err != nil {
			if ctx.Err() == nil {
				f.Logger.Debug("replicate failed", "err", err)
			}
			if !backoff() {
				return
			}
			continue
		}
		if len(resp.Msg.GetPartitions()) != 1 {
			if !backoff() {
				return
			}
			continue
		}
		if err := f.handle(ctx, resp.Msg.GetPartitions()[0], fetchOffset); err != nil {
			if !errors.Is(err, replica.ErrNotLeader) && ctx.Err() == nil {
				f.Logger.Warn("replicate result not applied", "err", err)
			}
			if !backoff() {
				return
			}
		}
	}
}

var errPartition = errors.New("replication: partition error from leader")

func (f *Follower) handle(ctx context.Context, res *storagev1.ReplicatePartitionResult, fetchOffset int64) error {
	if e := res.GetError(); e != nil {
		if e.GetReason() == commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE && fetchOffset < res.GetLogStartOffset() {
			return f.Replica.ResetTo(f.LeaderEpoch, res.GetLogStartOffset())
		}
		f.Logger.Debug("replicate partition error", "code", e.GetCode().String(), "reason", e.GetReason().String(), "msg", e.GetMessage())
		return errPartition
	}
	if d := res.GetDivergingEpoch(); d != nil {
		return f.Replica.TruncateDiverging(f.LeaderEpoch, d.GetEpoch(), d.GetEndOffset())
	}
	return f.Replica.AppendFromLeader(ctx, f.LeaderEpoch, res.GetRecords(), res.GetHighWatermark())
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
