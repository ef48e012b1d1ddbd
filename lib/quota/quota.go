// Package quota caps how many bytes a principal may produce and fetch per
// second, and how much of a request handler's time its requests may take
// (Kafka's request_percentage, KIP-124; requests.go), by throttling as
// Kafka's quota managers do: a request is never refused for its quota;
// the answer says how long the client must wait so that its rate comes
// back to the quota.
//
// # The measure
//
// Each (principal, kind) with a quota has a token bucket holding up to
// one Window of its rate (a quota of 1 MB/s lets 1 MB through at once
// after a second of silence), refilled continuously at the rate. Each
// request takes its bytes out of the bucket, which may go below zero;
// the throttle is how long the refill takes to bring it back to zero:
// debt / rate. Kafka measures the rate over 11 one-second samples and
// derives the same delay; the bucket gives the same long-run rate with
// less state and no sample edges. A principal that sends faster than
// its quota and waits out each throttle moves rate × time, plus one
// Window of bytes and its last request: a few percent above its quota
// over a minute, less over longer periods.
//
// # Charged before serving
//
// A request is charged when it is admitted, before it is served
// ([Limiter.Reserve]): it waits while its principal owes anything, then
// takes its bytes (a produce's batches; a fetch's estimate, at most one
// Window of the rate) out of the bucket at once, and corrects the charge
// with what it really moved when it answers ([Reservation.Settle]). So
// requests a principal sends in parallel are admitted one after another
// as the bucket allows, never all at once before any of them is counted.
//
// # Who waits
//
// The server answers at once and returns the throttle with the answer
// (Kafka's throttle_time_ms since KIP-219); the Go and TypeScript
// clients wait that long before their next request of that kind. A
// client that does not wait gains nothing: [Limiter.Reserve] does not
// admit a principal's request while an earlier throttle is still owed,
// so its answer comes that much later, where Kafka mutes the connection
// instead. So the throttle is in every answer, and the server delays only
// clients that ignore it.
//
// Quotas are replaced atomically by [Limiter.Set] and apply from the
// next call: a bucket's debt stays, and is paid at the new rate.
//
// # One quota for a cluster
//
// A quota is the principal's across the cluster, not per process. Each
// storage node keeps its own buckets and lets each principal through at a
// share of its quota. With every heartbeat the node reports what each
// limited principal moved through it ([Limiter.TakeUsage]) and hears
// back how many nodes share the quotas and what the other nodes moved
// ([Limiter.SetCluster]). A node the principal has not used for a few
// exchanges may move what the others leave; the only node it used has the whole quota (its bucket
// holds it there); a node it used beside others moves its share by the
// cluster's error divided among the nodes it used, (quota - total moved)
// / active nodes.
// That is an integral controller: a principal using one node gets the
// whole quota there at the next exchange; nodes that all want more
// settle where the total is the quota; a window that moved too little (a
// client stalled) is made up by the next and one that moved too much is
// paid back, so over time the total is the quota. Where Kafka's quotas
// hold per broker (a client spread over three brokers moves three times
// its quota), a principal here stays near its quota however its
// partitions are spread; until the first exchange after it starts, each
// node lets it move its whole quota, as Kafka would.
//
// # The default quota
//
// A quota set for User:* ([acl.AnyUser]) is the default, Kafka's
// <default> user entity: every user without a quota of its own has it,
// each with a bucket of its own (it caps each user, not all of them
// together). A user's own quota replaces the default whole, as Kafka's
// most specific quota entity does. Services are never limited.
//
// # Request time
//
// The Request kind caps the time a principal's requests spend being
// handled, less their waits, measured by a [Stopwatch] each request
// carries in its context ([Limiter.BeginRequest]; requests.go has the
// rules). It is held per process, as Kafka's request quota is per broker:
// it protects each process's handlers, which a principal busy on three
// processes does occupy three times.
package quota

import (
	"context"
	"fmt"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mq/strata/lib/acl"
)

// Window is how much of its rate a principal may send at once: a
// bucket holds at most rate × Window bytes.
const Window = time.Second

// Kind is the traffic a quota caps. The zero value is invalid.
type Kind uint8

const (
	// Produce counts the bytes of record batches a principal produces.
	Produce Kind = iota + 1
	// Fetch counts the bytes of record batches a principal fetches.
	Fetch
	// Request counts the nanoseconds a principal's requests spend being
	// handled (requests.go). Its quota is per process, never shared by
	// the cluster: it protects each process's handlers.
	Request
)

