package authn

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testIssuer is an OpenID Connect issuer on loopback: a discovery
// document naming its own URL as issuer, and a JWKS with one RSA key.
type testIssuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T) *testIssuer {
	t.Helper()
	iss := &testIssuer{key: newRSAKey(t), kid: "key-1"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                iss.srv.URL,
			"jwks_uri":                              iss.srv.URL + "/jwks",
			"authorization_endpoint":                iss.srv.URL + "/authorize",
			"token_endpoint":                        iss.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &iss.key.PublicKey, KeyID: iss.kid, Algorithm: string(jose.RS256), Use: "sig"},
		}})
	})
	iss.srv = httptest.NewServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

func newRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// sign returns a JWT with claims signed by key under kid.
func sign(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestOIDC(t *testing.T) {
	iss := newIssuer(t)
	wrongKey := newRSAKey(t)
	now := time.Now()
	claims := func(change func(map[string]any)) map[string]any {
		c := map[string]any{
			"iss": iss.srv.URL, "aud": "strata", "sub": "alice",
			"email": "alice@example.com", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
		}
		if change != nil {
			change(c)
		}
		return c
	}
	for _, mode := range []struct {
		name string
		cfg  OIDCConfig
	}{
		{"discovery", OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata"}},
		{"jwks", OIDCConfig{IssuerURL: iss.srv.URL, JWKSURL: iss.srv.URL + "/jwks", Audience: "strata"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := mode.cfg
			a, err := New(context.Background(), Config{OIDC: &cfg})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, a)
			for _, tc := range []struct {
				name    string
				raw     string
				want    string
				refused string
			}{
				{"valid", sign(t, iss.key, iss.kid, claims(nil)), "User:alice oidc", ""},
				{"audience among several", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["aud"] = []string{"other", "strata"} })), "User:alice oidc", ""},
				{"expired", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), "", "expired at"},
				{"no expiry", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { delete(c, "exp") })), "", "no expiry"},
				{"wrong audience", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["aud"] = "someone-else" })), "", "audience"},
				{"wrong issuer", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["iss"] = "https://evil.example" })), "", "different provider"},
				{"wrong key, same key id", sign(t, wrongKey, iss.kid, claims(nil)), "", "OIDC token refused"},
				{"wrong key, unknown key id", sign(t, wrongKey, "key-2", claims(nil)), "", "OIDC token refused"},
				{"not yet valid", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })), "", "nbf"},
				{"no subject", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { delete(c, "sub") })), "", `no "sub" claim`},
				{"subject with spaces", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["sub"] = "alice smith" })), "", "not a valid user name"},
				{"anonymous subject", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["sub"] = "ANONYMOUS" })), "", "without credentials"},
				{"wildcard subject", sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["sub"] = "*" })), "", "not a valid user name"},
				{"garbage", "garbage-header.garbage-claims.garbage-signature", "", "OIDC token refused"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, err := call(t, srv.Client(), srv.URL, "Bearer "+tc.raw)
					if tc.refused != "" {
						parts := strings.Split(tc.raw, ".")
						wantRefused(t, err, tc.refused, tc.raw, parts[len(parts)-1])
						return
					}
					if err != nil || got != tc.want {
						t.Fatalf("got %q, %v; want %q", got, err, tc.want)
					}
				})
			}
		})
	}

	t.Run("principal claim", func(t *testing.T) {
		a, err := New(context.Background(), Config{OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata", PrincipalClaim: "email"}})
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, a)
		verified := func(c map[string]any) { c["email_verified"] = true }
		got, err := call(t, srv.Client(), srv.URL, "Bearer "+sign(t, iss.key, iss.kid, claims(verified)))
		if err != nil || got != "User:alice@example.com oidc" {
			t.Fatalf("got %q, %v", got, err)
		}
		_, err = call(t, srv.Client(), srv.URL, "Bearer "+sign(t, iss.key, iss.kid, claims(func(c map[string]any) { c["email"] = 42 })))
		wantRefused(t, err, `no "email" claim`)
	})

	t.Run("tokens beside OIDC", func(t *testing.T) {
		users, toks := newUsers(t, "bob")
		a, err := New(context.Background(), Config{Users: users, OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata"}})
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, a)
		if got, err := call(t, srv.Client(), srv.URL, "Bearer "+toks["bob"].Reveal()); err != nil || got != "User:bob token" {
			t.Fatalf("token: %q, %v", got, err)
		}
		if got, err := call(t, srv.Client(), srv.URL, "Bearer "+sign(t, iss.key, iss.kid, claims(nil))); err != nil || got != "User:alice oidc" {
			t.Fatalf("JWT: %q, %v", got, err)
		}
	})
}

// TestAuthenticateBearer: the non-HTTP entry (SASL PLAIN and OAUTHBEARER
// on the Kafka listener) accepts what an Authorization header does, with
// the same refusals.
func TestAuthenticateBearer(t *testing.T) {
	iss := newIssuer(t)
	users, toks := newUsers(t, "bob")
	a, err := New(context.Background(), Config{Users: users, OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if info, err := a.AuthenticateBearer(ctx, toks["bob"].Reveal()); err != nil || info.Principal.String() != "User:bob" || info.Method != MethodToken {
		t.Fatalf("token: %+v %v", info, err)
	}
	jwtRaw := sign(t, iss.key, iss.kid, map[string]any{"iss": iss.srv.URL, "aud": "strata", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	if info, err := a.AuthenticateBearer(ctx, jwtRaw); err != nil || info.Principal.String() != "User:alice" || info.Method != MethodOIDC {
		t.Fatalf("JWT: %+v %v", info, err)
	}
	for _, bad := range []string{"", "strata_" + strings.Repeat("A", 43), "not-a-jwt"} {
		if _, err := a.AuthenticateBearer(ctx, bad); !errors.Is(err, ErrUnauthenticated) && !strings.Contains(fmt.Sprint(err), "unauthenticated") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, ok, err := a.AuthenticateTLS(nil); ok || err != nil {
		t.Fatalf("no TLS: %v %v", ok, err)
	}
}

func TestOIDCConfigRefused(t *testing.T) {
	iss := newIssuer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		cfg  OIDCConfig
		want string
	}{
		{"no audience", OIDCConfig{IssuerURL: iss.srv.URL}, "needs an audience"},
		{"no issuer", OIDCConfig{Audience: "strata"}, "not an http(s) URL"},
		{"bad JWKS URL", OIDCConfig{IssuerURL: iss.srv.URL, JWKSURL: "file:///etc/keys", Audience: "strata"}, "not an http(s) URL"},
		{"issuer differs from discovery", OIDCConfig{IssuerURL: iss.srv.URL + "/", Audience: "strata"}, "discovery"},
		{"no discovery document", OIDCConfig{IssuerURL: iss.srv.URL + "/nothing", Audience: "strata"}, "discovery"},
	} {
		if _, err := New(ctx, Config{OIDC: &tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want error with %q", tc.name, err, tc.want)
		}
	}
}

func TestScrub(t *testing.T) {
	raw := "aaaaaaaaaa.bbbbbbbbbb.cc"
	got := scrub("bad aaaaaaaaaa and bbbbbbbbbb\nand "+raw+" "+strings.Repeat("x", 400), raw)
	if strings.Contains(got, "aaaaaaaaaa") || strings.Contains(got, "bbbbbbbbbb") || strings.Contains(got, "\n") || len(got) > 310 {
		t.Fatalf("scrub = %q", got)
	}
}
