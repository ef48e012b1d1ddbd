package quota

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/testwait"
)

func TestStopwatchLeavesOutWaits(t *testing.T) {
	clock := &fakeClock{now: t0}
	sw := NewStopwatch(clock.Now)
	ctx := WithStopwatch(context.Background(), sw)
	clock.Add(10 * time.Millisecond) // handling
	resume := Pause(ctx)
	clock.Add(time.Minute) // a long poll
	resume()
	resume() // a second resume changes nothing
	clock.Add(5 * time.Millisecond)
	// Two goroutines of the request wait at once, overlapping: the watch
	// runs again only when both are done.
	a := Pause(ctx)
	clock.Add(time.Second)
	b := Pause(ctx)
	clock.Add(time.Second)
	a()
	clock.Add(time.Second)
	b()
	clock.Add(5 * time.Millisecond)
	if got := sw.Stop(); got != 20*time.Millisecond {
		t.Fatalf("Stop %v, want the 20ms handled outside the waits", got)
	}
	// After Stop nothing moves it.
	late := Pause(ctx)
	clock.Add(time.Second)
	late()
	if got := sw.Stop(); got != 20*time.Millisecond {
		t.Fatalf("second Stop %v, want 20ms again", got)
	}
	// Without a stopwatch Pause does nothing.
	Pause(context.Background())()
}

// Delay is the byte quotas' hold: it is a wait, so it pauses the watch.
func TestDelayPausesTheStopwatch(t *testing.T) {
	sw := NewStopwatch(time.Now)
	ctx, cancel := context.WithCancel(WithStopwatch(context.Background(), sw))
	done := make(chan error)
	go func() { done <- Delay(ctx, time.Hour) }()
	paused := func() int {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		return sw.waits
	}
	testwait.Until(t, 10*time.Second, "Delay to pause the stopwatch", func() error {
		if paused() != 1 {
			return errors.New("not paused")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Delay: %v", err)
	}
	if n := paused(); n != 0 {
		t.Fatalf("%d pauses left after Delay returned, want 0", n)
	}
}

// near reports whether a throttle is want, give or take the rounding of
// the bucket's floating-point arithmetic.
func near(got, want time.Duration) bool {
	return got >= want-time.Microsecond && got <= want+time.Microsecond
}

// handle is one request of p on the fake clock that is handled for busy
// and waits for wait in the middle of it; it returns the throttle.
func handle(t *testing.T, l *Limiter, clock *fakeClock, p acl.Principal, busy, wait time.Duration) time.Duration {
	t.Helper()
	ctx, h, err := l.BeginRequest(context.Background(), p, clock.Now)
	if err != nil {
		t.Fatalf("%v admitted: %v", p, err)
	}
	clock.Add(busy / 2)
	resume := Pause(ctx)
	clock.Add(wait)
	resume()
	clock.Add(busy - busy/2)
	return h.Finish()
}

func TestRequestTimeIsChargedWithoutWaits(t *testing.T) {
	// 10%: 100ms of handling a second, and a bucket of 100ms.
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {RequestPercentage: 10}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	// A long poll that waits 30 s and is handled for 40ms costs 40ms:
	// within the bucket.
	if d := handle(t, l, clock, alice, 40*time.Millisecond, 30*time.Second); d != 0 {
		t.Fatalf("throttle %v after 40ms handled and 30s waited, want 0", d)
	}
	// 90ms more (the bucket holds 100ms, full again after the wait): 10ms of
	// debt under a rate of 100ms a second is 100ms of throttle.
	if d := handle(t, l, clock, alice, 110*time.Millisecond, time.Hour); !near(d, 100*time.Millisecond) {
		t.Fatalf("throttle %v after 110ms handled on a full 100ms bucket, want 100ms", d)
	}
	if got := l.Pending(alice, Request, clock.Now()); !near(got, 100*time.Millisecond) {
		t.Fatalf("Pending %v, want the 100ms the answer asked for", got)
	}
}

// A request that took far longer than its principal's quota allows is
// throttled for one Window at most, as Kafka bounds a request quota's
// throttle by its quota window.
func TestRequestThrottleIsAtMostOneWindow(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {RequestPercentage: 1}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	if d := handle(t, l, clock, alice, 30*time.Second, 0); !near(d, Window) {
		t.Fatalf("throttle %v after 30s handled at 1%%, want the bound, %v", d, Window)
	}
	clock.Add(Window)
	if d := l.Pending(alice, Request, clock.Now()); d != 0 {
		t.Fatalf("still owing %v one window later", d)
	}
}

// A principal that owes is held back at its next request, however fast
// its client sends it; another principal is not.
func TestRequestHeldWhileOwing(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {RequestPercentage: 10}, bob: {RequestPercentage: 10}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	if d := handle(t, l, clock, alice, 150*time.Millisecond, 0); !near(d, 500*time.Millisecond) {
		t.Fatalf("throttle %v after 150ms on a 100ms bucket at 10%%, want 500ms", d)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := l.BeginRequest(short, alice, clock.Now); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("alice's next request while she owes: %v, want it held until its deadline", err)
	}
	if d := handle(t, l, &fakeClock{now: clock.Now()}, bob, time.Millisecond, 0); d != 0 {
		t.Fatalf("bob throttled %v beside alice", d)
	}
	clock.Add(500 * time.Millisecond)
	// An empty bucket: 1ms handled, less the 0.1ms it refilled meanwhile,
	// is 9ms at 10%.
	if d := handle(t, l, clock, alice, time.Millisecond, 0); !near(d, 9*time.Millisecond) {
		t.Fatalf("alice after waiting her throttle: %v, want 9ms", d)
	}
}

// A client sending requests back to back, each waiting the throttle it is
// given, is held to its percentage of the handler's time. (One request at
// a time never takes more than 100%, whatever its quota.)
func TestRequestRateHeldToTheQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		pct  float64
		cost time.Duration
	}{
		{"1% of 200µs requests", 1, 200 * time.Microsecond},
		{"10% of 3ms requests", 10, 3 * time.Millisecond},
		{"50% of 20ms requests", 50, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLimiter(map[acl.Principal]Rates{alice: {RequestPercentage: tc.pct}})
			if err != nil {
				t.Fatal(err)
			}
			clock := &fakeClock{now: t0}
			const span = time.Minute
			var handled time.Duration
			for end := t0.Add(span); clock.Now().Before(end); {
				d := handle(t, l, clock, alice, tc.cost, 0)
				handled += tc.cost
				clock.Add(d)
			}
			got := 100 * handled.Seconds() / span.Seconds()
			// One bucket and one request over: a window's worth above.
			if got < tc.pct || got > tc.pct*1.05 {
				t.Fatalf("handled %.2f%% of the time, want %.2f%% (up to 5%% over)", got, tc.pct)
			}
		})
	}
}

