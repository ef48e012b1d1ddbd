package serve

import (
	"context"
	"sync"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
)

// Bounds on the calls one principal may hold open at once in one process.
// A stream (WatchCluster, any streaming RPC) and a long poll (a unary call
// whose request asks to wait, max_wait_ms > 0: Fetch) each hold a
// goroutine, buffers and often a metadata watcher for as long as the
// caller likes, so without a bound one user could open enough of them to
// exhaust a node. They apply to authenticated users only: Strata's own
// services (replication's long polls, the metadata stream) are trusted,
// and on a cluster without authentication every caller is the same
// anonymous one, which a per-principal bound would turn into a bound on
// the whole cluster.
const (
	// MaxStreamsPerPrincipal bounds one user's open streams per process.
	MaxStreamsPerPrincipal = 64
	// MaxLongPollsPerPrincipal bounds one user's waiting long polls per
	// process: one per consumer and node at a time, so room for a
	// thousand consumers under one name.
	MaxLongPollsPerPrincipal = 1024
)

// callLimits counts the open streams and waiting long polls of each
// principal. Safe for concurrent use.
type callLimits struct {
	mu                  sync.Mutex
	streams, polls      map[string]int
	maxStreams, maxPoll int
}

func newCallLimits(maxStreams, maxPolls int) *callLimits {
	return &callLimits{streams: map[string]int{}, polls: map[string]int{}, maxStreams: maxStreams, maxPoll: maxPolls}
}

// acquire takes a slot of counts for principal, or reports that it has
// max already.
func (l *callLimits) acquire(counts map[string]int, max int, principal string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if counts[principal] >= max {
		return false
	}
	counts[principal]++
	return true
}

func (l *callLimits) release(counts map[string]int, principal string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if counts[principal]--; counts[principal] <= 0 {
		delete(counts, principal)
	}
}

// limitedPrincipal is the principal whose calls are counted: an
// authenticated user; "" for services, anonymous callers and calls with no
// authentication.
func limitedPrincipal(ctx context.Context) string {
	info, ok := authn.FromContext(ctx)
	if !ok || info.Method == authn.MethodAnonymous || info.Principal.IsZero() || info.Principal.IsService() {
		return ""
	}
	return info.Principal.String()
}

// waiter is a request that may ask the server to wait (a long poll).
type waiter interface{ GetMaxWaitMs() int32 }

// tooMany is the refusal of a call past a bound.
func tooMany(principal, what string, max int) error {
	return apierr.New(connect.CodeResourceExhausted, commonv1.Reason_REASON_UNSPECIFIED,
		"%s has %d %s open on this node already, the most one principal may; close some and retry", principal, max, what)
}

// WrapUnary bounds the waiting long polls of each principal.
func (l *callLimits) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		w, ok := req.Any().(waiter)
		if l == nil || !ok || w.GetMaxWaitMs() <= 0 {
			return next(ctx, req)
		}
		p := limitedPrincipal(ctx)
		if p == "" {
			return next(ctx, req)
		}
		if !l.acquire(l.polls, l.maxPoll, p) {
			return nil, tooMany(p, "long polls (calls waiting for data)", l.maxPoll)
		}
		defer l.release(l.polls, p)
		return next(ctx, req)
	}
}

// WrapStreamingClient leaves the process's own outgoing streams alone.
func (l *callLimits) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler bounds the open streams of each principal.
func (l *callLimits) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		p := limitedPrincipal(ctx)
		if l == nil || p == "" {
			return next(ctx, conn)
		}
		if !l.acquire(l.streams, l.maxStreams, p) {
			return tooMany(p, "streams", l.maxStreams)
		}
		defer l.release(l.streams, p)
		return next(ctx, conn)
	}
}
