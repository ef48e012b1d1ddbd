package guard

import (
	"context"
	"net/http"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Doors and owners. The gateway and the Kafka listeners are doors: they
// take a user's request and call the services that own the data (the
// controller for topics, ACLs, users and quotas; a coordinator for groups
// and offsets; a storage node for a partition's records). A door checks
// only what it answers itself (metadata from its cache, FindCoordinator,
// producer ids); for the rest it forwards the user's principal on its
// call (authn.ForwardHeader), and the owner checks its ACLs and charges
// its quotas as if the user had called it directly. So each rule is
// written once, in the owner's handlers and rules table, and quotas meet
// the real principal where the bytes move.
//
// A door marks a request's context with Forward; the process's HTTP
// client (ForwardingTransport, which lib/serve installs when the process
// has TLS) then sends the header on every call made with that context.
// The owner accepts the header only from a door's service identity
// (isDoor), proven by its client certificate. Without TLS no process has
// a service identity, so nothing is forwarded: every caller is
// User:ANONYMOUS there.

// isDoor reports whether p may forward a request for another principal:
// the service identities of the gateway, the storage nodes and the
// coordinators, which run the doors.
func isDoor(p acl.Principal) bool {
	id, err := serviceIdentity(p)
	if !p.IsService() || err != nil {
		return false
	}
	switch id.Role {
	case tlsconfig.RoleGateway, tlsconfig.RoleStorage, tlsconfig.RoleCoordinator:
		return true
	}
	return false
}

type forwardKey struct{}

// Forward returns ctx marked so that the calls to other Strata services
// made with it carry the principal of ctx's request. A request of a
// service, of User:ANONYMOUS or without a principal is not forwarded:
// those calls go as the door's own identity.
func Forward(ctx context.Context) context.Context {
	p := Principal(ctx)
	if p.IsZero() || p.IsService() || p == acl.Anonymous {
		return ctx
	}
	return context.WithValue(ctx, forwardKey{}, p)
}

// AsSelf returns ctx without Forward's mark: for a call a door makes as
// itself while it serves a user (a block of producer ids from the
// controller, which only services may ask for).
func AsSelf(ctx context.Context) context.Context {
	if _, ok := ctx.Value(forwardKey{}).(acl.Principal); !ok {
		return ctx
	}
	return context.WithValue(ctx, forwardKey{}, nil)
}

// ForwardedPrincipal is the principal Forward marked ctx with, false when
// none.
func ForwardedPrincipal(ctx context.Context) (acl.Principal, bool) {
	p, ok := ctx.Value(forwardKey{}).(acl.Principal)
	return p, ok
}

// ForwardingTransport returns rt sending authn.ForwardHeader with every
// request whose context Forward marked.
func ForwardingTransport(rt http.RoundTripper) http.RoundTripper {
	return forwardingTransport{rt}
}

type forwardingTransport struct{ rt http.RoundTripper }

func (t forwardingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	p, ok := ForwardedPrincipal(r.Context())
	if !ok {
		return t.rt.RoundTrip(r)
	}
	// A RoundTripper must not change the request it is given.
	r = r.Clone(r.Context())
	r.Header.Set(authn.ForwardHeader, p.String())
	return t.rt.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport
// underneath, for http.Client.CloseIdleConnections.
func (t forwardingTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
