package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mq/strata/lib/acl"
)

// Request time: Kafka's request_percentage (KIP-124). A principal with a
// RequestPercentage may have its requests handled for that percentage of
// one handler's time, in each process: 100 is one second of handling
// every second. It caps what byte quotas do not: many cheap requests
// (metadata, list offsets, empty fetches, admin calls), each moving few
// bytes but costing the process its handlers' time.
//
// What is charged is the time a request spends being handled, from its
// admission to its answer, less the time it spends waiting: a long-poll
// fetch waiting for data, an acks=all produce waiting for the followers,
// a request held back for its principal's byte quota, a call to another
// service (which charges its own handling there, as that service's
// principal sees it). Kafka charges the time its request handler threads
// spend on a request, and a request that waits is parked in a purgatory
// that holds no thread; Strata's handlers are goroutines that wait where
// they are, so the waits are taken out instead, by a [Stopwatch] the
// request carries in its context and that every wait pauses ([Pause];
// [Delay] pauses it itself). A stopwatch rather than CPU time: Go cannot
// tell one goroutine's CPU time, and a request that holds a lock or
// reads a disk occupies its handler all the same, as a Kafka thread
// would be.
//
// While any wait of a request is paused, nothing of it is counted, even
// when another goroutine of the same request works meanwhile (a produce
// to several partitions appends one while another waits for its
// followers): a request is charged too little rather than twice.
//
// The charge uses the same token bucket as the byte quotas, in
// nanoseconds of handling: a request waits for admission while its
// principal owes anything ([Limiter.Reserve]), and the throttle its
// answer carries is its principal's debt over its rate, at most one
// Window (see [Reservation.Settle]). A principal over its quota so gets
// throttle_time_ms in its answers, and a client that does not wait finds
// its next request held back for as long. Services and callers without
// a principal are never limited; User:* is the default, as for bytes.

// Stopwatch measures a request's handling time, less the waits that
// [Pause] takes out. The zero value is not usable; see [NewStopwatch].
// Safe for concurrent use: a request's goroutines may pause it at once.
type Stopwatch struct {
	now func() time.Time

	mu      sync.Mutex
	waits   int           // pauses in progress
	from    time.Time     // when the watch last started running; valid while waits == 0
	counted time.Duration // time counted before from
	stopped bool
}

// NewStopwatch returns a running Stopwatch on the clock now (time.Now
// outside tests).
func NewStopwatch(now func() time.Time) *Stopwatch {
	return &Stopwatch{now: now, from: now()}
}

// Stop stops the watch and returns the time it ran. Pauses after Stop
// change nothing; Stop may be called again and returns the same.
func (s *Stopwatch) Stop() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		if s.waits == 0 {
			s.counted += max(s.now().Sub(s.from), 0)
		}
	}
	return s.counted
}

func (s *Stopwatch) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if s.waits == 0 {
		s.counted += max(s.now().Sub(s.from), 0)
	}
	s.waits++
}

func (s *Stopwatch) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.waits == 0 {
		return
	}
	if s.waits--; s.waits == 0 {
		s.from = s.now()
	}
}

type stopwatchKey struct{}

// WithStopwatch returns ctx carrying s, so that the waits of the request
// ctx belongs to pause it.
func WithStopwatch(ctx context.Context, s *Stopwatch) context.Context {
	return context.WithValue(ctx, stopwatchKey{}, s)
}

// Pause takes what follows out of the handling time of the request ctx
// belongs to, until the returned resume is called: call it before a wait
// (defer Pause(ctx)() around one). Without a stopwatch in ctx it does
// nothing. Pauses may overlap; the watch runs again once every one has
// resumed. resume may be called more than once; only the first counts.
func Pause(ctx context.Context) (resume func()) {
	s, _ := ctx.Value(stopwatchKey{}).(*Stopwatch)
	if s == nil {
		return func() {}
	}
	s.pause()
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			s.resume()
		}
	}
}

// Handling is one request being handled under its principal's request
// quota, from [Limiter.BeginRequest] to Finish. A nil *Handling (a
// principal without a request quota) finishes with no throttle.
type Handling struct {
	r   Reservation
	sw  *Stopwatch
	now func() time.Time
}

// BeginRequest admits a request of p under p's request quota: it waits,
// as [Limiter.Reserve] does, while p owes handling time of earlier
// requests (ctx's error if ctx ends first), then returns ctx carrying a
// running [Stopwatch] and the Handling to Finish when the request has
// been answered. A principal without a request quota (services, callers
// without a principal, users with neither a quota nor a default) is
// admitted at once with ctx as it is and a nil Handling. now is the
// clock (time.Now outside tests).
func (l *Limiter) BeginRequest(ctx context.Context, p acl.Principal, now func() time.Time) (context.Context, *Handling, error) {
	if l.rate(p, Request) <= 0 {
		return ctx, nil, nil
	}
	r, err := l.Reserve(ctx, p, Request, 0, now)
	if err != nil {
		return ctx, nil, err
	}
	sw := NewStopwatch(now)
	return WithStopwatch(ctx, sw), &Handling{r: r, sw: sw, now: now}, nil
}

// Finish stops the request's stopwatch, charges its handling time to its
// principal and returns the request's throttle: 0 within the quota, at
// most Window. Call it once, when the request has been answered.
func (h *Handling) Finish() time.Duration {
	if h == nil {
		return 0
	}
	return h.r.Settle(int64(h.sw.Stop()), h.now())
}