// String returns "produce", "fetch" or "request".
func (k Kind) String() string {
	switch k {
	case Produce:
		return "produce"
	case Fetch:
		return "fetch"
	case Request:
		return "request"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Rates are one principal's quotas: bytes per second, and the share of a
// request handler's time; 0 is unlimited.
type Rates struct {
	// ProduceBytesPerSec caps produce; 0 = unlimited.
	ProduceBytesPerSec int64
	// FetchBytesPerSec caps fetch; 0 = unlimited.
	FetchBytesPerSec int64
	// RequestPercentage caps the time the principal's requests take to
	// handle in each process, in percent of one handler's time (Kafka's
	// request_percentage: 100 is one handler's whole second each
	// second, and more than 100 is allowed); 0 = unlimited.
	RequestPercentage float64
}

// For returns the rate for kind k: bytes per second for Produce and
// Fetch, nanoseconds of handling per second for Request (the percentage
// × 10^7); 0 (unlimited) for an invalid kind.
func (r Rates) For(k Kind) int64 {
	switch k {
	case Produce:
		return r.ProduceBytesPerSec
	case Fetch:
		return r.FetchBytesPerSec
	case Request:
		return int64(r.RequestPercentage * float64(time.Second) / 100)
	}
	return 0
}

// Limiter measures principals' traffic against their quotas. The zero
// value is a Limiter with no quotas (everyone unlimited). Safe for
// concurrent use: quotas are read without a lock, and each limited
// (principal, kind) has its own bucket and mutex, so unlimited traffic
// never waits and limited principals do not wait for each other.
type Limiter struct {
	quotas  atomic.Pointer[map[acl.Principal]Rates]
	cluster atomic.Pointer[clusterView] // nil: this process alone holds the quotas
	buckets sync.Map                    // bucketKey → *bucket, only for limited pairs

	usageMu    sync.Mutex
	usageSince time.Time               // when TakeUsage last read the buckets' moved bytes
	lastUsage  map[acl.Principal]Rates // what TakeUsage last returned
}

// clusterView is this process's share of each quota shared by a
// cluster, as fractions of the quota.
type clusterView struct {
	nodes  int
	shares map[bucketKey]float64 // in [minShare(nodes), 1]; absent: 1
	idle   map[bucketKey]int     // exchanges in a row this node moved nothing of the pair
}

// idleWindows is how many exchanges in a row a node must have moved
// nothing of a principal before it counts as not used by it: one empty
// window (every request waiting on the quota) is no sign of that.
const idleWindows = 3

func prevIdle(cv *clusterView, key bucketKey) int {
	if cv == nil {
		return 0
	}
	return cv.idle[key]
}

// minShare is the least share a node keeps of a quota: enough for traffic
// that moves to it to start while the shares adjust.
func minShare(nodes int) float64 { return 1 / float64(2*nodes) }

type bucketKey struct {
	p acl.Principal
	k Kind
}

// bucket is one (principal, kind)'s token bucket, in bytes.
type bucket struct {
	mu     sync.Mutex
	tokens float64   // bytes that may go out now; negative is debt
	last   time.Time // when tokens was last brought up to date
	moved  int64     // bytes settled since TakeUsage last read them; under mu
}

// NewLimiter returns a Limiter enforcing quotas (see Set).
func NewLimiter(quotas map[acl.Principal]Rates) (*Limiter, error) {
	l := &Limiter{}
	if err := l.Set(quotas); err != nil {
		return nil, err
	}
	return l, nil
}

// Set replaces every quota with quotas (principal → rates; a principal
// not in it is unlimited), from the next call of Reserve or Settle on. A
// negative rate (or a request percentage that is not a finite number)
// fails the whole set and leaves the quotas as they were. quotas is not
// retained.
func (l *Limiter) Set(quotas map[acl.Principal]Rates) error {
	for p, r := range quotas {
		if r.ProduceBytesPerSec < 0 || r.FetchBytesPerSec < 0 || r.RequestPercentage < 0 {
			return fmt.Errorf("quota: %v has a negative rate", p)
		}
		if math.IsNaN(r.RequestPercentage) || math.IsInf(r.RequestPercentage, 0) {
			return fmt.Errorf("quota: %v has a request percentage that is not a number", p)
		}
	}
	q := maps.Clone(quotas)
	l.quotas.Store(&q)
	// Drop the buckets of pairs that became unlimited; a pair limited
	// again later starts with a full bucket.
	l.buckets.Range(func(key, _ any) bool {
		bk := key.(bucketKey)
		if effective(q, bk.p).For(bk.k) == 0 {
			l.buckets.Delete(key)
		}
		return true
	})
	return nil
}

// Quotas returns a copy of the quotas in force.
func (l *Limiter) Quotas() map[acl.Principal]Rates {
	q := l.quotas.Load()
	if q == nil {
		return map[acl.Principal]Rates{}
	}
	return maps.Clone(*q)
}

// rate is what p may move of kind k per second through this process: its
// quota, or, when the quota is shared by a cluster (SetCluster), this
// process's share of it. A Request quota is never shared: each process
// holds it whole.
func (l *Limiter) rate(p acl.Principal, k Kind) float64 {
	q := l.quotas.Load()
	if q == nil {
		return 0
	}
	total := float64(effective(*q, p).For(k))
	cv := l.cluster.Load()
	if total <= 0 || cv == nil || cv.nodes <= 1 || k == Request {
		return total
	}
	share, ok := cv.shares[bucketKey{p, k}]
	if !ok {
		share = 1 // no node moved it lately
	}
	return total * share
}

// Elsewhere is what the other nodes sharing the quotas moved for one
// principal: bytes per second of each kind in their last windows, and how
// many of them moved each kind lately (within a few windows, so that one
// window in which a busy node settled nothing does not read as the
// principal gone from it).
type Elsewhere struct {
	Rates
	ProduceNodes, FetchNodes int
}

func (e Elsewhere) nodes(k Kind) int {
	switch k {
	case Produce:
		return e.ProduceNodes
	case Fetch:
		return e.FetchNodes
	}
	return 0
}

// SetCluster shares every quota among nodes processes (storage nodes, in
// Strata), given what the others moved in the window the last TakeUsage
// measured (see "One quota for a cluster" above). For each principal and
// kind: a node that moved nothing for idleWindows exchanges may move what
// the others leave; a node
// that moved some moves its share by the cluster's error divided among
// the nodes that moved it, (quota - total) / (active nodes × quota);
// shares stay within [1/(2 nodes), 1], and a principal no node moved has
// the whole quota until one does. nodes <= 1 means this process holds the
// whole quota again. Call it after TakeUsage, once per exchange.
func (l *Limiter) SetCluster(nodes int, others map[acl.Principal]Elsewhere) {
	if nodes <= 1 {
		l.cluster.Store(nil)
		return
	}
	q := l.quotas.Load()
	l.usageMu.Lock()
	own := l.lastUsage
	l.usageMu.Unlock()
	prev := l.cluster.Load()
	next := &clusterView{nodes: nodes, shares: map[bucketKey]float64{}, idle: map[bucketKey]int{}}
	lo := minShare(nodes)
	step := func(p acl.Principal, k Kind) {
		key := bucketKey{p, k}
		if _, done := next.shares[key]; done || q == nil {
			return
		}
		total := float64(effective(*q, p).For(k))
		if total <= 0 {
			return
		}
		mine, theirs := float64(own[p].For(k)), float64(others[p].For(k))
		idle := 0
		if mine == 0 {
			idle = prevIdle(prev, key) + 1
			next.idle[key] = idle
		}
		switch {
		case idle >= idleWindows:
			// Not moved here for a while: what the others leave.
			next.shares[key] = min(max(1-theirs/total, lo), 1)
			return
		case others[p].nodes(k) == 0:
			// No other node moved it lately: the whole quota, which
			// this node's bucket holds it to (a burst over it is
			// already debt there, not to be charged twice).
			next.shares[key] = 1
			return
		}
		share := 1.0
		if prev != nil {
			if s, ok := prev.shares[key]; ok {
				share = s
			}
		}
		active := float64(others[p].nodes(k))
		if mine > 0 {
			active++
		}
		share += (total - mine - theirs) / (max(active, 1) * total)
		next.shares[key] = min(max(share, lo), 1)
	}
	for p, r := range own {
		for _, k := range []Kind{Produce, Fetch} {
			if r.For(k) > 0 {
				step(p, k)
			}
		}
	}
	for p, e := range others {
		for _, k := range []Kind{Produce, Fetch} {
			if e.For(k) > 0 || e.nodes(k) > 0 {
				step(p, k)
			}
		}
	}
	// A principal moved here lately but in no report this window keeps
	// its share and counts the idle window.
	if prev != nil {
		for key, sh := range prev.shares {
			if _, ok := next.shares[key]; !ok && prevIdle(prev, key)+1 < idleWindows {
				next.shares[key], next.idle[key] = sh, prevIdle(prev, key)+1
			}
		}
	}
	l.cluster.Store(next)
}

// TakeUsage returns, for every principal with a quota that moved bytes
// through this process since the last call, the bytes per second it moved
// of each kind, and starts counting again. The first call only starts the
// count and returns nothing.
func (l *Limiter) TakeUsage(now time.Time) map[acl.Principal]Rates {
	l.usageMu.Lock()
	defer l.usageMu.Unlock()
	since := l.usageSince
	l.usageSince = now
	out := map[acl.Principal]Rates{}
	l.buckets.Range(func(key, v any) bool {
		bk, b := key.(bucketKey), v.(*bucket)
		if bk.k == Request {
			return true // per process: nothing to share
		}
		b.mu.Lock()
		moved := b.moved
		b.moved = 0
		b.mu.Unlock()
		if moved == 0 || since.IsZero() || !now.After(since) {
			return true
		}
		r := out[bk.p]
		perSec := int64(float64(moved) / now.Sub(since).Seconds())
		switch bk.k {
		case Produce:
			r.ProduceBytesPerSec = perSec
		case Fetch:
			r.FetchBytesPerSec = perSec
		}
		out[bk.p] = r
		return true
	})
	l.lastUsage = out
	return out
}

// effective is p's quota in quotas: its own, or else the default (User:*)
// for a user.
func effective(quotas map[acl.Principal]Rates, p acl.Principal) Rates {
	if r, ok := quotas[p]; ok {
		return r
	}
	if p.Type == acl.TypeUser {
		return quotas[acl.AnyUser]
	}
	return Rates{}
}

func (l *Limiter) bucket(p acl.Principal, k Kind, rate float64, now time.Time) *bucket {
	key := bucketKey{p, k}
	if b, ok := l.buckets.Load(key); ok {
		return b.(*bucket)
	}
	b, _ := l.buckets.LoadOrStore(key, &bucket{tokens: rate * Window.Seconds(), last: now})
	return b.(*bucket)
}

// refill brings b up to now at rate, never above one Window of rate
// (so a lowered quota also lowers what may go out at once). The caller
// holds b.mu. A clock going backwards adds nothing.
func (b *bucket) refill(rate float64, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens += rate * d.Seconds()
		b.last = now
	}
	b.tokens = math.Min(b.tokens, rate*Window.Seconds())
}

// owed is how long the refill takes to clear b's debt. The caller holds
// b.mu.
func (b *bucket) owed(rate float64) time.Duration {
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(math.Ceil(-b.tokens / rate * float64(time.Second)))
}

// Reservation is what [Limiter.Reserve] took from a principal's quota for
// one request; Settle corrects it with what the request moved. The zero
// Reservation (a principal without a quota) settles to no throttle.
type Reservation struct {
	l     *Limiter
	p     acl.Principal
	k     Kind
	taken int64
}

// Reserve admits a request of kind k from p that expects to move bytes:
// it waits, in steps that end with ctx, while p owes anything of an
// earlier charge, then takes bytes from p's bucket at once (below zero
// if need be: the next request waits that out). It returns ctx's error if
// ctx ends first. A principal without a quota is admitted at once. now is
// the clock (time.Now outside tests).
func (l *Limiter) Reserve(ctx context.Context, p acl.Principal, k Kind, bytes int64, now func() time.Time) (Reservation, error) {
	bytes = max(bytes, 0)
	for {
		rate := l.rate(p, k)
		if rate <= 0 {
			return Reservation{}, nil
		}
		t := now()
		b := l.bucket(p, k, rate, t)
		b.mu.Lock()
		b.refill(rate, t)
		owed := b.owed(rate)
		if owed == 0 {
			b.tokens -= float64(bytes)
			b.mu.Unlock()
			return Reservation{l: l, p: p, k: k, taken: bytes}, nil
		}
		b.mu.Unlock()
		// Another request's settlement may give back part of the debt:
		// look again at least every Window.
		if err := Delay(ctx, min(owed, Window)); err != nil {
			return Reservation{}, err
		}
	}
}

// Settle corrects r's charge to used bytes (nanoseconds for Request;
// giving back what was taken and not used, or taking the rest) and
// returns how long the principal must wait before its next request of
// that kind: the request's throttle_time_ms. Negative used counts as 0.
// A Request charge never leaves more than one Window of debt, so its
// throttle is at most Window, as Kafka bounds a request quota's throttle
// by one quota window (ClientRequestQuotaManager's maxThrottleTimeMs): a
// single request that takes longer than that is not paid for over the
// following minutes.
func (r Reservation) Settle(used int64, now time.Time) time.Duration {
	if r.l == nil {
		return 0
	}
	rate := r.l.rate(r.p, r.k)
	if rate <= 0 {
		return 0
	}
	b := r.l.bucket(r.p, r.k, rate, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(rate, now)
	b.tokens += float64(r.taken - max(used, 0))
	b.refill(rate, now) // a refund never fills past one Window
	if r.k == Request {
		b.tokens = max(b.tokens, -rate*Window.Seconds())
		return b.owed(rate)
	}
	b.moved += max(used, 0)
	return b.owed(rate)
}

// Capacity is the most p may move of kind k at once: one Window of its
// rate, 0 without a quota. A fetch reserves at most this much.
func (l *Limiter) Capacity(p acl.Principal, k Kind) int64 {
	return int64(l.rate(p, k) * Window.Seconds())
}

// Delay waits d, or until ctx ends, whichever is first, and returns
// ctx's error in the second case. d <= 0 returns nil at once.
//
// The wait is not counted as handling time: it pauses the request's
// Stopwatch, if ctx has one.
func Delay(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	defer Pause(ctx)()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
