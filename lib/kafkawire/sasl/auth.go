package sasl

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/token"
)

// SASL mechanisms offered (docs/kafka.md, "Security"), in the order
// SaslHandshake lists them.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

// Auth is the Kafka listener's authentication on a process guarded by g:
// a verified TLS client certificate is the connection's principal, as on
// the Connect listener; SASL PLAIN (the password a Strata token, or an
// OIDC JWT where --oidc-* is set), SCRAM-SHA-256 and SCRAM-SHA-512 (the
// password a Strata token, checked against the SCRAM credentials derived
// from it when it was issued) and OAUTHBEARER (a JWT, or a Strata token)
// authenticate the same users the Connect API knows. With
// --require-auth, a connection that has not authenticated is served
// ApiVersions and the SASL APIs only; without it, it is User:ANONYMOUS.
func Auth(g *guard.Guard) *kafkawire.Auth {
	a := g.Authenticator()
	return &kafkawire.Auth{
		Required: g.Enforcing(),
		Connect: func(ctx context.Context, state *tls.ConnectionState) (context.Context, bool, error) {
			info, ok, err := a.AuthenticateTLS(state)
			if err != nil {
				auditAuthFailure(ctx, g.Audit(), "TLS client certificate", err)
				return nil, false, err
			}
			if ok {
				return authn.NewContext(ctx, info), true, nil
			}
			if a.AllowsAnonymous() {
				return authn.NewContext(ctx, authn.Info{Principal: acl.Anonymous, Method: authn.MethodAnonymous}), false, nil
			}
			return ctx, false, nil
		},
		Mechanisms: auditMechanisms(g.Audit(), []kafkawire.Mechanism{
			{Name: MechanismPlain, Authenticate: func(ctx context.Context, msg []byte) (context.Context, error) {
				return authenticatePlain(ctx, a, msg)
			}},
			scramMechanism(a, token.SCRAMSHA256),
			scramMechanism(a, token.SCRAMSHA512),
			{Name: MechanismOAuthBearer, Authenticate: func(ctx context.Context, msg []byte) (context.Context, error) {
				return authenticateOAuthBearer(ctx, a, msg)
			}},
		}),
	}
}

// ParsePlain splits a SASL PLAIN message (RFC 4616):
// authzid NUL authcid NUL password.
func ParsePlain(msg []byte) (authzid, user, password string, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return "", "", "", errors.New("malformed PLAIN message (want authzid NUL username NUL password)")
	}
	return string(parts[0]), string(parts[1]), string(parts[2]), nil
}

// authenticatePlain checks a PLAIN message: the password is a bearer
// credential (a Strata token; a JWT with OIDC), and the username must be
// the name of the principal it authenticates (alice for User:alice), so a
// client's configuration says who it is. An authorization id, when given,
// must be the same name: acting as someone else is not offered.
func authenticatePlain(ctx context.Context, a *authn.Authenticator, msg []byte) (context.Context, error) {
	authzid, user, password, err := ParsePlain(msg)
	if err != nil {
		return nil, err
	}
	if password == "" {
		return nil, errors.New("empty password: the password is a Strata token (strata user create)")
	}
	info, err := a.AuthenticateBearer(ctx, password)
	if err != nil {
		return nil, reason(err)
	}
	if user != info.Principal.Name {
		return nil, fmt.Errorf("the username %q is not the token's user (want %q)", user, info.Principal.Name)
	}
	if authzid != "" && authzid != user {
		return nil, fmt.Errorf("the authorization id %q differs from the username; acting as another user is not offered", authzid)
	}
	return authn.NewContext(ctx, info), nil
}

// ParseOAuthBearer returns the bearer token of a SASL OAUTHBEARER
// client's first message (RFC 7628): a GS2 header, then key=value pairs
// separated by ^A, among them auth=Bearer <token>.
func ParseOAuthBearer(msg []byte) (string, error) {
	parts := strings.Split(string(msg), "\x01")
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "n,") && !strings.HasPrefix(parts[0], "y,") {
		return "", errors.New("malformed OAUTHBEARER message (want a GS2 header and auth=Bearer <token>)")
	}
	for _, kv := range parts[1:] {
		if v, ok := strings.CutPrefix(kv, "auth="); ok {
			scheme, tok, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
				return "", errors.New("malformed OAUTHBEARER message (auth is not Bearer <token>)")
			}
			return strings.TrimSpace(tok), nil
		}
	}
	return "", errors.New("malformed OAUTHBEARER message (no auth=Bearer <token>)")
}

// authenticateOAuthBearer checks an OAUTHBEARER message's token as the
// Connect listener checks an Authorization: Bearer header.
func authenticateOAuthBearer(ctx context.Context, a *authn.Authenticator, msg []byte) (context.Context, error) {
	tok, err := ParseOAuthBearer(msg)
	if err != nil {
		return nil, err
	}
	info, err := a.AuthenticateBearer(ctx, tok)
	if err != nil {
		return nil, reason(err)
	}
	return authn.NewContext(ctx, info), nil
}

// reason is an authentication refusal without its "unauthenticated: "
// prefix, for SaslAuthenticate's error message.
func reason(err error) error {
	var e *authn.Error
	if errors.As(err, &e) {
		return errors.New(strings.TrimPrefix(e.Message, "unauthenticated: "))
	}
	return err
}
