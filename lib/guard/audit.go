package guard

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/authn"
)

// The guard writes the audit lines of the refusals it decides: requests
// whose credentials were refused and requests an ACL or a service-only
// rule refused. Changes to users, ACLs and quotas are written by the
// controller, which makes them, through Audit.

// Audit is the process's audit logger, for the events the guard does not
// see itself (changes, SASL on the Kafka listener). Nil when the process
// writes no audit log; a nil *audit.Logger is safe to call.
func (g *Guard) Audit() *audit.Logger { return g.audit }

// auditDenied writes the line of a request an ACL refused.
func (g *Guard) auditDenied(ctx context.Context, d acl.Decision) {
	principal := ""
	if !d.Principal.IsZero() {
		principal = d.Principal.String()
	}
	g.audit.Record(ctx, audit.Event{Kind: audit.Denied, Principal: principal, Via: via(ctx), Source: peer(ctx), Operation: d.Operation.String(),
		Resource: d.Resource.String(), Outcome: audit.OutcomeDenied, Reason: d.Reason})
}

// via is the service that forwarded the request of ctx, "" when the
// caller sent it itself.
func via(ctx context.Context) string {
	if info, ok := authn.FromContext(ctx); ok && !info.Via.IsZero() {
		return info.Via.String()
	}
	return ""
}

// auditServiceOnly writes the line of a request refused because only
// (another) Strata service may make it.
func (g *Guard) auditServiceOnly(ctx context.Context, p acl.Principal, reason string) {
	principal := ""
	if !p.IsZero() {
		principal = p.String()
	}
	g.audit.Record(ctx, audit.Event{Kind: audit.Denied, Principal: principal, Via: via(ctx), Source: peer(ctx), Operation: "call",
		Resource: procedure(ctx), Outcome: audit.OutcomeDenied, Reason: principal + " " + reason})
}

// auditRefused is the authenticator's OnRefused hook: the line of an
// HTTP request whose credentials were refused. The principal is unknown
// (the credentials did not name one the cluster accepts).
func auditRefused(l *audit.Logger) func(context.Context, *http.Request, error) {
	if l == nil {
		return nil
	}
	return func(ctx context.Context, r *http.Request, err error) {
		l.Record(ctx, audit.Event{Kind: audit.AuthFailure, Source: r.RemoteAddr, Operation: "authenticate",
			Resource: r.URL.Path, Outcome: audit.OutcomeFailure, Reason: strings.TrimPrefix(err.Error(), "unauthenticated: ")})
	}
}

// peer is the client address of the Connect request of ctx, read only
// when a line is written, so that requests pay nothing for it; "" outside
// a Connect handler, where Record takes the context's (WithSource, as the
// Kafka listener sets it per connection).
func peer(ctx context.Context) string {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return ci.Peer().Addr
	}
	return ""
}

// procedure is the RPC the request of ctx calls ("/strata.storage.v1.StorageService/Replicate"),
// or "" outside a Connect handler.
func procedure(ctx context.Context) string {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return ci.Spec().Procedure
	}
	return ""
}
