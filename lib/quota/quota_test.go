package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/acl"
)

var (
	alice = acl.User("alice")
	bob   = acl.User("bob")
	t0    = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

const mb = 1 << 20

// client is a simulated client that wants to send size bytes every
// interval and honours every throttle: after a request it waits the
// longer of its interval and the throttle it was given.
type client struct {
	p        acl.Principal
	kind     Kind
	size     int64
	interval time.Duration
	next     time.Time
	sent     int64
	throttle time.Duration // sum of throttles received
}

// run advances the client until until, on the fake clock.
func (c *client) run(l *Limiter, until time.Time) {
	for c.next.Before(until) {
		th := l.Record(c.p, c.kind, c.size, c.next)
		c.sent += c.size
		c.throttle += th
		c.next = c.next.Add(max(c.interval, th))
	}
}

func rate(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() }

func within(got, want, tolerance float64) bool {
	return got >= want*(1-tolerance) && got <= want*(1+tolerance)
}

func TestThrottleHoldsAPrincipalToItsQuota(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quota    int64
		size     int64
		interval time.Duration // the client's own pace: 2x the quota
	}{
		{"1 MB/s, 100 KiB every 50ms", mb, mb / 10, 50 * time.Millisecond},
		{"1 MB/s, 1 MiB every 500ms", mb, mb, 500 * time.Millisecond},
		{"10 KB/s, 2 KiB every 100ms", 10 << 10, 2 << 10, 100 * time.Millisecond},
		{"5 MB/s, 4 MiB batches every 400ms", 5 * mb, 4 * mb, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLimiter(map[acl.Principal]Rates{
				alice: {ProduceBytesPerSec: tc.quota},
				bob:   {ProduceBytesPerSec: tc.quota},
			})
			if err != nil {
				t.Fatal(err)
			}
			fast := &client{p: alice, kind: Produce, size: tc.size, interval: tc.interval, next: t0}
			if want := 2 * float64(tc.quota); !within(rate(tc.size, tc.interval), want, 0.05) {
				t.Fatalf("test setup: the client's pace is %.0f B/s, want 2x the quota", rate(tc.size, tc.interval))
			}
			// bob sends at half his quota, interleaved with alice.
			slow := &client{p: bob, kind: Produce, size: tc.size, interval: 4 * tc.interval, next: t0}
			end := t0.Add(time.Minute)
			for step := t0; step.Before(end); step = step.Add(time.Second) {
				fast.run(l, step.Add(time.Second))
				slow.run(l, step.Add(time.Second))
			}
			got := rate(fast.sent, time.Minute)
			t.Logf("alice: %.4f of her quota, throttled %v in all; bob: %.4f of his", got/float64(tc.quota), fast.throttle, rate(slow.sent, time.Minute)/float64(tc.quota))
			if !within(got, float64(tc.quota), 0.10) {
				t.Fatalf("alice moved %.0f B/s over a minute, want %d ±10%%", got, tc.quota)
			}
			if fast.throttle == 0 {
				t.Fatal("alice was never throttled")
			}
			if slow.throttle != 0 {
				t.Fatalf("bob, at half his quota, was throttled %v", slow.throttle)
			}
			if want := rate(tc.size, 4*tc.interval); !within(rate(slow.sent, time.Minute), want, 0.05) {
				t.Fatalf("bob moved %.0f B/s, want his own pace %.0f", rate(slow.sent, time.Minute), want)
			}
		})
	}
}

func TestOtherPrincipalsAndKindsAreUnaffected(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	if th := l.Record(alice, Produce, 10*mb, t0); th < 8*time.Second {
		t.Fatalf("10 MiB at 1 MiB/s throttled only %v", th)
	}
	for _, tc := range []struct {
		p acl.Principal
		k Kind
	}{{alice, Fetch}, {bob, Produce}, {bob, Fetch}, {acl.Anonymous, Produce}} {
		if th := l.Record(tc.p, tc.k, 100*mb, t0); th != 0 {
			t.Errorf("%v %v throttled %v", tc.p, tc.k, th)
		}
		if th := l.Pending(tc.p, tc.k, t0); th != 0 {
			t.Errorf("%v %v pending %v", tc.p, tc.k, th)
		}
	}
}

