package server

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/metaview"
)

// The gateway is a door (lib/guard's forward.go). It checks its caller
// itself only for what it answers from its own cache: Metadata,
// FindCoordinator, WatchCluster, and producer ids for any authenticated
// caller. Every other RPC is Forwarded in its rules table (rules.go): the
// handler runs in the caller's name, and the controller, the coordinator
// or the storage node it calls checks the caller's ACLs, filters its
// lists and charges its quotas, as for a direct call
// (docs/design/gateway.md#security).

// applySecurity is the metadata watch's Notify: it hands the guard the
// users, ACLs and quotas of v when they changed. A snapshot or a delta
// that carries security state replaces the pointer; a delta without it
// keeps the previous one, so most messages cost a pointer comparison.
// It runs on the watch goroutine only.
func (g *Gateway) applySecurity(v *metaview.View) {
	if v.Security == g.security {
		return
	}
	g.security = v.Security
	g.guard.Apply(v.Security)
}

// authenticated refuses a request that carries no principal when the
// guard enforces. The guard's middleware already refuses those before
// any handler runs; this keeps the handlers that grant something to any
// caller (InitProducerId, WhoAmI) closed if the handler is ever mounted
// without it.
func (g *Gateway) authenticated(ctx context.Context) error {
	if !g.guard.Enforcing() || !guard.Principal(ctx).IsZero() {
		return nil
	}
	return apierr.New(connect.CodeUnauthenticated, commonv1.Reason_REASON_UNSPECIFIED,
		"unauthenticated: no credentials: send a bearer token (STRATA_TOKEN) or a client certificate")
}

// authorizeTopics allows op on every named topic, or returns the refusal
// of the first that is not allowed.
func (g *Gateway) authorizeTopics(ctx context.Context, op acl.Operation, names ...string) error {
	for _, name := range names {
		if err := g.guard.Authorize(ctx, op, acl.Topic, name); err != nil {
			return err
		}
	}
	return nil
}

// visible drops the items whose resource (named by name) the caller may
// not describe. It filters s in place and returns it.
func visible[T any](ctx context.Context, g *Gateway, rt acl.ResourceType, s []T, name func(T) string) []T {
	if !g.guard.Enforcing() {
		return s
	}
	return slices.DeleteFunc(s, func(v T) bool { return !g.guard.Allowed(ctx, acl.Describe, rt, name(v)) })
}
