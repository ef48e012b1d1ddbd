package server

import (
	"context"
	"math"
	"time"

	"github.com/strata-mq/strata/lib/quota"
)

// Quotas on the JSON proxy. The gateway calls the storage nodes under its
// own service identity, so a storage node measures the gateway, not the
// caller: the gateway measures the caller itself, as a storage node does
// (lib/quota). It charges a request before serving it (held back while
// the caller still owes an earlier throttle), settles the charge with the
// bytes the request moved, and answers the throttle time.

// charge is one request's reservation against its caller's quota.
type charge struct {
	g       *Gateway
	r       quota.Reservation
	settled bool
}

// reserve admits a request of kind that expects to move about bytes: it
// waits out what the caller still owes of an earlier throttle of kind (a
// caller that honours throttle_time_ms owes nothing), then charges bytes,
// or fails with ctx's error when the request ends first. The caller
// defers release and answers with throttleMs.
func (g *Gateway) reserve(ctx context.Context, kind quota.Kind, bytes int64) (*charge, error) {
	r, err := g.guard.Reserve(ctx, kind, bytes)
	if err != nil {
		return nil, ctxError(ctx)
	}
	return &charge{g: g, r: r}, nil
}

// throttleMs settles the charge with the bytes the request moved and
// returns the throttle_time_ms of the answer: the longer of the caller's
// own throttle and upstream's (the storage nodes' throttle of the gateway,
// in ms), so a caller also backs off when the gateway as a whole is over
// a quota. The caller's throttle is rounded up, so a client that waits it
// out owes nothing at its next request.
func (c *charge) throttleMs(bytes int64, upstream int32) int32 {
	c.settled = true
	d := c.g.guard.Settle(c.r, bytes)
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return max(int32(min(ms, math.MaxInt32)), upstream)
}

// release gives the whole charge back when the request failed before
// throttleMs settled it: a refused request moved nothing.
func (c *charge) release() {
	if !c.settled {
		c.settled = true
		c.g.guard.Settle(c.r, 0)
	}
}
