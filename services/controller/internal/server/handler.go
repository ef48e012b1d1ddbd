// Package server is the controller process: the embedded etcd member, the
// election, the active controller's reconcile loop and the Connect
// handler of strata.controller.v1.ControllerService.
//
// Forwarding: every RPC is served by the controller that receives it,
// directly against its own etcd member. This is equivalent to forwarding
// to the active controller and safe because each write is one etcd
// transaction guarded by the revisions of what it read (see
// docs/design/controller.md): topic creation is conditioned on the topic
// key being absent, AlterPartition on the partition's ModRevision and the
// node's epoch, producer-id blocks on the counter's ModRevision, node
// registration on the live key being absent. Only the reaction to node
// liveness (leader election on node death and return) needs one writer,
// and only the active controller runs it, guarded by its election key.
package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
)

// Handler implements ControllerServiceHandler on a Controller. Every RPC
// first asks the controller's guard (docs/design/controller.md,
// "Security"): storage-node RPCs need that node's own identity, the
// metadata stream and producer ids a service identity, the rest the ACLs
// of Kafka's model; a guard that does not enforce allows everything.
type Handler struct {
	controllerv1connect.UnimplementedControllerServiceHandler
	c *Controller
}

var _ controllerv1connect.ControllerServiceHandler = (*Handler)(nil)

// toConnect maps internal errors to Connect errors at the edge: typed
// metastore errors keep their code, reason and message; anything else is
// UNAVAILABLE (etcd unreachable, no quorum) with a generic line.
func (h *Handler) toConnect(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if d := metastore.Detail(err); d != nil {
		return apierr.Error(d)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeOf(err), errors.New("request canceled or timed out"))
	}
	h.c.log.WarnContext(ctx, "etcd request failed", slog.String("err", err.Error()))
	d := &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_NOT_CONTROLLER,
		Message: "controller metadata store unavailable; retry"}
	if a := h.c.elector.Active(); a != nil {
		d.Hint = &commonv1.ErrorDetail_Controller{Controller: a}
	}
	return apierr.Error(d)
}

func (h *Handler) RegisterNode(ctx context.Context, req *connect.Request[controllerv1.RegisterNodeRequest]) (*connect.Response[controllerv1.RegisterNodeResponse], error) {
	if err := h.c.guard.RequireStorageNode(ctx, req.Msg.NodeId); err != nil {
		return nil, err
	}
	m := req.Msg
	epoch, err := h.c.store.RegisterNode(ctx, &commonv1.Node{NodeId: m.NodeId, Address: m.Address, Rack: m.Rack, Listeners: m.Listeners}, m.IncarnationId)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "node registered", slog.Int("node", int(m.NodeId)), slog.Int64("epoch", epoch))
	ttl := h.c.store.NodeTTL
	return connect.NewResponse(&controllerv1.RegisterNodeResponse{
		NodeEpoch: epoch, HeartbeatIntervalMs: int32(ttl / 3 / time.Millisecond), LeaseTtlMs: int32(ttl / time.Millisecond),
	}), nil
}

func (h *Handler) Heartbeat(ctx context.Context, req *connect.Request[controllerv1.HeartbeatRequest]) (*connect.Response[controllerv1.HeartbeatResponse], error) {
	if err := h.c.guard.RequireStorageNode(ctx, req.Msg.NodeId); err != nil {
		return nil, err
	}
	ttl, err := h.c.store.Heartbeat(ctx, req.Msg.NodeId, req.Msg.NodeEpoch)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	nodes, others := h.c.quotas.report(req.Msg.GetNodeId(), req.Msg.GetQuotaUsage(), time.Now(), ttl)
	return connect.NewResponse(&controllerv1.HeartbeatResponse{LeaseTtlMs: int32(ttl / time.Millisecond), QuotaNodes: nodes, QuotaOthers: others}), nil
}

