package authn

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// TestKeyRefetchLimited: JWTs signed under key ids the issuer never
// published, or with a wrong key under a published id, make the key set
// be fetched at most once per interval, however many arrive (go-oidc's
// RemoteKeySet fetched once per token); valid tokens keep working
// meanwhile; and once the interval has passed, a key the issuer rotated
// in is fetched and accepted.
func TestKeyRefetchLimited(t *testing.T) {
	iss := newIssuer(t)
	var fetches atomic.Int64
	var mu sync.Mutex
	published := []jose.JSONWebKey{{Key: &iss.key.PublicKey, KeyID: iss.kid, Algorithm: string(jose.RS256), Use: "sig"}}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		writeJSON(w, jose.JSONWebKeySet{Keys: published})
	}))
	t.Cleanup(jwks.Close)

	a, err := New(context.Background(), Config{OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, JWKSURL: jwks.URL, Audience: "strata"}})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	a.oidc.keys.now = func() time.Time { return time.Unix(0, clock.Load()) }
	ctx := context.Background()
	claims := func() map[string]any {
		return map[string]any{"iss": iss.srv.URL, "aud": "strata", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	}
	if _, err := a.AuthenticateBearer(ctx, sign(t, iss.key, iss.kid, claims())); err != nil {
		t.Fatalf("valid token: %v", err)
	}
	forger := newRSAKey(t)
	for i := range 50 {
		kid := "made-up-" + string(rune('a'+i%26))
		if i%2 == 0 {
			kid = iss.kid // a published id, a forged signature
		}
		if _, err := a.AuthenticateBearer(ctx, sign(t, forger, kid, claims())); err == nil {
			t.Fatalf("forged token %d accepted", i)
		}
	}
	if n := fetches.Load(); n > 2 {
		t.Fatalf("50 forged tokens within the interval fetched the key set %d times, want at most 2 (the first fetch and one refetch)", n)
	}
	if _, err := a.AuthenticateBearer(ctx, sign(t, iss.key, iss.kid, claims())); err != nil {
		t.Fatalf("valid token after the forged ones: %v", err)
	}

	// The issuer rotates to a new key: once the interval has passed, a
	// token under it makes one fetch and is accepted.
	rotated := newRSAKey(t)
	mu.Lock()
	published = append(published, jose.JSONWebKey{Key: &rotated.PublicKey, KeyID: "key-2", Algorithm: string(jose.RS256), Use: "sig"})
	mu.Unlock()
	clock.Add(int64(DefaultKeyRefetchInterval + time.Second))
	before := fetches.Load()
	if info, err := a.AuthenticateBearer(ctx, sign(t, rotated, "key-2", claims())); err != nil || info.Principal.String() != "User:alice" {
		t.Fatalf("token under the rotated key: %+v, %v", info, err)
	}
	if n := fetches.Load() - before; n != 1 {
		t.Fatalf("the rotated key took %d fetches, want 1", n)
	}
}