func TestRequestDefaultQuotaAndExemptions(t *testing.T) {
	carol := acl.User("carol")
	svc := acl.Principal{Type: acl.TypeService, Name: "gateway/1"}
	l, err := NewLimiter(map[acl.Principal]Rates{
		acl.AnyUser: {RequestPercentage: 10},
		carol:       {FetchBytesPerSec: 1000}, // her own quota: requests unlimited
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	// Each user has a bucket of its own under the default.
	for _, p := range []acl.Principal{alice, bob} {
		if d := handle(t, l, clock, p, 150*time.Millisecond, 0); !near(d, 500*time.Millisecond) {
			t.Errorf("%v: throttle %v after 150ms under the 10%% default, want 500ms", p, d)
		}
	}
	for _, p := range []acl.Principal{carol, svc, {}} {
		ctx := context.Background()
		got, h, err := l.BeginRequest(ctx, p, clock.Now)
		if err != nil || h != nil || got != ctx {
			t.Errorf("%q: BeginRequest gave %v, %v: want it admitted untouched", p, h, err)
		}
		if d := h.Finish(); d != 0 {
			t.Errorf("%q: throttled %v", p, d)
		}
	}
}

// The request quota protects each process's handlers: it is not shared
// through the heartbeats.
func TestRequestQuotaIsPerProcess(t *testing.T) {
	l, err := NewLimiter(map[acl.Principal]Rates{alice: {ProduceBytesPerSec: mb, RequestPercentage: 10}})
	if err != nil {
		t.Fatal(err)
	}
	l.TakeUsage(t0)
	clock := &fakeClock{now: t0}
	handle(t, l, clock, alice, 50*time.Millisecond, 0)
	r, err := l.Reserve(context.Background(), alice, Produce, 1000, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	r.Settle(1000, clock.Now())
	u := l.TakeUsage(t0.Add(time.Second))
	if want := (Rates{ProduceBytesPerSec: 1000}); u[alice] != want {
		t.Fatalf("TakeUsage %+v, want the produce bytes only", u[alice])
	}
	// Three nodes, the others moving plenty: the byte quota is shared,
	// the request quota stays whole here.
	l.SetCluster(3, map[acl.Principal]Elsewhere{alice: {Rates: Rates{ProduceBytesPerSec: 2 * mb}, ProduceNodes: 2}})
	if got, want := l.Capacity(alice, Request), int64(100*time.Millisecond); got != want {
		t.Fatalf("request capacity %v in a cluster of 3, want the whole %v", time.Duration(got), time.Duration(want))
	}
}

func TestSetRefusesBadRequestPercentages(t *testing.T) {
	for _, pct := range []float64{-1, math.NaN(), math.Inf(1)} {
		l := &Limiter{}
		if err := l.Set(map[acl.Principal]Rates{alice: {RequestPercentage: pct}}); err == nil {
			t.Errorf("Set accepted request percentage %v", pct)
		}
	}
	if Request.String() != "request" {
		t.Fatal("Request's name")
	}
	if got := (Rates{RequestPercentage: 2.5}).For(Request); got != int64(25*time.Millisecond) {
		t.Fatalf("2.5%% is %v of handling a second, want 25ms", time.Duration(got))
	}
}
