package server

import (
	"context"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/serve"
)

// maxCoordinatorHops bounds how often one group call follows a
// REASON_NOT_COORDINATOR hint while ownership moves.
const maxCoordinatorHops = 3

// errNoCoordinator is the answer to every group call when --coordinator is
// empty. The gateway never invents group state.
func errNoCoordinator() *connect.Error {
	return apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "no coordinator is configured")
}

// FindCoordinator asks a coordinator (LocateGroup) which instance owns the
// group, or the transactional id. Either needs describe on it, as Kafka's
// FindCoordinator.
func (g *Gateway) FindCoordinator(ctx context.Context, req *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	if req.Msg.GetGroupId() == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "group_id is empty")
	}
	keyType := req.Msg.GetKeyType()
	rt := acl.Group
	if keyType == coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		rt = acl.TransactionalID
	}
	if err := g.guard.Authorize(ctx, acl.Describe, rt, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	listener := req.Msg.GetListener()
	if listener == "" {
		listener = g.clientListener
	}
	loc, err := g.locateGroup(ctx, req.Msg.GetGroupId(), listener, keyType)
	if err != nil {
		return nil, err
	}
	// Only the owner knows its own listeners: when another instance
	// answered, ask the owner (at its default address, which the gateway
	// reaches) for its address on the client listener.
	for hop := 0; listener != "" && !loc.GetListenerResolved() && hop < maxCoordinatorHops; hop++ {
		c := coordinatorv1connect.NewCoordinatorServiceClient(g.httpClient, loc.GetAddress(), g.clientOpts...)
		next, err := unwrap(c.LocateGroup(ctx, connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: req.Msg.GetGroupId(), Listener: listener, KeyType: keyType})))
		if err != nil {
			return nil, apierr.Forward(err)
		}
		loc = next
	}
	if listener == serve.KafkaListenerName && loc.GetListenerResolved() {
		owner := loc.GetCoordinatorId()
		switch holder := g.registeredKafkaID(brokerid.Coordinator(owner)); {
		case holder == nil:
			// Not registered (no --controller): remember it, as Metadata
			// must list the broker a client is sent to.
			g.kafkaCoords.Note(owner, loc.GetAddress())
		case holder.GetCoordinatorId() != owner:
			// Another live coordinator holds the owner's broker id, so
			// Kafka clients cannot be sent to the owner's listener: answer
			// its default address, and the bridge names a storage node.
			def, err := g.locateGroup(ctx, req.Msg.GetGroupId(), "", keyType)
			if err != nil {
				return nil, err
			}
			loc = def
		default:
			g.kafkaCoords.Forget(owner) // Metadata lists it from the registry
		}
	}
	return connect.NewResponse(&gatewayv1.FindCoordinatorResponse{CoordinatorId: loc.GetCoordinatorId(), Address: loc.GetAddress()}), nil
}

// kafkaCoordinatorNodes are the coordinators Metadata lists as Kafka
// brokers (MetadataResponse.kafka_coordinators): those registered in the
// metadata view st, then those this gateway located that are not.
func (g *Gateway) kafkaCoordinatorNodes(st *metaview.View) []*commonv1.Node {
	return g.kafkaCoords.Nodes(st.Coordinators.GetCoordinators())
}

// registeredKafkaID is the live registration holding Kafka broker id
// nodeID in the controller's registry, or nil.
func (g *Gateway) registeredKafkaID(nodeID int32) *controllerv1.CoordinatorRegistration {
	st := g.cache.Load()
	if st == nil {
		return nil
	}
	for _, r := range st.Coordinators.GetCoordinators() {
		if r.GetKafkaNodeId() == nodeID {
			return r
		}
	}
	return nil
}

// locateGroup asks the configured coordinators in turn, moving on while
// they are UNAVAILABLE, which instance owns key, a group or a
// transactional id (keyType).
// listener is the advertised listener whose address the answer should
// carry: the client listener for FindCoordinator, "" (the default address,
// which the gateway reaches) for calls the gateway makes itself.
func (g *Gateway) locateGroup(ctx context.Context, key, listener string, keyType coordinatorv1.CoordinatorKeyType) (*coordinatorv1.LocateGroupResponse, error) {
	return anyCoordinator(ctx, g, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.LocateGroupResponse, error) {
		return unwrap(c.LocateGroup(ctx, connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: key, Listener: listener, KeyType: keyType})))
	})
}

// onOwner runs call against the coordinator owning group, following
// REASON_NOT_COORDINATOR hints a few times.
func onOwner[T any](ctx context.Context, g *Gateway, group string, call func(context.Context, coordinatorv1connect.CoordinatorServiceClient) (T, error)) (T, error) {
	var zero T
	loc, err := g.locateGroup(ctx, group, "", coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP)
	if err != nil {
		return zero, err
	}
	addr := loc.GetAddress()
	for hop := 0; ; hop++ {
		c := coordinatorv1connect.NewCoordinatorServiceClient(g.httpClient, addr, g.clientOpts...)
		res, err := call(ctx, c)
		if err == nil {
			return res, nil
		}
		ed := apierr.DetailOf(err)
		next := ed.GetCoordinator().GetAddress()
		if ed.GetReason() != commonv1.Reason_REASON_NOT_COORDINATOR || next == "" || next == addr || hop+1 >= maxCoordinatorHops {
			return zero, apierr.Forward(err)
		}
		addr = next
	}
}

