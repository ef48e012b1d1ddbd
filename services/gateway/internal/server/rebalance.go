package server

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// The elastic-storage admin calls (partition moves, rebalance, drain, more
// partitions, leader elections) pass through to the controller. Their
// gateway messages have the controller's fields and field numbers (see
// gateway.proto), so each is converted by re-marshalling.

// passThrough converts in to the controller's request type, makes the call
// and converts the answer to the gateway's response type GRes.
func passThrough[GRes, CReq, CRes any, PGRes interface {
	*GRes
	proto.Message
}, PReq interface {
	*CReq
	proto.Message
}, PRes interface {
	*CRes
	proto.Message
}](ctx context.Context, g *Gateway, in proto.Message,
	call func(controllerv1connect.ControllerServiceClient, context.Context, *connect.Request[CReq]) (*connect.Response[CRes], error)) (*connect.Response[GRes], error) {
	up := PReq(new(CReq))
	if err := remarshal(in, up); err != nil {
		return nil, err
	}
	res, err := callController(ctx, g.controllers, func(ctx context.Context, c controllerv1connect.ControllerServiceClient) (*CRes, error) {
		return unwrap(call(c, ctx, connect.NewRequest((*CReq)(up))))
	})
	if err != nil {
		return nil, err
	}
	out := PGRes(new(GRes))
	if err := remarshal(PRes(res), out); err != nil {
		return nil, err
	}
	return connect.NewResponse((*GRes)(out)), nil
}

// remarshal copies src into dst through the wire format: the two message
// types share field numbers and types.
func remarshal(src, dst proto.Message) error {
	b, err := proto.Marshal(src)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if err := proto.Unmarshal(b, dst); err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return nil
}

// AlterPartitionReassignments passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) AlterPartitionReassignments(ctx context.Context, req *connect.Request[gatewayv1.AlterPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.AlterPartitionReassignmentsResponse], error) {
	return passThrough[gatewayv1.AlterPartitionReassignmentsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.AlterPartitionReassignments)
}

// ListPartitionReassignments passes through to the controller in the
// caller's name; the controller checks describe on the cluster.
func (g *Gateway) ListPartitionReassignments(ctx context.Context, req *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error) {
	return passThrough[gatewayv1.ListPartitionReassignmentsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.ListPartitionReassignments)
}

// Rebalance passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) Rebalance(ctx context.Context, req *connect.Request[gatewayv1.RebalanceRequest]) (*connect.Response[gatewayv1.RebalanceResponse], error) {
	return passThrough[gatewayv1.RebalanceResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.Rebalance)
}

// DrainNode passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) DrainNode(ctx context.Context, req *connect.Request[gatewayv1.DrainNodeRequest]) (*connect.Response[gatewayv1.DrainNodeResponse], error) {
	return passThrough[gatewayv1.DrainNodeResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.DrainNode)
}

// CreatePartitions passes through to the controller in the
// caller's name; the controller checks alter on the topic.
func (g *Gateway) CreatePartitions(ctx context.Context, req *connect.Request[gatewayv1.CreatePartitionsRequest]) (*connect.Response[gatewayv1.CreatePartitionsResponse], error) {
	return passThrough[gatewayv1.CreatePartitionsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.CreatePartitions)
}

// ElectLeaders passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) ElectLeaders(ctx context.Context, req *connect.Request[gatewayv1.ElectLeadersRequest]) (*connect.Response[gatewayv1.ElectLeadersResponse], error) {
	return passThrough[gatewayv1.ElectLeadersResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.ElectLeaders)
}