// RegisterCoordinator, CoordinatorHeartbeat and UnregisterCoordinator
// keep the coordinator registry (metastore/coordinators.go); they need a
// coordinator's service identity.
func (h *Handler) RegisterCoordinator(ctx context.Context, req *connect.Request[controllerv1.RegisterCoordinatorRequest]) (*connect.Response[controllerv1.RegisterCoordinatorResponse], error) {
	if _, err := h.c.guard.RequireService(ctx, tlsconfig.RoleCoordinator); err != nil {
		return nil, err
	}
	c := req.Msg.GetCoordinator()
	id, err := h.c.store.RegisterCoordinator(ctx, c)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "coordinator registered", slog.String("coordinator", c.GetCoordinatorId()),
		slog.Int("kafka_node_id", int(c.GetKafkaNodeId())), slog.Int64("registration", id))
	ttl := h.c.store.NodeTTL
	return connect.NewResponse(&controllerv1.RegisterCoordinatorResponse{
		RegistrationId: id, HeartbeatIntervalMs: int32(ttl / 3 / time.Millisecond), LeaseTtlMs: int32(ttl / time.Millisecond),
	}), nil
}

func (h *Handler) CoordinatorHeartbeat(ctx context.Context, req *connect.Request[controllerv1.CoordinatorHeartbeatRequest]) (*connect.Response[controllerv1.CoordinatorHeartbeatResponse], error) {
	if _, err := h.c.guard.RequireService(ctx, tlsconfig.RoleCoordinator); err != nil {
		return nil, err
	}
	ttl, err := h.c.store.CoordinatorHeartbeat(ctx, req.Msg.GetKafkaNodeId(), req.Msg.GetRegistrationId())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.CoordinatorHeartbeatResponse{LeaseTtlMs: int32(ttl / time.Millisecond)}), nil
}

func (h *Handler) UnregisterCoordinator(ctx context.Context, req *connect.Request[controllerv1.UnregisterCoordinatorRequest]) (*connect.Response[controllerv1.UnregisterCoordinatorResponse], error) {
	if _, err := h.c.guard.RequireService(ctx, tlsconfig.RoleCoordinator); err != nil {
		return nil, err
	}
	if err := h.c.store.UnregisterCoordinator(ctx, req.Msg.GetRegistrationId()); err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.UnregisterCoordinatorResponse{}), nil
}

func (h *Handler) CreateTopic(ctx context.Context, req *connect.Request[controllerv1.CreateTopicRequest]) (*connect.Response[controllerv1.CreateTopicResponse], error) {
	if err := h.c.guard.AuthorizeCreateTopic(ctx, req.Msg.Name); err != nil {
		return nil, err
	}
	m := req.Msg
	d, err := h.c.store.CreateTopic(ctx, metastore.CreateTopicRequest{
		Name: m.Name, Partitions: m.Partitions, ReplicationFactor: m.ReplicationFactor, Configs: m.Configs, ValidateOnly: m.ValidateOnly,
	})
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	if !m.ValidateOnly {
		h.c.log.InfoContext(ctx, "topic created", slog.String("topic", m.Name), slog.String("topic_id", d.TopicId))
	}
	return connect.NewResponse(&controllerv1.CreateTopicResponse{Topic: d}), nil
}

func (h *Handler) DeleteTopic(ctx context.Context, req *connect.Request[controllerv1.DeleteTopicRequest]) (*connect.Response[controllerv1.DeleteTopicResponse], error) {
	if err := h.c.guard.Authorize(ctx, acl.Delete, acl.Topic, req.Msg.Name); err != nil {
		return nil, err
	}
	id, err := h.c.store.DeleteTopic(ctx, req.Msg.Name, req.Msg.TopicId)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "topic deleted", slog.String("topic", req.Msg.Name), slog.String("topic_id", id))
	return connect.NewResponse(&controllerv1.DeleteTopicResponse{TopicId: id}), nil
}

