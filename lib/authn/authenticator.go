// Package authn tells a service who is calling: it turns each HTTP
// request into an [acl.Principal], or refuses it with Connect's
// unauthenticated code. It is built on connectrpc.com/authn's middleware,
// so a request is refused before its body is read or decoded.
//
// A request's principal comes from the first of these it carries:
//
//  1. a verified TLS client certificate, mapped to a principal by
//     [Config.CertPrincipal] (User:<CN> for users, Service:<role>/<id>
//     for Strata's own services; the mapping belongs to the TLS
//     package). Only a chain the server verified counts: a certificate
//     the client sent but the server did not verify is ignored;
//  2. a bearer token in "Authorization: Bearer ...": a Strata token
//     (strata_…, lib/token) is looked up in the current [token.Users]
//     and gives User:<name>; any other bearer token is checked as an
//     OIDC JWT when [Config.OIDC] is set, and gives User:<claim>;
//  3. nothing: User:ANONYMOUS when [Config.AllowAnonymous], else refused.
//
// Credentials that are present but wrong are refused even when anonymous
// requests are allowed: a mistyped token must not quietly become
// anonymous. Only a certificate can carry a Service principal.
//
// A refusal is a Connect error with code unauthenticated and an
// ErrorDetail (lib/apierr), whose message is one line that starts with
// "unauthenticated:" and never contains the credential.
//
// A Strata service that serves users (the gateway, a Kafka listener) may
// name, in [ForwardHeader], the principal it calls for; the request is
// then that principal's, with [MethodForwarded] (forward.go).
//
// Handlers read the principal with [PrincipalFrom] or [FromContext].
package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	connectauthn "connectrpc.com/authn"
	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/token"
)

// Config says which credentials an Authenticator accepts. The zero value
// accepts only Strata tokens, and of those none until SetUsers.
type Config struct {
	// CertPrincipal maps the leaf of a verified client certificate chain
	// to a principal's text ("User:alice", "Service:storage/3"), or
	// returns false when the certificate names none (then the request's
	// other credentials count). Nil: certificates are not consulted.
	CertPrincipal func(*x509.Certificate) (string, bool)
	// Users are the token users at start; replace them with SetUsers.
	// Nil: no token is accepted until SetUsers.
	Users *token.Users
	// OIDC, when set, accepts bearer JWTs from one OpenID Connect
	// issuer. Nil: only Strata tokens are accepted as bearer tokens.
	OIDC *OIDCConfig
	// AllowAnonymous lets requests without credentials through as
	// User:ANONYMOUS (the plain, local cluster of make run). Default
	// false: they are refused.
	AllowAnonymous bool
	// Reserved maps user names only a certificate may carry (the super
	// users', the service roles') to what owns each, for the line a
	// refusal shows: "a super user (--super-users)". A token user or an
	// unprefixed OIDC principal with one of them, in any case, is
	// refused (reserved.go). ANONYMOUS is always reserved. Default none.
	Reserved map[string]string
	// OnRefused, when set, is told of every HTTP request Wrap refuses,
	// with the refusal (an *Error), before the answer is written: the
	// audit log's hook. Nil: nobody is told.
	OnRefused func(ctx context.Context, r *http.Request, err error)
	// MayForward reports whether an authenticated caller may send a
	// request for another principal (ForwardHeader, forward.go): the
	// doors' service identities. Nil: nobody may.
	MayForward func(acl.Principal) bool
}

// Authenticator authenticates requests. Safe for concurrent use; the
// token users are swapped atomically by SetUsers.
type Authenticator struct {
	certPrincipal func(*x509.Certificate) (string, bool)
	users         atomic.Pointer[token.Users]
	oidc          *oidcVerifier // nil without OIDC
	anonymous     bool
	reserved      reservedNames
	scramSecret   atomic.Pointer[[]byte]                      // the mock SCRAM secret (scram.go); never nil
	onRefused     func(context.Context, *http.Request, error) // nil: none
	mayForward    func(acl.Principal) bool                    // nil: nobody
}

// New returns an Authenticator for cfg. With cfg.OIDC and no JWKSURL it
// fetches the issuer's discovery document, bounded by ctx, and fails
// when the issuer cannot be reached or does not name itself as
// configured. The key set is fetched later, within the request that
// needs it (AuthenticateBearer's ctx).
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	a := &Authenticator{certPrincipal: cfg.CertPrincipal, anonymous: cfg.AllowAnonymous, reserved: newReservedNames(cfg.Reserved), onRefused: cfg.OnRefused, mayForward: cfg.MayForward}
	a.users.Store(cfg.Users)
	secret, err := randomSCRAMSecret()
	if err != nil {
		return nil, err
	}
	a.scramSecret.Store(secret)
	if cfg.OIDC != nil {
		v, err := newOIDCVerifier(ctx, *cfg.OIDC)
		if err != nil {
			return nil, err
		}
		a.oidc = v
	}
	return a, nil
}

// SetUsers replaces the token users: from the next request on, only
// tokens in u are accepted. Nil accepts none.
func (a *Authenticator) SetUsers(u *token.Users) { a.users.Store(u) }

// Users returns the token users in force.
func (a *Authenticator) Users() *token.Users { return a.users.Load() }

// ErrUnauthenticated is matched by every error Authenticate returns.
var ErrUnauthenticated = errors.New("unauthenticated")

