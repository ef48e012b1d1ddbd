package authn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// DefaultKeyRefetchInterval is the least time between two fetches of an
// OIDC issuer's key set unless OIDCConfig.KeyRefetchInterval says
// otherwise.
const DefaultKeyRefetchInterval = 10 * time.Second

// maxKeySetBytes bounds the key set document read from the issuer.
const maxKeySetBytes = 1 << 20

// errKeyRefetchLimited is why a JWT no cached key verifies is refused
// while the key set was fetched too recently to fetch it again.
var errKeyRefetchLimited = errors.New("no key of the issuer verifies its signature (the key set was fetched moments ago and is not fetched again yet)")

// keySet is an issuer's JSON Web Key Set, fetched when a JWT's signature
// verifies with none of the keys held (a key id not seen yet: the issuer
// rotated its keys), but at most once per interval. go-oidc's
// RemoteKeySet fetches again for every such JWT, so anyone could make
// each node fetch the issuer's keys once per request by sending tokens
// with made-up key ids or signatures: load on the issuer, and requests
// held for the fetch. Kafka's OAuth validation (KIP-768,
// RefreshingHttpsJwks) refetches for a missing key id at most once a
// minute per id, one fetch at a time; one limit for all ids is simpler
// and also bounds an attacker who makes up a new id each time. Safe for
// concurrent use.
type keySet struct {
	url      string
	client   *http.Client
	interval time.Duration
	now      func() time.Time

	keys atomic.Pointer[oidc.StaticKeySet] // nil before the first fetch
	// fetch is a one-slot semaphore held by the one fetch in flight; it
	// also guards last.
	fetch chan struct{}
	last  time.Time // start of the last fetch; zero before the first
}

func newKeySet(url string, client *http.Client, interval time.Duration) *keySet {
	if interval <= 0 {
		interval = DefaultKeyRefetchInterval
	}
	return &keySet{url: url, client: client, interval: interval, now: time.Now, fetch: make(chan struct{}, 1)}
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	held := k.keys.Load()
	if held != nil {
		if payload, err := held.VerifySignature(ctx, jwt); err == nil {
			return payload, nil
		}
	}
	fresh, err := k.refresh(ctx, held)
	if err != nil {
		return nil, err
	}
	return fresh.VerifySignature(ctx, jwt)
}

// refresh returns keys newer than held: those another caller fetched
// meanwhile, or fetched now when the interval since the last fetch has
// passed; errKeyRefetchLimited otherwise.
func (k *keySet) refresh(ctx context.Context, held *oidc.StaticKeySet) (*oidc.StaticKeySet, error) {
	select {
	case k.fetch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-k.fetch }()
	if cur := k.keys.Load(); cur != held {
		return cur, nil
	}
	if !k.last.IsZero() && k.now().Sub(k.last) < k.interval {
		return nil, errKeyRefetchLimited
	}
	k.last = k.now()
	keys, err := k.download(ctx)
	if err != nil {
		return nil, err
	}
	k.keys.Store(keys)
	return keys, nil
}

// download fetches the key set. A key of a type go-jose cannot read is
// skipped rather than failing the set, as go-oidc does.
func (k *keySet) download(ctx context.Context) (*oidc.StaticKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching keys: %w", err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes))
	if err != nil {
		return nil, fmt.Errorf("fetching keys: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching keys: %s answered %s", k.url, resp.Status)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("fetching keys: %s is not a JSON Web Key Set: %w", k.url, err)
	}
	set := &oidc.StaticKeySet{}
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(raw); err != nil || key.Use == "enc" {
			continue
		}
		if !key.IsPublic() {
			key = key.Public()
		}
		if key.Key != nil {
			set.PublicKeys = append(set.PublicKeys, key.Key)
		}
	}
	return set, nil
}
