package server

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/metaview"
)

// The calls the console (ts/console, served at /console/) needs beyond
// the admin pass-throughs: a stream of the cluster's overview, the log
// extents of partitions, group lag totals and an offset for a time. They
// are ordinary GatewayService calls, authorized like the others, so any
// client may use them. See docs/design/console.md.

const (
	// logSampleTTL is how long one round of DescribeLog calls to the
	// storage nodes serves every WatchCluster stream: the disk figures
	// cost one call per node per period, however many consoles watch.
	logSampleTTL = time.Second
	// logSampleTimeout bounds one node's DescribeLog; a node that does
	// not answer in time reports disk_bytes -1.
	logSampleTimeout = 2 * time.Second
	// overviewInterval is how often a stream recomputes the overview to
	// pick up new disk figures; a metadata change recomputes at once.
	overviewInterval = 2 * time.Second
	// overviewKeepAlive is the longest a stream stays silent.
	overviewKeepAlive = 15 * time.Second
)

// changeSignal lets streams wait for the next metadata message: wait
// returns a channel that signal closes.
type changeSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changeSignal) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changeSignal) signal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// logSample is one round of DescribeLog answers, by node id; a node that
// did not answer has no entry.
type logSample struct {
	at     time.Time
	byNode map[int32][]*storagev1.DescribeLogPartitionResult
}

// sampler shares log samples between streams.
type sampler struct {
	mu   sync.Mutex
	last *logSample
}

// sampleLogs returns a sample at most logSampleTTL old, asking every node
// of st that is not dead when the last one is older.
func (g *Gateway) sampleLogs(ctx context.Context, st *metaview.View) *logSample {
	g.logs.mu.Lock()
	defer g.logs.mu.Unlock()
	if g.logs.last != nil && time.Since(g.logs.last.at) < logSampleTTL {
		return g.logs.last
	}
	s := &logSample{at: time.Now(), byNode: map[int32][]*storagev1.DescribeLogPartitionResult{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, n := range st.Nodes {
		if n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD {
			continue
		}
		addr, ok := st.NodeAddress(id)
		if !ok {
			continue
		}
		wg.Go(func() {
			// The sample serves every stream: one caller going away must
			// not cut it short for the others.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logSampleTimeout)
			defer cancel()
			res, err := g.storageClient(addr).DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{}))
			if err != nil {
				return
			}
			mu.Lock()
			s.byNode[id] = res.Msg.GetPartitions()
			mu.Unlock()
		})
	}
	wg.Wait()
	g.logs.last = s
	return s
}

