package server

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
)

// offsetsTimeout bounds each ListOffsets call DescribeTopics makes to a
// leader; a slow leader reports DEADLINE_EXCEEDED for its partitions rather
// than holding up the whole answer.
const offsetsTimeout = 5 * time.Second

// probeTimeout bounds the reachability check of a coordinator in
// DescribeCluster.
const probeTimeout = 2 * time.Second

// CreateTopic passes through to the controller in the caller's name; the
// controller checks create on the topic or on the cluster.
func (g *Gateway) CreateTopic(ctx context.Context, req *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	m := req.Msg
	up := &controllerv1.CreateTopicRequest{
		Name: m.GetName(), Partitions: m.GetPartitions(), ReplicationFactor: m.GetReplicationFactor(),
		Configs: m.GetConfigs(), ValidateOnly: m.GetValidateOnly(),
	}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.CreateTopicResponse, error) {
		return unwrap(c.CreateTopic(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.CreateTopicResponse{Topic: res.GetTopic()}), nil
}

// DeleteTopic passes through to the controller in the caller's name; the
// controller checks delete on the topic (the request always names it; the
// id only makes the delete conditional).
func (g *Gateway) DeleteTopic(ctx context.Context, req *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	up := &controllerv1.DeleteTopicRequest{Name: req.Msg.GetName(), TopicId: req.Msg.GetTopicId()}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.DeleteTopicResponse, error) {
		return unwrap(c.DeleteTopic(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.DeleteTopicResponse{TopicId: res.GetTopicId()}), nil
}

// ListTopics passes through to the controller in the caller's name; the
// controller answers the topics the caller may describe.
func (g *Gateway) ListTopics(ctx context.Context, req *connect.Request[gatewayv1.ListTopicsRequest]) (*connect.Response[gatewayv1.ListTopicsResponse], error) {
	up := &controllerv1.ListTopicsRequest{IncludeInternal: req.Msg.GetIncludeInternal()}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.ListTopicsResponse, error) {
		return unwrap(c.ListTopics(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.ListTopicsResponse{Topics: res.GetTopics()}), nil
}

// AlterTopicConfig passes through to the controller in the caller's name;
// the controller checks alter on the topic.
func (g *Gateway) AlterTopicConfig(ctx context.Context, req *connect.Request[gatewayv1.AlterTopicConfigRequest]) (*connect.Response[gatewayv1.AlterTopicConfigResponse], error) {
	m := req.Msg
	up := &controllerv1.AlterTopicConfigRequest{
		Name: m.GetName(), SetConfigs: m.GetSetConfigs(), DeleteConfigs: m.GetDeleteConfigs(), ValidateOnly: m.GetValidateOnly(),
	}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.AlterTopicConfigResponse, error) {
		return unwrap(c.AlterTopicConfig(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.AlterTopicConfigResponse{Configs: res.GetConfigs()}), nil
}

// DescribeTopics passes through to the controller and, with
// include_offsets, asks each partition's leader (as the controller just
// reported it) for the log start offset and high watermark. The
// controller, called in the caller's name, checks describe on each named
// topic and, without names, leaves out the topics the caller may not
// describe; the leaders check describe on each topic asked for offsets.
func (g *Gateway) DescribeTopics(ctx context.Context, req *connect.Request[gatewayv1.DescribeTopicsRequest]) (*connect.Response[gatewayv1.DescribeTopicsResponse], error) {
	up := &controllerv1.DescribeTopicsRequest{Names: req.Msg.GetNames()}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.DescribeTopicsResponse, error) {
		return unwrap(c.DescribeTopics(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	out := &gatewayv1.DescribeTopicsResponse{Topics: res.GetTopics()}
	if req.Msg.GetIncludeOffsets() {
		out.PartitionOffsets = g.partitionOffsets(ctx, out.Topics)
	}
	if req.Msg.GetIncludeLogExtents() {
		if out.PartitionOffsets == nil {
			for _, t := range out.Topics {
				for _, p := range t.GetPartitions() {
					out.PartitionOffsets = append(out.PartitionOffsets, &gatewayv1.PartitionOffsets{Topic: t.GetName(), Partition: p.GetPartition()})
				}
			}
			slices.SortStableFunc(out.PartitionOffsets, func(a, b *gatewayv1.PartitionOffsets) int {
				return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
			})
		}
		// As the gateway itself: DescribeLog needs describe on the
		// cluster, and the caller may describe every topic left.
		g.partitionExtents(guard.AsSelf(ctx), out.PartitionOffsets, req.Msg.GetIncludeOffsets())
	}
	return connect.NewResponse(out), nil
}

// partitionOffsets asks the leaders of every partition of topics for their
// earliest and latest offsets: two ListOffsets calls per leader node, all
// leaders at once. Failures are reported per partition.
func (g *Gateway) partitionOffsets(ctx context.Context, topics []*controllerv1.TopicDescription) []*gatewayv1.PartitionOffsets {
	var out []*gatewayv1.PartitionOffsets
	byLeader := map[string][]*gatewayv1.PartitionOffsets{} // by leader address
	leaderEpoch := map[*gatewayv1.PartitionOffsets]int32{}
	st := g.cache.Load()
	for _, t := range topics {
		for _, p := range t.GetPartitions() {
			po := &gatewayv1.PartitionOffsets{Topic: t.GetName(), Partition: p.GetPartition()}
			out = append(out, po)
			if p.GetLeaderId() < 0 {
				po.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Message: "partition has no leader"}
				continue
			}
			addr, ok := "", false
			if st != nil {
				addr, ok = st.NodeAddress(p.GetLeaderId())
			}
			if !ok {
				po.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Message: "address of leader node " + itoa(p.GetLeaderId()) + " is not known"}
				continue
			}
			byLeader[addr] = append(byLeader[addr], po)
			leaderEpoch[po] = p.GetLeaderEpoch()
		}
	}
	var wg sync.WaitGroup
	for addr, pos := range byLeader {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, offsetsTimeout)
			defer cancel()
			client := g.storageClient(addr)
			ask := func(spec storagev1.OffsetSpec) ([]*storagev1.ListOffsetsPartitionResult, error) {
				req := &storagev1.ListOffsetsRequest{}
				for _, po := range pos {
					req.Partitions = append(req.Partitions, &storagev1.ListOffsetsPartition{
						Topic: po.Topic, Partition: po.Partition, CurrentLeaderEpoch: leaderEpoch[po], Spec: spec,
					})
				}
				r, err := client.ListOffsets(ctx, connect.NewRequest(req))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetPartitions(), nil
			}
			var earliest, latest []*storagev1.ListOffsetsPartitionResult
			var errE, errL error
			var inner sync.WaitGroup
			inner.Go(func() { earliest, errE = ask(storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST) })
			inner.Go(func() { latest, errL = ask(storagev1.OffsetSpec_OFFSET_SPEC_LATEST) })
			inner.Wait()
			for i, po := range pos {
				switch {
				case errE != nil:
					po.Error = apierr.AsDetail(errE)
				case errL != nil:
					po.Error = apierr.AsDetail(errL)
				case i >= len(earliest) || i >= len(latest):
					po.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_INTERNAL, Message: "leader answered fewer partitions than asked"}
				case earliest[i].GetError() != nil:
					po.Error = earliest[i].GetError()
				case latest[i].GetError() != nil:
					po.Error = latest[i].GetError()
				default:
					po.LogStartOffset = earliest[i].GetOffset()
					po.HighWatermark = latest[i].GetOffset()
				}
			}
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b *gatewayv1.PartitionOffsets) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// DescribeCluster asks a controller for its view, adds the reachability of
// the configured coordinators, and gives the overall verdict. The
// controller, called in the caller's name, checks describe on the cluster.
func (g *Gateway) DescribeCluster(ctx context.Context, _ *connect.Request[gatewayv1.DescribeClusterRequest]) (*connect.Response[gatewayv1.DescribeClusterResponse], error) {
	var answered string
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.DescribeClusterResponse, error) {
		return unwrap(c.DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{})))
	})
	if err != nil {
		return nil, err
	}
	answered = g.controllers.urls[g.controllers.preferred.Load()]
	out := &gatewayv1.DescribeClusterResponse{
		ClusterId:                 res.GetClusterId(),
		Controllers:               res.GetControllers(),
		Nodes:                     res.GetNodes(),
		MetadataVersion:           res.GetMetadataVersion(),
		OfflinePartitions:         res.GetOfflinePartitions(),
		UnderReplicatedPartitions: res.GetUnderReplicatedPartitions(),
		Services:                  []*gatewayv1.ServiceStatus{{Service: "controller", Address: answered, Healthy: true}},
	}
	out.Services = append(out.Services, g.probeCoordinators(ctx)...)
	healthy := res.GetControllers().GetActiveControllerId() != "" &&
		res.GetOfflinePartitions() == 0 && res.GetUnderReplicatedPartitions() == 0
	for _, n := range res.GetNodes() {
		// A drained node that was stopped is retired, not a problem.
		retired := n.GetDrained() && n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD
		if n.GetState() != controllerv1.NodeState_NODE_STATE_ALIVE && !retired {
			healthy = false
		}
	}
	for _, s := range out.Services {
		if !s.Healthy {
			healthy = false
		}
	}
	out.Healthy = healthy
	return connect.NewResponse(out), nil
}

