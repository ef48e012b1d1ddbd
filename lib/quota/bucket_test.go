package quota

import (
	"time"

	"github.com/strata-mq/strata/lib/acl"
)

// The bucket's arithmetic without admission, for the tests that simulate
// clients on a fake clock: the services charge through Reserve and
// Settle, and no longer call these.

// Record counts bytes of kind k that p sent or received at now, and
// returns how long p must wait before its next request of that kind so
// that its rate comes back to its quota: 0 while it is within its quota,
// always 0 when it has none. Negative bytes count as 0. now comes from
// the caller (a fake clock).
func (l *Limiter) Record(p acl.Principal, k Kind, bytes int64, now time.Time) time.Duration {
	rate := l.rate(p, k)
	if rate <= 0 {
		return 0
	}
	b := l.bucket(p, k, rate, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(rate, now)
	b.tokens -= float64(max(bytes, 0))
	b.moved += max(bytes, 0)
	return b.owed(rate)
}

// Pending returns how much of p's earlier throttles for kind k is still
// owed at now, without recording anything: 0 for a principal that
// waited its throttle out or has no quota. Reserve does not admit a
// request while this is positive.
func (l *Limiter) Pending(p acl.Principal, k Kind, now time.Time) time.Duration {
	rate := l.rate(p, k)
	if rate <= 0 {
		return 0
	}
	v, ok := l.buckets.Load(bucketKey{p, k})
	if !ok {
		return 0
	}
	b := v.(*bucket)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(rate, now)
	return b.owed(rate)
}
