package server

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/guard"
)

// The security RPCs: users, ACLs and quotas (metastore/security.go). Each
// needs alter (changes) or describe (listings) on the cluster. A change
// reaches this controller's guard through its etcd watch
// (Controller.watchSecurity) and every other service through the
// metadata stream.

// auditChange writes the audit line of a change the caller made: kind,
// op ("create", "delete", "set"), the resource changed and what it was
// set to.
func (h *Handler) auditChange(ctx context.Context, kind audit.Kind, op, resource, detail string) {
	caller := guard.Principal(ctx)
	who := ""
	if !caller.IsZero() {
		who = caller.String()
	}
	// A change made through a door (the gateway, a Kafka listener) is
	// the forwarded caller's; the line names the door too.
	source := ""
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		source = ci.Peer().Addr
	}
	if info, ok := guard.Info(ctx); ok && !info.Via.IsZero() {
		detail = strings.TrimSpace(detail + " via " + info.Via.String())
	}
	h.c.guard.Audit().Record(ctx, audit.Event{Kind: kind, Principal: who, Source: source, Operation: op, Resource: resource,
		Outcome: audit.OutcomeSuccess, Reason: detail})
}

// auditACLs writes one audit line per ACL binding created or deleted.
func (h *Handler) auditACLs(ctx context.Context, op string, bs []*commonv1.AclBinding) {
	for _, b := range bs {
		text := b.GetPrincipal()
		if ab, err := guard.BindingFromProto(b); err == nil {
			text = ab.String()
		}
		h.auditChange(ctx, audit.ACLChange, op, "acl "+text, "")
	}
}

// authorizeCluster allows the request to do op to the cluster.
func (h *Handler) authorizeCluster(ctx context.Context, op acl.Operation) error {
	return h.c.guard.Authorize(ctx, op, acl.Cluster, acl.ClusterName)
}

func (h *Handler) CreateUser(ctx context.Context, req *connect.Request[controllerv1.CreateUserRequest]) (*connect.Response[controllerv1.CreateUserResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	// Names a certificate or OIDC owns are refused before the store
	// sees them: a user allowed to alter the cluster must not become a
	// super user by naming a token user after one.
	if err := h.c.guard.CheckNewUserName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	cred, tok, err := h.c.store.CreateUser(ctx, req.Msg.GetName())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "user created", slog.String("user", cred.GetName()))
	h.auditChange(ctx, audit.UserChange, "create", "user "+cred.GetName(), "")
	return connect.NewResponse(&controllerv1.CreateUserResponse{
		User:  &commonv1.UserCredential{Name: cred.GetName(), CreatedMs: cred.GetCreatedMs()},
		Token: tok.Reveal(),
	}), nil
}

func (h *Handler) DeleteUser(ctx context.Context, req *connect.Request[controllerv1.DeleteUserRequest]) (*connect.Response[controllerv1.DeleteUserResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	if err := h.c.store.DeleteUser(ctx, req.Msg.GetName()); err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "user deleted", slog.String("user", req.Msg.GetName()))
	h.auditChange(ctx, audit.UserChange, "delete", "user "+req.Msg.GetName(), "")
	return connect.NewResponse(&controllerv1.DeleteUserResponse{}), nil
}

func (h *Handler) ListUsers(ctx context.Context, _ *connect.Request[controllerv1.ListUsersRequest]) (*connect.Response[controllerv1.ListUsersResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	users, err := h.c.store.ListUsers(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.ListUsersResponse{Users: users}), nil
}

func (h *Handler) CreateAcls(ctx context.Context, req *connect.Request[controllerv1.CreateAclsRequest]) (*connect.Response[controllerv1.CreateAclsResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	n, err := h.c.store.CreateAcls(ctx, req.Msg.GetAcls())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	if n > 0 {
		h.c.log.InfoContext(ctx, "ACLs created", slog.Int("acls", n))
	}
	h.auditACLs(ctx, "create", req.Msg.GetAcls())
	return connect.NewResponse(&controllerv1.CreateAclsResponse{}), nil
}

func (h *Handler) DeleteAcls(ctx context.Context, req *connect.Request[controllerv1.DeleteAclsRequest]) (*connect.Response[controllerv1.DeleteAclsResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	deleted, err := h.c.store.DeleteAcls(ctx, req.Msg.GetFilter())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	if len(deleted) > 0 {
		h.c.log.InfoContext(ctx, "ACLs deleted", slog.Int("acls", len(deleted)))
	}
	h.auditACLs(ctx, "delete", deleted)
	return connect.NewResponse(&controllerv1.DeleteAclsResponse{Deleted: deleted}), nil
}

func (h *Handler) DescribeAcls(ctx context.Context, req *connect.Request[controllerv1.DescribeAclsRequest]) (*connect.Response[controllerv1.DescribeAclsResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	bs, err := h.c.store.DescribeAcls(ctx, req.Msg.GetFilter())
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.DescribeAclsResponse{Acls: bs}), nil
}

func (h *Handler) SetQuota(ctx context.Context, req *connect.Request[controllerv1.SetQuotaRequest]) (*connect.Response[controllerv1.SetQuotaResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	q := req.Msg.GetQuota()
	if err := h.c.store.SetQuota(ctx, q); err != nil {
		return nil, h.toConnect(ctx, err)
	}
	h.c.log.InfoContext(ctx, "quota set", slog.String("principal", q.GetPrincipal()),
		slog.Int64("produce_bytes_per_second", q.GetProduceBytesPerSecond()), slog.Int64("fetch_bytes_per_second", q.GetFetchBytesPerSecond()),
		slog.Float64("request_percentage", q.GetRequestPercentage()))
	reason := fmt.Sprintf("produce_bytes_per_second=%d fetch_bytes_per_second=%d", q.GetProduceBytesPerSecond(), q.GetFetchBytesPerSecond())
	if pct := q.GetRequestPercentage(); pct != 0 {
		reason += " request_percentage=" + strconv.FormatFloat(pct, 'g', -1, 64)
	}
	h.auditChange(ctx, audit.QuotaChange, "set", "quota "+q.GetPrincipal(), reason)
	return connect.NewResponse(&controllerv1.SetQuotaResponse{}), nil
}

func (h *Handler) ListQuotas(ctx context.Context, _ *connect.Request[controllerv1.ListQuotasRequest]) (*connect.Response[controllerv1.ListQuotasResponse], error) {
	if err := h.authorizeCluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	qs, err := h.c.store.ListQuotas(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, err)
	}
	return connect.NewResponse(&controllerv1.ListQuotasResponse{Quotas: qs}), nil
}