// probeCoordinators checks each configured coordinator with a cheap
// ListGroups call: any answer but UNAVAILABLE or a timeout counts as up.
// (The gateway knows the coordinators' API URLs, not their admin ports, so
// it cannot read their /readyz.)
func (g *Gateway) probeCoordinators(ctx context.Context) []*gatewayv1.ServiceStatus {
	out := make([]*gatewayv1.ServiceStatus, len(g.coordinators))
	var wg sync.WaitGroup
	for i, c := range g.coordinators {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			s := &gatewayv1.ServiceStatus{Service: "coordinator", Address: g.coordURLs[i], Healthy: true}
			_, err := c.ListGroups(ctx, connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
			if code := connect.CodeOf(err); err != nil && (code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded) {
				s.Healthy = false
				s.Message = apierr.AsDetail(err).GetMessage()
			}
			out[i] = s
		})
	}
	wg.Wait()
	return out
}

// InitProducerId hands out the next id of the gateway's current block,
// fetching a new block from the controller when it is used up. Any
// authenticated caller may have one: a producer id grants nothing, and
// each produce is checked for write on its topic.
func (g *Gateway) InitProducerId(ctx context.Context, _ *connect.Request[gatewayv1.InitProducerIdRequest]) (*connect.Response[gatewayv1.InitProducerIdResponse], error) {
	if err := g.authenticated(ctx); err != nil {
		return nil, err
	}
	id, err := g.pids.Next(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		return nil, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED,
			"cannot get producer ids from the controller: %s", apierr.AsDetail(err).GetMessage())
	}
	return connect.NewResponse(&gatewayv1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}), nil
}

// allocateProducerIDs is the pidblock fetch: one AllocateProducerIds call.
func (g *Gateway) allocateProducerIDs(count int32) func(context.Context) (int64, int32, error) {
	return func(ctx context.Context) (int64, int32, error) {
		// As the gateway itself, also when a Kafka listener's call for a
		// user brought it here: only services may ask.
		ctx = guard.AsSelf(ctx)
		res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*controllerv1.AllocateProducerIdsResponse, error) {
			return unwrap(c.AllocateProducerIds(ctx, connect.NewRequest(&controllerv1.AllocateProducerIdsRequest{
				Requester: "strata-gateway", Count: count,
			})))
		})
		if err != nil {
			return 0, 0, err
		}
		return res.GetFirstProducerId(), res.GetCount(), nil
	}
}

// unwrap returns a unary call's message, or its error.
func unwrap[T any](r *connect.Response[T], err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

// ctxError is the Connect error for a request whose context ended.
func ctxError(ctx context.Context) *connect.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}