// overview builds the WatchCluster message from the cached metadata and a
// log sample, with what the caller may see.
func (g *Gateway) overview(ctx context.Context, st *metaview.View, s *logSample) *gatewayv1.WatchClusterResponse {
	out := &gatewayv1.WatchClusterResponse{ClusterId: st.ClusterID, MetadataVersion: st.Version}
	if s != nil {
		out.SampledAtMs = s.at.UnixMilli()
	}
	alive := func(id int32) bool {
		n := st.Nodes[id]
		return n != nil && n.GetState() != controllerv1.NodeState_NODE_STATE_DEAD
	}
	// The leader's own DescribeLog entry of each partition.
	type tp struct {
		topic     string
		partition int32
	}
	leaderLog := map[tp]*storagev1.DescribeLogPartitionResult{}
	if s != nil {
		for _, parts := range s.byNode {
			for _, p := range parts {
				if p.GetLeader() && p.GetError() == nil {
					leaderLog[tp{p.GetTopic(), p.GetPartition()}] = p
				}
			}
		}
	}
	replicas := map[int32]int32{}
	leaders := map[int32]int32{}
	for _, t := range st.Topics {
		for _, p := range t.GetPartitions() {
			for _, r := range p.GetReplicas() {
				replicas[r]++
			}
			if p.GetLeaderId() >= 0 {
				leaders[p.GetLeaderId()]++
			}
		}
		if t.GetInternal() {
			continue
		}
		to := &gatewayv1.TopicOverview{Name: t.GetName(), Partitions: int32(len(t.GetPartitions()))}
		tiered := t.GetConfigs()["remote.storage.enable"] == "true"
		for _, p := range t.GetPartitions() {
			to.ReplicationFactor = max(to.ReplicationFactor, int32(len(p.GetReplicas())))
			if p.GetLeaderId() < 0 || !alive(p.GetLeaderId()) {
				to.OfflinePartitions++
			}
			if len(p.GetIsr()) < len(p.GetReplicas()) {
				to.UnderReplicatedPartitions++
			}
			if l := leaderLog[tp{t.GetName(), p.GetPartition()}]; l != nil {
				to.LocalBytes += l.GetLocalSizeBytes()
				to.TieredBytes += l.GetTieredSizeBytes()
				to.EndOffsets += l.GetHighWatermark()
				if tiered {
					to.TieringLagOffsets += l.GetHighWatermark() - max(l.GetTieredEndOffset(), l.GetLogStartOffset())
				}
			}
		}
		out.Topics = append(out.Topics, to)
	}
	out.Topics = visible(ctx, g, acl.Topic, out.Topics, (*gatewayv1.TopicOverview).GetName)
	slices.SortFunc(out.Topics, func(a, b *gatewayv1.TopicOverview) int { return cmp.Compare(a.Name, b.Name) })
	for _, t := range out.Topics {
		out.OfflinePartitions += t.OfflinePartitions
		out.UnderReplicatedPartitions += t.UnderReplicatedPartitions
		out.TieringLagOffsets += t.TieringLagOffsets
	}
	if !g.guard.Allowed(ctx, acl.Describe, acl.Cluster, acl.ClusterName) {
		return out
	}
	out.Controllers = st.Controllers
	for id, n := range st.Nodes {
		no := &gatewayv1.NodeOverview{
			Node:            n.GetNode(),
			State:           n.GetState(),
			Drained:         n.GetDrained(),
			Replicas:        replicas[id],
			Leaders:         leaders[id],
			DiskBytes:       -1,
			LastHeartbeatMs: n.GetLastHeartbeatMs(),
		}
		if s != nil {
			if parts, ok := s.byNode[id]; ok {
				no.DiskBytes = 0
				for _, p := range parts {
					no.DiskBytes += p.GetLocalSizeBytes()
				}
			}
		}
		out.Nodes = append(out.Nodes, no)
	}
	slices.SortFunc(out.Nodes, func(a, b *gatewayv1.NodeOverview) int {
		return cmp.Compare(a.GetNode().GetNodeId(), b.GetNode().GetNodeId())
	})
	return out
}

