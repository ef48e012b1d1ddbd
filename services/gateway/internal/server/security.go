package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
)

// The security admin calls: who the caller is, and the users, ACLs and
// quotas, which live in the controller. The gateway's messages mirror the
// controller's field for field, so they pass through as the
// elastic-storage calls do (passThrough). Tokens and their hashes cross
// the gateway in the messages only: nothing here logs a message.

// WhoAmI names the caller as the gateway authenticated it. Without
// --require-auth that is User:ANONYMOUS, unless the caller presented
// credentials, which are checked all the same.
func (g *Gateway) WhoAmI(ctx context.Context, _ *connect.Request[gatewayv1.WhoAmIRequest]) (*connect.Response[gatewayv1.WhoAmIResponse], error) {
	if err := g.authenticated(ctx); err != nil {
		return nil, err
	}
	info, ok := guard.Info(ctx)
	if !ok || info.Principal.IsZero() {
		// A handler reached without the guard's middleware (tests, an
		// embedding) on a gateway that does not enforce.
		info = authn.Info{Principal: acl.Anonymous, Method: authn.MethodAnonymous}
	}
	return connect.NewResponse(&gatewayv1.WhoAmIResponse{Principal: info.Principal.String(), Method: info.Method.String()}), nil
}

// CreateUser passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) CreateUser(ctx context.Context, req *connect.Request[gatewayv1.CreateUserRequest]) (*connect.Response[gatewayv1.CreateUserResponse], error) {
	return passThrough[gatewayv1.CreateUserResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.CreateUser)
}

// DeleteUser passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) DeleteUser(ctx context.Context, req *connect.Request[gatewayv1.DeleteUserRequest]) (*connect.Response[gatewayv1.DeleteUserResponse], error) {
	return passThrough[gatewayv1.DeleteUserResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.DeleteUser)
}

// ListUsers passes through to the controller in the
// caller's name; the controller checks describe on the cluster.
func (g *Gateway) ListUsers(ctx context.Context, req *connect.Request[gatewayv1.ListUsersRequest]) (*connect.Response[gatewayv1.ListUsersResponse], error) {
	return passThrough[gatewayv1.ListUsersResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.ListUsers)
}

// CreateAcls passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) CreateAcls(ctx context.Context, req *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error) {
	return passThrough[gatewayv1.CreateAclsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.CreateAcls)
}

// DeleteAcls passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) DeleteAcls(ctx context.Context, req *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error) {
	return passThrough[gatewayv1.DeleteAclsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.DeleteAcls)
}

// DescribeAcls passes through to the controller in the
// caller's name; the controller checks describe on the cluster.
func (g *Gateway) DescribeAcls(ctx context.Context, req *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error) {
	return passThrough[gatewayv1.DescribeAclsResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.DescribeAcls)
}

// SetQuota passes through to the controller in the
// caller's name; the controller checks alter on the cluster.
func (g *Gateway) SetQuota(ctx context.Context, req *connect.Request[gatewayv1.SetQuotaRequest]) (*connect.Response[gatewayv1.SetQuotaResponse], error) {
	return passThrough[gatewayv1.SetQuotaResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.SetQuota)
}

// ListQuotas passes through to the controller in the
// caller's name; the controller checks describe on the cluster.
func (g *Gateway) ListQuotas(ctx context.Context, req *connect.Request[gatewayv1.ListQuotasRequest]) (*connect.Response[gatewayv1.ListQuotasResponse], error) {
	return passThrough[gatewayv1.ListQuotasResponse](ctx, g, req.Msg, controllerv1connect.ControllerServiceClient.ListQuotas)
}