// ListGroups passes through to a coordinator in the caller's name; the
// coordinator answers the groups the caller may describe.
func (g *Gateway) ListGroups(ctx context.Context, req *connect.Request[gatewayv1.ListGroupsRequest]) (*connect.Response[gatewayv1.ListGroupsResponse], error) {
	up := &coordinatorv1.ListGroupsRequest{States: req.Msg.GetStates()}
	res, err := anyCoordinator(ctx, g, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.ListGroupsResponse, error) {
		return unwrap(c.ListGroups(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	groups := res.GetGroups()
	out := &gatewayv1.ListGroupsResponse{Groups: groups}
	if req.Msg.GetIncludeLag() {
		ids := make([]string, len(groups))
		for i, gr := range groups {
			ids[i] = gr.GetGroupId()
		}
		out.Lags = g.groupLags(ctx, ids)
	}
	return connect.NewResponse(out), nil
}

// DescribeGroup passes through to the group's coordinator in the caller's
// name; the coordinator checks describe on the group and leaves out the
// topics the caller may not describe.
func (g *Gateway) DescribeGroup(ctx context.Context, req *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
	up := &coordinatorv1.DescribeGroupRequest{GroupId: req.Msg.GetGroupId()}
	res, err := onOwner(ctx, g, up.GroupId, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.DescribeGroupResponse, error) {
		return unwrap(c.DescribeGroup(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.DescribeGroupResponse{Group: res.GetGroup()}), nil
}

// ResetOffsets passes through to the group's coordinator in the caller's
// name; the coordinator checks read on the group and on each topic reset,
// as a commit does.
func (g *Gateway) ResetOffsets(ctx context.Context, req *connect.Request[gatewayv1.ResetOffsetsRequest]) (*connect.Response[gatewayv1.ResetOffsetsResponse], error) {
	m := req.Msg
	up := &coordinatorv1.ResetOffsetsRequest{
		GroupId: m.GetGroupId(), Topics: m.GetTopics(), Spec: m.GetSpec(),
		Offset: m.GetOffset(), TimestampMs: m.GetTimestampMs(), DryRun: m.GetDryRun(),
	}
	res, err := onOwner(ctx, g, up.GroupId, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.ResetOffsetsResponse, error) {
		return unwrap(c.ResetOffsets(ctx, connect.NewRequest(up)))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.ResetOffsetsResponse{Partitions: res.GetPartitions()}), nil
}

// DeleteGroup passes through to the group's coordinator in the caller's
// name; the coordinator checks delete on the group.
func (g *Gateway) DeleteGroup(ctx context.Context, req *connect.Request[gatewayv1.DeleteGroupRequest]) (*connect.Response[gatewayv1.DeleteGroupResponse], error) {
	up := &coordinatorv1.DeleteGroupRequest{GroupId: req.Msg.GetGroupId()}
	if _, err := onOwner(ctx, g, up.GroupId, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.DeleteGroupResponse, error) {
		return unwrap(c.DeleteGroup(ctx, connect.NewRequest(up)))
	}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.DeleteGroupResponse{}), nil
}

// ListTransactions passes through to a coordinator in the caller's name;
// any instance answers from the offsets database, listing the ids the
// caller may describe.
func (g *Gateway) ListTransactions(ctx context.Context, req *connect.Request[gatewayv1.ListTransactionsRequest]) (*connect.Response[gatewayv1.ListTransactionsResponse], error) {
	res, err := anyCoordinator(ctx, g, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.ListTransactionsResponse, error) {
		return unwrap(c.ListTransactions(ctx, connect.NewRequest(&coordinatorv1.ListTransactionsRequest{States: req.Msg.GetStates(), ProducerIds: req.Msg.GetProducerIds()})))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.ListTransactionsResponse{Transactions: res.GetTransactions()}), nil
}

// DescribeTransactions passes through to a coordinator in the caller's
// name; any instance answers from the offsets database.
func (g *Gateway) DescribeTransactions(ctx context.Context, req *connect.Request[gatewayv1.DescribeTransactionsRequest]) (*connect.Response[gatewayv1.DescribeTransactionsResponse], error) {
	if len(req.Msg.GetTransactionalIds()) == 0 {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "no transactional id to describe")
	}
	res, err := anyCoordinator(ctx, g, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) (*coordinatorv1.DescribeTransactionsResponse, error) {
		return unwrap(c.DescribeTransactions(ctx, connect.NewRequest(&coordinatorv1.DescribeTransactionsRequest{TransactionalIds: req.Msg.GetTransactionalIds()})))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.DescribeTransactionsResponse{Transactions: res.GetTransactions()}), nil
}

// anyCoordinator makes call on the configured coordinators in turn until
// one answers: for the calls any instance answers (LocateGroup, and the
// listings from the offsets database). It moves on only past an
// UNAVAILABLE one.
func anyCoordinator[T any](ctx context.Context, g *Gateway, call func(context.Context, coordinatorv1connect.CoordinatorServiceClient) (*T, error)) (*T, error) {
	if len(g.coordinators) == 0 {
		return nil, errNoCoordinator()
	}
	var lastErr error
	for _, c := range g.coordinators {
		res, err := call(ctx, c)
		if err == nil {
			return res, nil
		}
		lastErr = err
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			break
		}
	}
	return nil, apierr.Forward(lastErr)
}
