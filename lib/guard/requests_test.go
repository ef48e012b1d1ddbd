package guard

import (
	"context"
	"sync"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// The request percentage arrives with the security state and applies to
// users, the User:* default included, never to services; waits the
// handler pauses are not charged.
func TestBeginRequestChargesHandlingTime(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	g, err := New(context.Background(), Config{RequireAuth: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	g.Apply(&commonv1.SecurityState{Quotas: []*commonv1.Quota{
		{Principal: "User:alice", RequestPercentage: 10},
		{Principal: "User:*", RequestPercentage: 50},
	}})
	handle := func(ctx context.Context, busy, wait time.Duration) time.Duration {
		t.Helper()
		ctx, done, err := g.BeginRequest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		advance(busy)
		resume := quota.Pause(ctx)
		advance(wait)
		resume()
		return done()
	}
	// alice: a bucket of 100ms; 30 s of waiting costs nothing.
	if d := handle(as("User:alice"), 50*time.Millisecond, 30*time.Second); d != 0 {
		t.Fatalf("alice throttled %v after 50ms handled, 30s waited", d)
	}
	if d := handle(as("User:alice"), 100*time.Millisecond, 0); d <= 0 {
		t.Fatal("alice not throttled after 150ms handled at 10%")
	}
	// bob has the default, 50%: 150ms is within its 500ms bucket.
	if d := handle(as("User:bob"), 150*time.Millisecond, 0); d != 0 {
		t.Fatalf("bob throttled %v under the 50%% default", d)
	}
	svc := authn.NewContext(context.Background(), authn.Info{Principal: ServicePrincipal(tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"}), Method: authn.MethodCertificate})
	if d := handle(svc, time.Hour, 0); d != 0 {
		t.Fatalf("a service throttled %v", d)
	}
}
