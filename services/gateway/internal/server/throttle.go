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
// (lib/quota): it holds a request while the caller still owes an earlier
// throttle, serves it, records its bytes and answers the throttle time.

// holdOwed waits out what the caller still owes of an earlier throttle of
// kind (a caller that honours throttle_time_ms owes nothing), or until
// ctx ends, which answers the request with ctx's error.
func (g *Gateway) holdOwed(ctx context.Context, kind quota.Kind) error {
	if err := quota.Delay(ctx, g.guard.Owed(ctx, kind)); err != nil {
		return ctxError(ctx)
	}
	return nil
}

// throttleMs records bytes of kind for the caller and returns the
// throttle_time_ms of the answer: the longer of the caller's own throttle
// and upstream's (the storage nodes' throttle of the gateway, in ms), so a
// caller also backs off when the gateway as a whole is over a quota. The
// caller's throttle is rounded up, so a client that waits it out owes
// nothing at its next request.
func (g *Gateway) throttleMs(ctx context.Context, kind quota.Kind, bytes int64, upstream int32) int32 {
	d := g.guard.Throttle(ctx, kind, bytes)
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return max(int32(min(ms, math.MaxInt32)), upstream)
}
