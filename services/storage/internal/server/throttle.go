package server

import (
	"context"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/metaview"
)

// moveThrottle limits the replication traffic of partition moves on this
// node to the controller's throttle (NodeStatus
// replication_throttle_bytes_per_second), as Kafka's
// leader.replication.throttled.rate and follower.replication.throttled.rate
// do: as leader, the bytes it sends to replicas a move is adding; as a
// follower, the bytes it fetches for the replicas it is being added as.
// Only adding replicas outside the ISR are throttled: once one is in sync
// it counts toward the high watermark, and slowing it would slow producers.
// Each direction has its own budget of rate bytes per second for the whole
// node. Safe for concurrent use.
type moveThrottle struct {
	self int32

	mu     sync.Mutex
	rate   int64
	adding map[tpKey][]int32 // adding replicas outside the ISR, by partition
	out    *rate.Limiter     // leader side; replaced when the rate changes
	in     *rate.Limiter     // follower side; replaced when the rate changes
}

// minChunk is the smallest fetch a throttled replica makes, so a very low
// throttle still moves whole batches.
const minChunk = 64 << 10

func newMoveThrottle(self int32) *moveThrottle {
	return &moveThrottle{self: self, adding: map[tpKey][]int32{},
		out: rate.NewLimiter(rate.Inf, 0), in: rate.NewLimiter(rate.Inf, 0)}
}

// update applies a metadata view: the throttle from this node's status and
// the adding replicas outside the ISR of every partition of the topics ch
// names (all of them when ch.all).
func (t *moveThrottle) update(v *metaview.View, ch viewChange) {
	adding := map[tpKey][]int32{}
	for _, tm := range ch.topicsOf(v) {
		for _, p := range tm.GetPartitions() {
			var out []int32
			for _, r := range p.GetAddingReplicas() {
				if !slices.Contains(p.GetIsr(), r) {
					out = append(out, r)
				}
			}
			if len(out) > 0 {
				adding[tpKey{tm.GetName(), p.GetPartition()}] = out
			}
		}
	}
	r := v.Nodes[t.self].GetReplicationThrottleBytesPerSecond()
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch.all {
		t.adding = adding
	} else {
		for k := range t.adding {
			if ch.topics[k.topic] {
				delete(t.adding, k)
			}
		}
		for k, rs := range adding {
			t.adding[k] = rs
		}
	}
	if r == t.rate {
		return
	}
	t.rate = r
	// New limiters, full: a new throttle starts with one second's worth.
	if r <= 0 {
		t.out, t.in = rate.NewLimiter(rate.Inf, 0), rate.NewLimiter(rate.Inf, 0)
		return
	}
	burst := int(max(r, minChunk))
	t.out, t.in = rate.NewLimiter(rate.Limit(r), burst), rate.NewLimiter(rate.Limit(r), burst)
}

// limiters returns the current outbound and inbound limiters.
func (t *moveThrottle) limiters() (out, in *rate.Limiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out, t.in
}

// throttled reports whether replica node of k is an adding replica outside
// the ISR while a throttle is set, and the largest fetch it may make.
func (t *moveThrottle) throttled(k tpKey, node int32) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rate <= 0 || !slices.Contains(t.adding[k], node) {
		return false, 0
	}
	return true, int(max(t.rate, minChunk))
}

// wait takes n bytes from l's budget, in pieces no larger than its burst.
func wait(ctx context.Context, l *rate.Limiter, n int) error {
	for n > 0 {
		b := l.Burst()
		if l.Limit() == rate.Inf || b <= 0 {
			return nil
		}
		chunk := min(n, b)
		if err := l.WaitN(ctx, chunk); err != nil {
			return err
		}
		n -= chunk
	}
	return nil
}

// capReplicate lowers a Replicate partition's byte limit for a throttled
// follower.
func (t *moveThrottle) capReplicate(k tpKey, follower int32, limit int) int {
	if ok, chunk := t.throttled(k, follower); ok {
		return min(limit, chunk)
	}
	return limit
}

// delayReplicate holds a leader's Replicate answer until the bytes it
// sends to throttled followers fit the budget.
func (t *moveThrottle) delayReplicate(ctx context.Context, follower int32, res *storagev1.ReplicateResponse) {
	n := 0
	for _, p := range res.GetPartitions() {
		if ok, _ := t.throttled(tpKey{p.GetTopic(), p.GetPartition()}, follower); ok {
			n += len(p.GetRecords())
		}
	}
	if n > 0 {
		out, _ := t.limiters()
		_ = wait(ctx, out, n) // a canceled request answers at once
	}
}

// follower wraps the leader's client of this node's fetch session with
// one leader node: each partition of a fetch for which this node is an
// adding replica outside the ISR, while a throttle is set, asks for at most
// the throttle's chunk (and the whole fetch too when every partition in it
// is throttled), and the answer is held until the bytes of those
// partitions fit the node's inbound budget. Other partitions in the same
// fetch are not slowed.
func (t *moveThrottle) follower(c storagev1connect.StorageServiceClient) storagev1connect.StorageServiceClient {
	if c == nil {
		return nil
	}
	return &throttledClient{StorageServiceClient: c, t: t}
}

type throttledClient struct {
	storagev1connect.StorageServiceClient
	t *moveThrottle
}

func (c *throttledClient) Replicate(ctx context.Context, req *connect.Request[storagev1.ReplicateRequest]) (*connect.Response[storagev1.ReplicateResponse], error) {
	ps := req.Msg.GetPartitions()
	any, all, chunk := false, len(ps) > 0, 0
	for _, p := range ps {
		ok, ch := c.t.throttled(tpKey{p.GetTopic(), p.GetPartition()}, c.t.self)
		if ok {
			p.MaxBytes = int32(ch)
			any, chunk = true, ch
		}
		all = all && ok
	}
	// A session's request names only the partitions that changed, and
	// its answer may carry the others too: the whole fetch is capped only
	// when the request is a full one.
	if all && req.Msg.GetSessionId() == 0 {
		req.Msg.MaxBytes = int32(chunk)
	}
	resp, err := c.StorageServiceClient.Replicate(ctx, req)
	if err != nil || (!any && req.Msg.GetSessionId() == 0) {
		return resp, err
	}
	n := 0
	for _, p := range resp.Msg.GetPartitions() { // by partition: a session's answer is not in the request's order
		if ok, _ := c.t.throttled(tpKey{p.GetTopic(), p.GetPartition()}, c.t.self); ok {
			n += len(p.GetRecords())
		}
	}
	_, in := c.t.limiters()
	if err := wait(ctx, in, n); err != nil {
		return nil, err
	}
	return resp, nil
}
