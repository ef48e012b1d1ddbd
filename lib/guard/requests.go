package guard

import (
	"context"
	"time"
)

// BeginRequest admits the request of ctx under its principal's request
// quota (Kafka's request_percentage; lib/quota, requests.go): it waits
// while the principal owes handling time of earlier requests, so a client
// that ignores throttle_time_ms gains nothing, and fails with ctx's error
// when the request ends while held back. It returns the context to handle
// the request in, whose waits must pause its stopwatch (quota.Pause), and
// done, to call once the request has been answered: done charges the
// handling time and returns the throttle for the answer (0 within the
// quota, at most one second). Services and callers without a principal
// are never limited: they get ctx back and a done that returns 0.
// lib/serve calls it for every Connect request, services/kafka for every
// Kafka request.
func (g *Guard) BeginRequest(ctx context.Context) (context.Context, func() time.Duration, error) {
	ctx, h, err := g.quotas.BeginRequest(ctx, Principal(ctx), g.now)
	if err != nil {
		return ctx, nil, err
	}
	return ctx, h.Finish, nil
}
