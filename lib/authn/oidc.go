package authn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/strata-mq/strata/lib/acl"
)

// DefaultPrincipalClaim is the claim an OIDC token's principal is read
// from unless OIDCConfig.PrincipalClaim says otherwise.
const DefaultPrincipalClaim = "sub"

// defaultOIDCTimeout bounds each discovery or key-set fetch when
// OIDCConfig.HTTPClient is nil.
const defaultOIDCTimeout = 10 * time.Second

// OIDCConfig accepts JWTs from one OpenID Connect issuer, checked with
// github.com/coreos/go-oidc: the signature against the issuer's JSON Web
// Key Set (fetched when a token names a key id not seen yet, so key
// rotation needs no restart), the issuer (iss), the audience (aud) and
// the expiry (exp, and nbf with five minutes of leeway).
type OIDCConfig struct {
	// IssuerURL is the issuer, exactly as tokens carry it in iss.
	// Required. Without JWKSURL the keys are found by discovery: the
	// document at IssuerURL/.well-known/openid-configuration must name
	// the same issuer.
	IssuerURL string
	// JWKSURL, when set, is where the issuer's keys are, and discovery
	// is skipped (for issuers without it, or to avoid the round trip).
	JWKSURL string
	// Audience is the value tokens must carry in aud: the client id the
	// issuer knows Strata by. Required: without it a token the issuer
	// minted for any other application would be accepted.
	Audience string
	// PrincipalClaim names the string claim whose value is the user
	// name: the principal is User:<value>, which must pass
	// acl.CheckName. Default "sub"; "email" and "preferred_username" are
	// common choices.
	PrincipalClaim string
	// SigningAlgorithms are the JWS algorithms accepted ("RS256",
	// "ES256", ...). Default: those discovery advertises, or RS256 alone
	// with JWKSURL (go-oidc's defaults).
	SigningAlgorithms []string
	// HTTPClient fetches the discovery document and the keys. Default: a
	// client with a 10s timeout.
	HTTPClient *http.Client
}

type oidcVerifier struct {
	verifier *oidc.IDTokenVerifier
	claim    string
}

func newOIDCVerifier(ctx context.Context, c OIDCConfig) (*oidcVerifier, error) {
	if err := checkURL("issuer URL", c.IssuerURL); err != nil {
		return nil, err
	}
	if c.JWKSURL != "" {
		if err := checkURL("JWKS URL", c.JWKSURL); err != nil {
			return nil, err
		}
	}
	if c.Audience == "" {
		return nil, errors.New("authn: OIDC needs an audience (the client id tokens are issued for)")
	}
	client := c.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultOIDCTimeout}
	}
	octx := oidc.ClientContext(ctx, client)
	cfg := &oidc.Config{ClientID: c.Audience, SupportedSigningAlgs: c.SigningAlgorithms}
	v := &oidcVerifier{claim: c.PrincipalClaim}
	if v.claim == "" {
		v.claim = DefaultPrincipalClaim
	}
	if c.JWKSURL != "" {
		v.verifier = oidc.NewVerifier(c.IssuerURL, oidc.NewRemoteKeySet(octx, c.JWKSURL), cfg)
		return v, nil
	}
	p, err := oidc.NewProvider(octx, c.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("authn: OIDC discovery at %s: %w", c.IssuerURL, err)
	}
	v.verifier = p.VerifierContext(octx, cfg)
	return v, nil
}

func checkURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("authn: OIDC %s %q is not an http(s) URL", what, s)
	}
	return nil
}

// verify checks raw and returns its principal, or an *Error that does
// not contain raw.
func (v *oidcVerifier) verify(ctx context.Context, raw string) (acl.Principal, error) {
	idt, err := v.verifier.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) && expired.Expiry.IsZero() {
			return acl.Principal{}, &Error{Message: "unauthenticated: the OIDC token has no expiry (exp)"}
		}
		if errors.As(err, &expired) {
			return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token expired at %s", expired.Expiry.UTC().Format(time.RFC3339))}
		}
		return acl.Principal{}, &Error{Message: "unauthenticated: OIDC token refused: " + scrub(err.Error(), raw)}
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return acl.Principal{}, &Error{Message: "unauthenticated: OIDC token claims are not a JSON object"}
	}
	name, ok := claims[v.claim].(string)
	if !ok || name == "" {
		return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token has no %q claim naming its user", v.claim)}
	}
	if err := acl.CheckName(name); err != nil {
		return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token's %q claim is not a valid user name: %v", v.claim, err)}
	}
	if name == acl.Anonymous.Name {
		return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token's %q claim names %s, the principal of requests without credentials", v.claim, acl.Anonymous)}
	}
	return acl.User(name), nil
}

// scrub keeps a verification error to one line without any part of the
// token in it, whatever the library put in its message.
func scrub(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, "[REDACTED]")
	for _, part := range strings.Split(raw, ".") {
		if len(part) >= 8 {
			msg = strings.ReplaceAll(msg, part, "[REDACTED]")
		}
	}
	msg = strings.Join(strings.Fields(msg), " ")
	const maxLen = 300
	if len(msg) > maxLen {
		msg = msg[:maxLen] + "..."
	}
	return msg
}
