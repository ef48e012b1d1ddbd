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
// rotation needs no restart, but at most once per KeyRefetchInterval so
// made-up key ids cannot flood the issuer), the issuer (iss), the
// audience (aud) and
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
	// common choices. With "email", the token must also carry
	// email_verified true: an issuer that lets anyone type an address
	// would otherwise let them name any user.
	PrincipalClaim string
	// PrincipalPrefix, when set, starts every OIDC principal's name
	// (User:<prefix><claim>, e.g. "oidc." gives User:oidc.alice), and no
	// token user's name may start with it: OIDC users and token users
	// then cannot share a name (reserved.go). Default "": the claim is
	// the name, and a claim naming a super user, a service role or a
	// token user is refused instead.
	PrincipalPrefix string
	// SigningAlgorithms are the JWS algorithms accepted ("RS256",
	// "ES256", ...). Default: those discovery advertises, or RS256 alone
	// with JWKSURL (go-oidc's defaults).
	SigningAlgorithms []string
	// HTTPClient fetches the discovery document and the keys. Default: a
	// client with a 10s timeout.
	HTTPClient *http.Client
	// KeyRefetchInterval is the least time between two fetches of the
	// key set, which a JWT no held key verifies triggers (jwks.go); such
	// a JWT is refused without a fetch until it has passed. Default
	// DefaultKeyRefetchInterval (10s).
	KeyRefetchInterval time.Duration
}

type oidcVerifier struct {
	verifier *oidc.IDTokenVerifier
	keys     *keySet
	claim    string
	prefix   string
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
	if c.PrincipalPrefix != "" {
		if err := acl.CheckName(c.PrincipalPrefix); err != nil {
			return nil, fmt.Errorf("authn: OIDC principal prefix %q: %w", c.PrincipalPrefix, err)
		}
	}
	client := c.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultOIDCTimeout}
	}
	octx := oidc.ClientContext(ctx, client)
	cfg := &oidc.Config{ClientID: c.Audience, SupportedSigningAlgs: c.SigningAlgorithms}
	v := &oidcVerifier{claim: c.PrincipalClaim, prefix: c.PrincipalPrefix}
	if v.claim == "" {
		v.claim = DefaultPrincipalClaim
	}
	jwksURL := c.JWKSURL
	if jwksURL == "" {
		p, err := oidc.NewProvider(octx, c.IssuerURL)
		if err != nil {
			return nil, fmt.Errorf("authn: OIDC discovery at %s: %w", c.IssuerURL, err)
		}
		var doc struct {
			JWKSURL    string   `json:"jwks_uri"`
			Algorithms []string `json:"id_token_signing_alg_values_supported"`
		}
		if err := p.Claims(&doc); err != nil || checkURL("JWKS URL", doc.JWKSURL) != nil {
			return nil, fmt.Errorf("authn: OIDC discovery at %s: no http(s) jwks_uri", c.IssuerURL)
		}
		jwksURL = doc.JWKSURL
		if len(cfg.SupportedSigningAlgs) == 0 {
			// As go-oidc's Provider does: the advertised algorithms it
			// can check, else its default (RS256).
			for _, a := range doc.Algorithms {
				if supportedAlgorithms[a] {
					cfg.SupportedSigningAlgs = append(cfg.SupportedSigningAlgs, a)
				}
			}
		}
	}
	v.keys = newKeySet(jwksURL, client, c.KeyRefetchInterval)
	v.verifier = oidc.NewVerifier(c.IssuerURL, v.keys, cfg)
	return v, nil
}

// supportedAlgorithms are the JWS algorithms go-oidc verifies.
var supportedAlgorithms = map[string]bool{
	oidc.RS256: true, oidc.RS384: true, oidc.RS512: true,
	oidc.ES256: true, oidc.ES384: true, oidc.ES512: true,
	oidc.PS256: true, oidc.PS384: true, oidc.PS512: true, oidc.EdDSA: true,
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
	if v.claim == "email" && !emailVerified(claims["email_verified"]) {
		// OpenID Connect Core 1.0, section 5.1: email_verified is true
		// only when the issuer checked the address belongs to the user.
		return acl.Principal{}, &Error{Message: "unauthenticated: the OIDC token's email claim names its user, but email_verified is not true"}
	}
	name = v.prefix + name
	if err := acl.CheckName(name); err != nil {
		return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token's %q claim is not a valid user name: %v", v.claim, err)}
	}
	if name == acl.Anonymous.Name {
		return acl.Principal{}, &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token's %q claim names %s, the principal of requests without credentials", v.claim, acl.Anonymous)}
	}
	return acl.User(name), nil
}

// emailVerified reports whether an email_verified claim says true: the
// JSON boolean of the specification, or the string "true" some issuers
// send (Amazon Cognito).
func emailVerified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
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