func (h *Handler) DescribeTopics(ctx context.Context, req *connect.Request[controllerv1.DescribeTopicsRequest]) (*connect.Response[controllerv1.DescribeTopicsResponse], error) {
	// A topic named without describe is refused whether it exists or not,
	// so the refusal tells nothing about which topics exist.
	for _, n := range req.Msg.Names {
		if err := h.c.guard.Authorize(ctx, acl.Describe, acl.Topic, n); err != nil {
			return nil, err
		}
	}
	m, err := h.c.store.Load(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	out := &controllerv1.DescribeTopicsResponse{}
	names := req.Msg.Names
	if len(names) == 0 {
		for _, n := range m.TopicNames() {
			if !m.Topics[n].GetInternal() && h.c.guard.Allowed(ctx, acl.Describe, acl.Topic, n) {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		d := m.Describe(n)
		if d == nil {
			return nil, h.toConnect(ctx, &metastore.Error{Code: commonv1.Code_CODE_NOT_FOUND,
				Reason: commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, Msg: "topic " + quote(n) + " not found"})
		}
		out.Topics = append(out.Topics, d)
	}
	return connect.NewResponse(out), nil
}

func quote(s string) string { return "\"" + s + "\"" }

func (h *Handler) ListTopics(ctx context.Context, req *connect.Request[controllerv1.ListTopicsRequest]) (*connect.Response[controllerv1.ListTopicsResponse], error) {
	m, err := h.c.store.Load(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	out := &controllerv1.ListTopicsResponse{}
	for _, n := range m.TopicNames() {
		t := m.Topics[n]
		if t.GetInternal() && !req.Msg.IncludeInternal || !h.c.guard.Allowed(ctx, acl.Describe, acl.Topic, n) {
			continue
		}
		out.Topics = append(out.Topics, &controllerv1.TopicListing{
			Name: n, TopicId: t.GetTopicId(), Partitions: int32(len(m.Partitions[n])),
			ReplicationFactor: int32(m.ReplicationFactor(n)), Internal: t.GetInternal(),
		})
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) AlterTopicConfig(ctx context.Context, req *connect.Request[controllerv1.AlterTopicConfigRequest]) (*connect.Response[controllerv1.AlterTopicConfigResponse], error) {
	if err := h.c.guard.Authorize(ctx, acl.Alter, acl.Topic, req.Msg.Name); err != nil {
		return nil, err
	}
	m := req.Msg
	entries, err := h.c.store.AlterTopicConfig(ctx, m.Name, m.SetConfigs, m.DeleteConfigs, m.ValidateOnly)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.AlterTopicConfigResponse{Configs: entries}), nil
}

func (h *Handler) AlterPartition(ctx context.Context, req *connect.Request[controllerv1.AlterPartitionRequest]) (*connect.Response[controllerv1.AlterPartitionResponse], error) {
	if err := h.c.guard.RequireStorageNode(ctx, req.Msg.NodeId); err != nil {
		return nil, err
	}
	res, err := h.c.store.AlterPartition(ctx, req.Msg.NodeId, req.Msg.NodeEpoch, req.Msg.Partitions)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.AlterPartitionResponse{Partitions: res}), nil
}

func (h *Handler) AllocateProducerIds(ctx context.Context, req *connect.Request[controllerv1.AllocateProducerIdsRequest]) (*connect.Response[controllerv1.AllocateProducerIdsResponse], error) {
	if _, err := h.c.guard.RequireService(ctx); err != nil {
		return nil, err
	}
	count := req.Msg.Count
	if count == 0 {
		count = 1000
	}
	first, err := h.c.store.AllocateProducerIDs(ctx, count)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.AllocateProducerIdsResponse{FirstProducerId: first, Count: count}), nil
}

func (h *Handler) DescribeCluster(ctx context.Context, _ *connect.Request[controllerv1.DescribeClusterRequest]) (*connect.Response[controllerv1.DescribeClusterResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	m, err := h.c.store.Load(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	out := &controllerv1.DescribeClusterResponse{
		ClusterId: m.ClusterID, Controllers: h.c.quorum(ctx, m), Nodes: m.NodeList(), MetadataVersion: m.Revision,
	}
	for _, n := range m.TopicNames() {
		for idx := range m.Partitions[n] {
			p := m.Partition(n, idx)
			if p.LeaderId < 0 || !m.IsLive(p.LeaderId) {
				out.OfflinePartitions++
			}
			// A moving partition lists its adding replicas, which are not
			// in sync yet: it is under-replicated only when fewer replicas
			// are in sync than it had before the move (Kafka's KIP-352).
			if len(p.Isr) < len(p.Replicas)-len(p.AddingReplicas) {
				out.UnderReplicatedPartitions++
			}
		}
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) WatchMetadata(ctx context.Context, req *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	// The stream carries the users' token hashes: services only.
	if _, err := h.c.guard.RequireService(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.c.draining:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.c.store.WatchMetadata(ctx, req.Msg.FromVersion, h.c.cfg.WatchKeepAlive, stream.Send)
	select {
	case <-h.c.draining:
		return connect.NewError(connect.CodeUnavailable, errors.New("controller shutting down; reconnect"))
	default:
	}
	if errors.Is(err, metastore.ErrWatchLost) {
		return connect.NewError(connect.CodeUnavailable, errors.New("metadata watch lost; reconnect with the last applied version"))
	}
	if err != nil && ctx.Err() == nil {
		return h.toConnect(ctx, err)
	}
	return nil
}