func TestThrottleIsDebtOverRate(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {FetchBytesPerSec: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at       time.Duration
		bytes    int64
		throttle time.Duration
	}{
		{0, 1000, 0},                     // a full bucket: one window's worth goes through
		{0, 500, 500 * time.Millisecond}, // 500 bytes of debt at 1000 B/s
		{0, 500, time.Second},            // 1000 bytes of debt
		{time.Second, 0, 0},              // paid back after waiting
		{time.Second, -5, 0},             // negative bytes count as nothing
		{1500 * time.Millisecond, 1000, 500 * time.Millisecond},
		{10 * time.Second, 1000, 0}, // the bucket refills to one window, no more
		{10 * time.Second, 1, time.Millisecond},
		{9 * time.Second, 0, time.Millisecond}, // a clock going backwards refills nothing
	}
	for i, s := range steps {
		if got := l.Record(alice, Fetch, s.bytes, t0.Add(s.at)); got != s.throttle {
			t.Fatalf("step %d (%d bytes at %v): throttle %v, want %v", i, s.bytes, s.at, got, s.throttle)
		}
	}
	if got := l.Pending(alice, Fetch, t0.Add(10*time.Second+500*time.Microsecond)); got != 500*time.Microsecond {
		t.Fatalf("Pending = %v, want 500µs", got)
	}
	if got := l.Pending(alice, Fetch, t0.Add(11*time.Second)); got != 0 {
		t.Fatalf("Pending after waiting = %v", got)
	}
}

func TestPendingIsWhatAClientDidNotWait(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	th := l.Record(alice, Produce, 3*mb, t0)
	if th != 2*time.Second {
		t.Fatalf("throttle %v, want 2s", th)
	}
	if p := l.Pending(alice, Produce, t0.Add(500*time.Millisecond)); p != 1500*time.Millisecond {
		t.Fatalf("a client back after 500ms still owes %v, want 1.5s", p)
	}
	if p := l.Pending(alice, Produce, t0.Add(th)); p != 0 {
		t.Fatalf("a client that waited its throttle owes %v", p)
	}
	if p := l.Pending(bob, Produce, t0); p != 0 {
		t.Fatalf("an unlimited principal owes %v", p)
	}
}

func TestQuotaChangeAppliesAtOnce(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb}, bob: {ProduceBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(alice, Produce, 3*mb, t0) // 2 MiB of debt
	if err := l.Set(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 4 * mb}, bob: {ProduceBytesPerSec: mb}}); err != nil {
		t.Fatal(err)
	}
	if p := l.Pending(alice, Produce, t0); p != 500*time.Millisecond {
		t.Fatalf("after raising the quota to 4 MiB/s, 2 MiB of debt owes %v, want 500ms", p)
	}
	// A client at 8 MiB/s now converges on the new quota.
	c := &client{p: alice, kind: Produce, size: mb, interval: 125 * time.Millisecond, next: t0}
	c.run(l, t0.Add(30*time.Second))
	if got := rate(c.sent, 30*time.Second); !within(got, 4*mb, 0.10) {
		t.Fatalf("after the change alice moved %.0f B/s, want 4 MiB/s ±10%%", got)
	}
	// Lowering applies at once too: what goes through at once shrinks to
	// the new window.
	if err := l.Set(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 1000}}); err != nil {
		t.Fatal(err)
	}
	at := c.next.Add(time.Hour)
	if th := l.Record(alice, Produce, 2000, at); th != time.Second {
		t.Fatalf("2000 bytes at a new quota of 1000 B/s: throttle %v, want 1s", th)
	}
	// Removing a quota makes the principal unlimited at once, and drops
	// its bucket: limited again, it starts with a full one.
	if err := l.Set(map[acl.Principal]Rates{}); err != nil {
		t.Fatal(err)
	}
	if th := l.Record(alice, Produce, 100*mb, at); th != 0 {
		t.Fatalf("unlimited alice throttled %v", th)
	}
	if err := l.Set(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 1000}}); err != nil {
		t.Fatal(err)
	}
	if th := l.Record(alice, Produce, 1000, at); th != 0 {
		t.Fatalf("a newly limited principal starts throttled %v", th)
	}
	if q := l.Quotas(); len(q) != 1 || q[alice].ProduceBytesPerSec != 1000 {
		t.Fatalf("Quotas = %v", q)
	}
}