// Error is a refused request: Message is the one line the caller sees.
type Error struct {
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is reports whether target is ErrUnauthenticated.
func (e *Error) Is(target error) bool { return target == ErrUnauthenticated }

func refuse(format string, args ...any) (Info, error) {
	return Info{}, &Error{Message: "unauthenticated: " + fmt.Sprintf(format, args...)}
}

// Authenticate returns who sent r, following the order in the package
// documentation, or an *Error. ctx bounds how long it waits for the
// OIDC key set when a JWT names a key id not seen yet.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (Info, error) {
	if info, ok, err := a.AuthenticateTLS(r.TLS); ok || err != nil {
		return info, err
	}
	if auth := r.Header.Values("Authorization"); len(auth) > 0 {
		if len(auth) > 1 {
			return refuse("more than one Authorization header")
		}
		bearer, ok := connectauthn.BearerToken(r)
		if !ok && strings.EqualFold(strings.TrimSpace(auth[0]), "Bearer") {
			return refuse("empty bearer token")
		}
		if !ok {
			return refuse("the Authorization header is not a bearer token (Authorization: Bearer TOKEN)")
		}
		return a.AuthenticateBearer(ctx, bearer)
	}
	if a.anonymous {
		return Info{Principal: acl.Anonymous, Method: MethodAnonymous}, nil
	}
	return refuse("no credentials: send a bearer token (STRATA_TOKEN) or a client certificate")
}

// AuthenticateTLS returns the principal of a connection's verified client
// certificate: ok false when state is nil, carries no verified chain, or
// its certificate names no principal (the connection's other credentials
// then count); an *Error when it names an invalid one. For listeners
// other than HTTP (the Kafka listener).
func (a *Authenticator) AuthenticateTLS(state *tls.ConnectionState) (Info, bool, error) {
	if a.certPrincipal == nil || state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return Info{}, false, nil
	}
	text, ok := a.certPrincipal(state.VerifiedChains[0][0])
	if !ok {
		return Info{}, false, nil
	}
	p, err := acl.ParsePrincipal(text)
	if err != nil || p.IsWildcard() || p == acl.Anonymous {
		info, err := refuse("the client certificate does not name a valid principal")
		return info, true, err
	}
	return Info{Principal: p, Method: MethodCertificate}, true, nil
}

// AuthenticateBearer returns who a bearer credential names: a Strata
// token (strata_...) gives its user, anything else is checked as an OIDC
// JWT when OIDC is configured. For SASL PLAIN and OAUTHBEARER on the
// Kafka listener as for Authorization headers.
func (a *Authenticator) AuthenticateBearer(ctx context.Context, bearer string) (Info, error) {
	bearer = strings.TrimSpace(bearer)
	switch {
	case bearer == "":
		return refuse("empty bearer token")
	case token.LooksLike(bearer):
		return a.checkToken(bearer)
	case a.oidc != nil:
		p, err := a.oidc.verify(ctx, bearer)
		if err != nil {
			return Info{}, err
		}
		if err := a.checkOIDCName(p.Name); err != nil {
			return Info{}, err
		}
		return Info{Principal: p, Method: MethodOIDC}, nil
	default:
		return refuse("the bearer token is not a Strata token (strata_...), and this cluster accepts no OIDC tokens")
	}
}

// AllowsAnonymous reports whether requests without credentials pass as
// User:ANONYMOUS.
func (a *Authenticator) AllowsAnonymous() bool { return a.anonymous }

func (a *Authenticator) checkToken(text string) (Info, error) {
	t, err := token.Parse(text)
	if err != nil {
		return refuse("malformed Strata token")
	}
	name, ok := a.users.Load().Authenticate(t)
	if !ok {
		return refuse("unknown or revoked token")
	}
	if err := a.CheckTokenUserName(name); err != nil {
		// A user stored before its name was reserved (a super user added
		// later, an older controller): its token must not pass for the
		// certificate principal or the OIDC user.
		return refuse("the token's %s", err)
	}
	return Info{Principal: acl.User(name), Method: MethodToken}, nil
}

// authFunc is Authenticate as connectrpc.com/authn wants it: a refusal
// becomes a Connect error (unauthenticated, an ErrorDetail, and the
// WWW-Authenticate header RFC 6750 asks for).
func (a *Authenticator) authFunc(ctx context.Context, r *http.Request) (any, error) {
	info, err := a.Authenticate(ctx, r)
	if err == nil {
		info, _, err = a.forwarded(info, r)
	}
	if err != nil {
		if a.onRefused != nil {
			a.onRefused(ctx, r, err)
		}
		ce := apierr.New(connect.CodeUnauthenticated, commonv1.Reason_REASON_UNSPECIFIED, "%s", err.Error())
		ce.Meta().Set("WWW-Authenticate", `Bearer realm="strata"`)
		return nil, ce
	}
	return info, nil
}

// Wrap returns h behind authentication: a refused request is answered
// with the Connect error in the protocol it used (Connect, gRPC,
// gRPC-Web; plain HTTP gets Connect's JSON error and status 401), and an
// accepted one reaches h with its Info in the context. opts must be the
// handler options h's Connect handlers use, so errors are written the
// same way. Wrap it inside any CORS handler, so preflight requests (which
// carry no credentials) are answered before it.
func (a *Authenticator) Wrap(h http.Handler, opts ...connect.HandlerOption) http.Handler {
	return connectauthn.NewMiddleware(a.authFunc, opts...).Wrap(h)
}
