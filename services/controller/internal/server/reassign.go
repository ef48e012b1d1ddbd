package server

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
)

// The elastic-storage RPCs: partition moves, rebalance, drain, more
// partitions and leader elections. The logic is in metastore (reassign.go,
// rebalance.go) and balancer; see docs/design/rebalance.md.

func (h *Handler) AlterPartitionReassignments(ctx context.Context, req *connect.Request[controllerv1.AlterPartitionReassignmentsRequest]) (*connect.Response[controllerv1.AlterPartitionReassignmentsResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	var reqs []metastore.MoveRequest
	for _, r := range req.Msg.GetReassignments() {
		reqs = append(reqs, metastore.MoveRequest{Topic: r.GetTopic(), Partition: r.GetPartition(), Replicas: r.GetReplicas()})
	}
	res, err := h.c.store.AlterPartitionReassignments(ctx, reqs, req.Msg.GetThrottleBytesPerSecond())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	for _, r := range res {
		if r.GetError() == nil {
			h.c.log.InfoContext(ctx, "partition move", slog.String("topic", r.GetTopic()), slog.Int("partition", int(r.GetPartition())),
				slog.Any("replicas", r.GetState().GetReplicas()), slog.Any("adding", r.GetState().GetAddingReplicas()),
				slog.Any("removing", r.GetState().GetRemovingReplicas()))
		}
	}
	return connect.NewResponse(&controllerv1.AlterPartitionReassignmentsResponse{Results: res}), nil
}

func (h *Handler) ListPartitionReassignments(ctx context.Context, req *connect.Request[controllerv1.ListPartitionReassignmentsRequest]) (*connect.Response[controllerv1.ListPartitionReassignmentsResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	parts, throttle, err := h.c.store.ListReassignments(ctx, req.Msg.GetTopics())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.ListPartitionReassignmentsResponse{Reassignments: parts, ThrottleBytesPerSecond: throttle}), nil
}

func (h *Handler) Rebalance(ctx context.Context, req *connect.Request[controllerv1.RebalanceRequest]) (*connect.Response[controllerv1.RebalanceResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	m, err := h.c.store.Load(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	res, err := h.c.store.Rebalance(ctx, metastore.PlanOptions{
		DryRun: req.Msg.GetDryRun(), Throttle: req.Msg.GetThrottleBytesPerSecond(), Sizes: h.c.partitionSizes(ctx, m),
	})
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	if res.GetStarted() {
		h.c.log.InfoContext(ctx, "rebalance started", slog.Int("moves", len(res.GetMoves())),
			slog.Int64("throttle_bytes_per_second", req.Msg.GetThrottleBytesPerSecond()))
	}
	return connect.NewResponse(res), nil
}

func (h *Handler) DrainNode(ctx context.Context, req *connect.Request[controllerv1.DrainNodeRequest]) (*connect.Response[controllerv1.DrainNodeResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	m, err := h.c.store.Load(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	res, err := h.c.store.DrainNode(ctx, req.Msg.GetNodeId(), req.Msg.GetUndrain(), req.Msg.GetThrottleBytesPerSecond(), h.c.partitionSizes(ctx, m))
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	what := "node drained"
	if req.Msg.GetUndrain() {
		what = "node undrained"
	}
	h.c.log.InfoContext(ctx, what, slog.Int("node", int(req.Msg.GetNodeId())), slog.Int("moves", len(res.GetMoves())))
	return connect.NewResponse(res), nil
}

func (h *Handler) CreatePartitions(ctx context.Context, req *connect.Request[controllerv1.CreatePartitionsRequest]) (*connect.Response[controllerv1.CreatePartitionsResponse], error) {
	if err := h.c.guard.Authorize(ctx, acl.Alter, acl.Topic, req.Msg.GetTopic()); err != nil {
		return nil, err
	}
	d, err := h.c.store.CreatePartitions(ctx, req.Msg.GetTopic(), req.Msg.GetTotal(), req.Msg.GetValidateOnly())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	if !req.Msg.GetValidateOnly() {
		h.c.log.InfoContext(ctx, "partitions added", slog.String("topic", req.Msg.GetTopic()), slog.Int("partitions", int(req.Msg.GetTotal())))
	}
	return connect.NewResponse(&controllerv1.CreatePartitionsResponse{Topic: d}), nil
}

func (h *Handler) ElectLeaders(ctx context.Context, req *connect.Request[controllerv1.ElectLeadersRequest]) (*connect.Response[controllerv1.ElectLeadersResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	res, err := h.c.store.ElectLeaders(ctx, req.Msg.GetElectionType(), req.Msg.GetPartitions())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.ElectLeadersResponse{Partitions: res}), nil
}
