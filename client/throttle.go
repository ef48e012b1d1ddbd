package client

import (
	"context"
	"time"
)

// Quotas work by throttling, as Kafka's do: a storage node that finds the
// caller's principal over its produce or fetch byte rate still serves the
// request, and says in the answer (throttle_time_ms) how long the caller
// must wait before its next request to that node. The client honours it
// per node: a producer's partitions and a consumer's fetches led by that
// node wait, those led by other nodes go on. A client that did not wait
// would find its next answer held back by the node for as long.

// throttle records that the node at addr asked for ms milliseconds of quiet
// before the next request. A longer wait already asked for stands.
func (c *cluster) throttle(addr string, ms int32) {
	if ms <= 0 {
		return
	}
	until := time.Now().Add(time.Duration(ms) * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if until.After(c.throttled[addr]) {
		c.throttled[addr] = until
	}
}

// throttledFor is how long requests to addr must still wait; 0 when none.
func (c *cluster) throttledFor(addr string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.throttled[addr]
	if !ok {
		return 0
	}
	d := time.Until(until)
	if d <= 0 {
		delete(c.throttled, addr)
		return 0
	}
	return d
}

// waitThrottle waits until the node at addr may be called again, or ctx
// ends (then ctx's error). It returns nil at once when addr is not
// throttled.
func (c *cluster) waitThrottle(ctx context.Context, addr string) error {
	for {
		d := c.throttledFor(addr)
		if d <= 0 {
			return nil
		}
		// Another request's answer may have asked for longer meanwhile:
		// look again after the wait.
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}