func TestUnlimitedNeverThrottles(t *testing.T) {
	var zero Limiter
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 0, FetchBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		if th := l.Record(alice, Produce, 1<<40, now); th != 0 {
			t.Fatalf("unlimited produce throttled %v", th)
		}
		if th := zero.Record(alice, Fetch, 1<<40, now); th != 0 {
			t.Fatalf("the zero Limiter throttled %v", th)
		}
		if th := l.Record(alice, Kind(9), 1<<40, now); th != 0 {
			t.Fatalf("an invalid kind throttled %v", th)
		}
	}
	if len(zero.Quotas()) != 0 {
		t.Fatal("the zero Limiter has quotas")
	}
}

func TestSetRefusesNegativeRates(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Set(map[acl.Principal]Rates{alice: {FetchBytesPerSec: -1}}); err == nil {
		t.Fatal("negative rate accepted")
	}
	if l.Quotas()[alice].ProduceBytesPerSec != 5 {
		t.Fatal("a refused Set changed the quotas")
	}
	if _, err := NewLimiter(map[acl.Principal]Rates{bob: {ProduceBytesPerSec: -3}}); err == nil {
		t.Fatal("NewLimiter accepted a negative rate")
	}
}

func TestConcurrentRecordCountsEveryByte(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 100
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				l.Record(alice, Produce, 10, t0)
				l.Record(acl.User(fmt.Sprint("u", g)), Produce, 10, t0)
				if g == 0 {
					_ = l.Set(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: 1000}})
				}
			}
		}()
	}
	wg.Wait()
	// 8000 bytes against a full bucket of 1000: 7000 bytes of debt.
	if p := l.Pending(alice, Produce, t0); p != 7*time.Second {
		t.Fatalf("Pending = %v, want 7s", p)
	}
}