// WatchCluster streams the overview: at once, on every metadata change
// that alters it, when the disk figures change, and as a keep-alive.
func (g *Gateway) WatchCluster(ctx context.Context, _ *connect.Request[gatewayv1.WatchClusterRequest], stream *connect.ServerStream[gatewayv1.WatchClusterResponse]) error {
	if err := g.authenticated(ctx); err != nil {
		return err
	}
	if g.cache.Load() == nil {
		return errNoMetadata()
	}
	var last *gatewayv1.WatchClusterResponse
	lastSent := time.Time{}
	tick := time.NewTicker(overviewInterval)
	defer tick.Stop()
	for {
		changed := g.changes.wait()
		st := g.cache.Load()
		msg := g.overview(ctx, st, g.sampleLogs(ctx, st))
		// The sample time alone is no change worth a message.
		cmpMsg := proto.CloneOf(msg)
		cmpMsg.SampledAtMs = 0
		if last == nil || !proto.Equal(cmpMsg, last) || time.Since(lastSent) >= overviewKeepAlive {
			if err := stream.Send(msg); err != nil {
				return err
			}
			last, lastSent = cmpMsg, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-g.draining:
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// partitionExtents fills the log extents of pos (and, unless they were
// asked already, the log start offset and high watermark) from each
// partition leader's DescribeLog, all leaders at once. Failures are
// reported per partition.
func (g *Gateway) partitionExtents(ctx context.Context, pos []*gatewayv1.PartitionOffsets, offsetsAsked bool) {
	st := g.cache.Load()
	byLeader := map[string][]*gatewayv1.PartitionOffsets{}
	for _, po := range pos {
		if po.Error != nil {
			continue
		}
		var p *commonv1.PartitionMetadata
		if st != nil {
			p = st.Partition(po.Topic, po.Partition)
		}
		addr, ok := "", false
		if p != nil && p.GetLeaderId() >= 0 {
			addr, ok = st.NodeAddress(p.GetLeaderId())
		}
		if !ok {
			po.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Message: "partition has no reachable leader"}
			continue
		}
		byLeader[addr] = append(byLeader[addr], po)
	}
	var wg sync.WaitGroup
	for addr, group := range byLeader {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, offsetsTimeout)
			defer cancel()
			req := &storagev1.DescribeLogRequest{}
			for _, po := range group {
				req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: po.Topic, Partition: po.Partition})
			}
			res, err := g.storageClient(addr).DescribeLog(ctx, connect.NewRequest(req))
			for i, po := range group {
				switch {
				case err != nil:
					po.Error = apierr.AsDetail(err)
				case i >= len(res.Msg.GetPartitions()):
					po.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_INTERNAL, Message: "leader answered fewer partitions than asked"}
				case res.Msg.GetPartitions()[i].GetError() != nil:
					po.Error = res.Msg.GetPartitions()[i].GetError()
				default:
					l := res.Msg.GetPartitions()[i]
					if !offsetsAsked {
						po.LogStartOffset = l.GetLogStartOffset()
						po.HighWatermark = l.GetHighWatermark()
					}
					po.LocalLogStartOffset = l.GetLocalLogStartOffset()
					po.LogEndOffset = l.GetLogEndOffset()
					po.TieredEndOffset = l.GetTieredEndOffset()
					po.LocalSizeBytes = l.GetLocalSizeBytes()
					po.TieredSizeBytes = l.GetTieredSizeBytes()
				}
			}
		})
	}
	wg.Wait()
}

// groupLags describes every listed group on its coordinator, a few at a
// time, and sums its partitions' lag.
func (g *Gateway) groupLags(ctx context.Context, groups []string) []*gatewayv1.GroupLag {
	out := make([]*gatewayv1.GroupLag, len(groups))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, id := range groups {
		out[i] = &gatewayv1.GroupLag{GroupId: id}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := g.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: id}))
			if err != nil {
				out[i].Error = apierr.AsDetail(err)
				return
			}
			for _, p := range res.Msg.GetGroup().GetPartitions() {
				out[i].Partitions++
				if p.GetLag() < 0 {
					out[i].UnknownPartitions++
					continue
				}
				out[i].TotalLag += p.GetLag()
			}
		})
	}
	wg.Wait()
	return out
}

// OffsetForTimestamp asks the partition's leader for the first offset at
// or after a time, in the caller's name; the leader checks describe on
// the topic.
func (g *Gateway) OffsetForTimestamp(ctx context.Context, req *connect.Request[gatewayv1.OffsetForTimestampRequest]) (*connect.Response[gatewayv1.OffsetForTimestampResponse], error) {
	m := req.Msg
	ctx, cancel := context.WithTimeout(ctx, offsetsTimeout)
	defer cancel()
	out := &gatewayv1.OffsetForTimestampResponse{}
	err := g.onLeader(ctx, m.GetTopic(), m.GetPartition(), func(ctx context.Context, c storagev1connect.StorageServiceClient, l leader) error {
		res, err := c.ListOffsets(ctx, connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{{
			Topic: m.GetTopic(), Partition: m.GetPartition(), CurrentLeaderEpoch: l.epoch,
			Spec: storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, TimestampMs: m.GetTimestampMs(),
		}}}))
		if err != nil {
			return err
		}
		if len(res.Msg.GetPartitions()) != 1 {
			return apierr.New(connect.CodeInternal, commonv1.Reason_REASON_UNSPECIFIED, "leader answered %d partitions for 1", len(res.Msg.GetPartitions()))
		}
		r := res.Msg.GetPartitions()[0]
		if r.GetError() != nil {
			return apierr.Error(r.GetError())
		}
		out.Offset, out.TimestampMs = r.GetOffset(), r.GetTimestampMs()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}