func TestDelay(t *testing.T) {
	if err := Delay(context.Background(), 0); err != nil {
		t.Fatalf("Delay(0) = %v", err)
	}
	if err := Delay(context.Background(), -time.Second); err != nil {
		t.Fatalf("Delay(<0) = %v", err)
	}
	if err := Delay(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Delay(1ms) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Delay(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delay with a canceled context = %v", err)
	}
	if Produce.String() != "produce" || Fetch.String() != "fetch" || Kind(0).String() != "Kind(0)" {
		t.Fatal("Kind names")
	}
}

// TestDefaultQuota: User:*'s quota caps every user without one of its own,
// each in a bucket of its own; a user's own quota replaces it whole, and
// services are never limited.
func TestDefaultQuota(t *testing.T) {
	alice, bob, carol := acl.User("alice"), acl.User("bob"), acl.User("carol")
	svc := acl.Principal{Type: acl.TypeService, Name: "storage/1"}
	l, err := NewLimiter(map[acl.Principal]Rates{
		acl.AnyUser: {ProduceBytesPerSec: 1000},
		carol:       {FetchBytesPerSec: 500}, // her own: produce unlimited
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	// alice and bob each have a full bucket of 1000 bytes: 3000 bytes
	// owe 2 s each, whoever else sent.
	for _, p := range []acl.Principal{alice, bob} {
		if d := l.Record(p, Produce, 3000, now); d != 2*time.Second {
			t.Errorf("%v: throttle %v after 3000 bytes at the default 1000 B/s; want 2s", p, d)
		}
	}
	if d := l.Record(carol, Produce, 1<<30, now); d != 0 {
		t.Errorf("carol, whose own quota has no produce limit, throttled %v", d)
	}
	if d := l.Record(carol, Fetch, 1500, now); d != 2*time.Second {
		t.Errorf("carol's own fetch quota: throttle %v; want 2s", d)
	}
	if d := l.Record(svc, Produce, 1<<30, now); d != 0 {
		t.Errorf("a service throttled %v by the users' default", d)
	}
	// Without the default, alice is unlimited again.
	if err := l.Set(map[acl.Principal]Rates{carol: {FetchBytesPerSec: 500}}); err != nil {
		t.Fatal(err)
	}
	if d := l.Record(alice, Produce, 1<<30, now); d != 0 {
		t.Errorf("alice throttled %v with no default", d)
	}
}

// fakeClock is a clock tests move by hand; Reserve reads it between
// waits, so a waiting Reserve sees time pass only when the test moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The issue this answers: parallel requests all got in before any of them
// was charged. With Reserve, a request admitted while the bucket is full
// charges at once, and the next one waits for the debt.
func TestReserveAdmitsParallelRequestsOneAfterAnother(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	ctx := context.Background()
	first, err := l.Reserve(ctx, alice, Produce, 2*mb, clock.Now) // a full bucket: admitted, 1 MB in debt
	if err != nil {
		t.Fatal(err)
	}
	// A second request made before the first is settled must wait for
	// the first's debt: it is not admitted while the clock stands still.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.Reserve(short, alice, Produce, mb, clock.Now); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Reserve while the first's debt stands: %v, want it held until its deadline", err)
	}
	if got := first.Settle(2*mb, clock.Now()); got != time.Second {
		t.Fatalf("first throttle %v, want 1s (1 MB of debt at 1 MB/s)", got)
	}
	// Once the debt is paid, the next is admitted.
	clock.Add(time.Second)
	second, err := l.Reserve(ctx, alice, Produce, mb/2, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Settle(mb/2, clock.Now()); got != time.Second/2 {
		t.Fatalf("second throttle %v, want 500ms", got)
	}
}

func TestReserveWaitsOnTheRealClock(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {FetchBytesPerSec: 100 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := l.Reserve(ctx, alice, Fetch, 110<<10, time.Now) // 10 KiB in debt: 100ms
	if err != nil {
		t.Fatal(err)
	}
	r.Settle(110<<10, time.Now())
	start := time.Now()
	if _, err := l.Reserve(ctx, alice, Fetch, 1, time.Now); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 90*time.Millisecond {
		t.Fatalf("admitted after %v, want it held for the ~100ms of debt", waited)
	}
}

func TestSettleGivesBackWhatWasNotUsed(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {FetchBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	if got := l.Capacity(alice, Fetch); got != mb {
		t.Fatalf("Capacity %d, want one second of the rate, %d", got, mb)
	}
	r, err := l.Reserve(context.Background(), alice, Fetch, 3*mb, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Pending(alice, Fetch, clock.Now()); got != 2*time.Second {
		t.Fatalf("Pending after the reservation %v, want 2s", got)
	}
	// The fetch found only 100 KiB: it owes nothing, and the refund
	// never fills the bucket past one window.
	if got := r.Settle(100<<10, clock.Now()); got != 0 {
		t.Fatalf("throttle %v after a small read, want 0", got)
	}
	r2, err := l.Reserve(context.Background(), alice, Fetch, 0, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	// The bucket held 1 MiB - 100 KiB: 1 MiB leaves 100 KiB of debt.
	if got, want := r2.Settle(mb, clock.Now()), 97656250*time.Nanosecond; got != want {
		t.Fatalf("throttle %v after 1 MiB on a bucket holding 1 MiB - 100 KiB, want %v", got, want)
	}
}

func TestReserveWithoutAQuota(t *testing.T) {
	var l Limiter
	r, err := l.Reserve(context.Background(), bob, Produce, 1<<40, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Settle(1<<40, time.Now()); got != 0 {
		t.Fatalf("unlimited principal throttled %v", got)
	}
	if got := (Reservation{}).Settle(5, time.Now()); got != 0 {
		t.Fatalf("zero Reservation throttled %v", got)
	}
}

// Three nodes share a 1 MB/s quota: clients that honour their throttles
// and want 1 MB/s on every node move about 1 MB/s in all once the nodes
// exchange what they moved (once a simulated heartbeat), not 3 MB/s.
func TestClusterSharesOneQuota(t *testing.T) {
	const nodes = 3
	ls := clusterOf(t, nodes)
	clients := make([]*client, nodes)
	for i := range clients {
		clients[i] = &client{p: alice, kind: Produce, size: mb / 20, interval: 25 * time.Millisecond, next: t0}
	}
	heartbeat := time.Second
	var sentAfterWarmup int64
	for tick := 1; tick <= 30; tick++ {
		now := t0.Add(time.Duration(tick) * heartbeat)
		before := int64(0)
		for i, c := range clients {
			before += c.sent
			c.run(ls[i], now)
		}
		exchange(ls, now)
		if tick > 10 {
			after := int64(0)
			for _, c := range clients {
				after += c.sent
			}
			sentAfterWarmup += after - before
		}
	}
	got := rate(sentAfterWarmup, 20*heartbeat)
	t.Logf("three nodes: %.0f B/s in all", got)
	if !within(got, mb, 0.10) {
		t.Fatalf("three nodes let alice move %.0f B/s in all, want within 10%% of her 1 MiB/s quota", got)
	}
}

// One node's share as a controller: alone with the traffic it grows to
// the whole quota; beside nodes that move more than the quota it shrinks
// to its floor, 1 / (2 nodes); with every node busy it holds.
func TestSharesFollowTheCluster(t *testing.T) {
	const quota = 900
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {FetchBytesPerSec: quota}})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	l.TakeUsage(now)
	l.SetCluster(3, nil) // the whole quota until some node moves it
	if got := l.Capacity(alice, Fetch); got != quota {
		t.Fatalf("before any exchange: rate %d, want the whole quota %d", got, quota)
	}
	// window moves what the node lets through for one second (or
	// nothing), and exchanges it with others moved by two other nodes.
	window := func(move bool, others int64) int64 {
		if move {
			l.Record(alice, Fetch, l.Capacity(alice, Fetch), now)
		}
		now = now.Add(time.Second)
		l.TakeUsage(now)
		e := Elsewhere{Rates: Rates{FetchBytesPerSec: others}}
		if others > 0 {
			e.FetchNodes = 2
		}
		l.SetCluster(3, map[acl.Principal]Elsewhere{alice: e})
		return l.Capacity(alice, Fetch)
	}
	// Used elsewhere only, for a few windows: what the others leave.
	for range 3 {
		window(false, 600)
	}
	if got := l.Capacity(alice, Fetch); got != 300 {
		t.Fatalf("not used here, 600 B/s elsewhere: rate %d, want what is left, 300", got)
	}
	// Used here, beside 600 elsewhere: the error (900 - 300 - 600 = 0)
	// leaves the share.
	got := window(true, 600)
	if got != 300 {
		t.Fatalf("used here at 300 beside 600: rate %d, want 300", got)
	}
	// The others stop: alone, the node gets the whole quota at the next
	// exchange.
	if got := window(true, 0); got != quota {
		t.Fatalf("alone: rate %d, want the whole quota %d at once", got, quota)
	}
	for range 30 {
		got = window(true, 5000)
	}
	if got != quota/6 {
		t.Fatalf("beside nodes moving 5000 B/s: rate %d, want the floor %d", got, quota/6)
	}
	if got := l.Capacity(bob, Fetch); got != 0 {
		t.Fatalf("bob without a quota limited to %d", got)
	}
	// Nobody moves it any more: the whole quota again.
	for range 3 {
		got = window(false, 0)
	}
	if got != quota {
		t.Fatalf("moved nowhere: rate %d, want %d", got, quota)
	}
	l.SetCluster(1, nil)
	if got := l.Capacity(alice, Fetch); got != quota {
		t.Fatalf("alone again (one node): rate %d, want %d", got, quota)
	}
}

// Three nodes whose clients stall now and then (a busy machine): a window
// that moved too little is made up by the next, so over time the total
// stays within 10% of the quota, and above 90% of it.
func TestClusterShareHoldsThroughStalls(t *testing.T) {
	const nodes = 3
	ls := clusterOf(t, nodes)
	clients := make([]*client, nodes)
	for i := range clients {
		clients[i] = &client{p: alice, kind: Produce, size: mb / 50, interval: 10 * time.Millisecond, next: t0}
	}
	seed := uint32(7)
	random := func() uint32 { seed = seed*1664525 + 1013904223; return seed >> 16 }
	var sent int64
	const windows, warmUp = 60, 10
	for tick := 1; tick <= windows; tick++ {
		now := t0.Add(time.Duration(tick) * time.Second)
		for i, c := range clients {
			if random()%4 == 0 {
				// This client stalls for most of the window.
				c.next = c.next.Add(700 * time.Millisecond)
			}
			before := c.sent
			c.run(ls[i], now)
			if tick > warmUp {
				sent += c.sent - before
			}
		}
		exchange(ls, now)
	}
	got := rate(sent, (windows-warmUp)*time.Second)
	t.Logf("three nodes with stalling clients: %.0f B/s in all (%.1f%% of the quota)", got, 100*got/mb)
	if !within(got, mb, 0.10) {
		t.Fatalf("three nodes let alice move %.0f B/s in all, want within 10%% of her 1 MiB/s quota", got)
	}
}

func TestTakeUsage(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb, FetchBytesPerSec: mb}})
	if err != nil {
		t.Fatal(err)
	}
	if u := l.TakeUsage(t0); len(u) != 0 {
		t.Fatalf("first TakeUsage %v, want nothing", u)
	}
	r, err := l.Reserve(context.Background(), alice, Produce, 1000, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	r.Settle(600, t0)
	l.Record(alice, Fetch, 2000, t0)
	l.Record(bob, Fetch, 5000, t0) // no quota: not counted
	u := l.TakeUsage(t0.Add(2 * time.Second))
	if want := (Rates{ProduceBytesPerSec: 300, FetchBytesPerSec: 1000}); len(u) != 1 || u[alice] != want {
		t.Fatalf("TakeUsage %v, want alice %+v", u, want)
	}
	if u := l.TakeUsage(t0.Add(3 * time.Second)); len(u) != 0 {
		t.Fatalf("TakeUsage after an idle second %v, want nothing", u)
	}
}

// exchange is one heartbeat round among ls: each node reports what it
// moved and hears what the others moved (the controller's sums).
func exchange(ls []*Limiter, now time.Time) {
	usage := make([]map[acl.Principal]Rates, len(ls))
	for i, l := range ls {
		usage[i] = l.TakeUsage(now)
	}
	for i, l := range ls {
		others := map[acl.Principal]Elsewhere{}
		for j := range ls {
			if j == i {
				continue
			}
			for p, r := range usage[j] {
				e := others[p]
				e.ProduceBytesPerSec += r.ProduceBytesPerSec
				e.FetchBytesPerSec += r.FetchBytesPerSec
				if r.ProduceBytesPerSec > 0 {
					e.ProduceNodes++
				}
				if r.FetchBytesPerSec > 0 {
					e.FetchNodes++
				}
				others[p] = e
			}
		}
		l.SetCluster(len(ls), others)
	}
}

// clusterOf is n nodes' limiters, each holding alice to 1 MiB/s of
// produce, their usage counts started at t0.
func clusterOf(t *testing.T, n int) []*Limiter {
	t.Helper()
	ls := make([]*Limiter, n)
	for i := range ls {
		l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb}})
		if err != nil {
			t.Fatal(err)
		}
		l.TakeUsage(t0) // starts the count
		ls[i] = l
	}
	return ls
}
