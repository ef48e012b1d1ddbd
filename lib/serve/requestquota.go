package serve

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/quota"
)

// ThrottleHeader is the response header (on an error, the error's
// metadata) in which every Connect answer of a process says how long its
// caller should wait, in milliseconds, before its next request: over its
// request quota (Kafka's request_percentage). It is set only when that is
// more than 0. An answer that has a throttle_time_ms field (Produce,
// Fetch) carries the same number there too, the longer of it and the
// byte quota's.
const ThrottleHeader = "Strata-Throttle-Time-Ms"

// requestTime is the request quota on the process's Connect handlers and
// clients, one interceptor for both (lib/quota's requests.go):
//
//   - A unary call a handler serves is admitted under its principal's
//     request quota (held back while the principal owes, as the byte
//     quotas hold it), handled with a stopwatch in its context, charged
//     with the time the stopwatch ran, and answered with the throttle
//     (ThrottleHeader, and throttle_time_ms where the answer has it).
//     Errors are charged too, as Kafka charges an error response.
//   - A call the process makes to another service pauses the stopwatch of
//     the request it serves, if any, for as long as the call takes: the
//     time is the other service's to charge, as its caller's principal
//     (the gateway's JSON proxy waiting for a storage node's long poll
//     is waiting, not handling).
//   - A stream is held back at its start while its principal owes, and
//     not charged: it lives as long as its caller likes, mostly waiting,
//     and the streams one user may hold open are bounded apart
//     (concurrency.go).
//
// Services and callers without a principal are never limited (the
// guard's BeginRequest). A nil guard lets everything through.
type requestTime struct{ g *guard.Guard }

// WrapUnary charges handlers and pauses for clients.
func (r requestTime) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			defer quota.Pause(ctx)()
			return next(ctx, req)
		}
		if r.g == nil {
			return next(ctx, req)
		}
		ctx, done, err := r.g.BeginRequest(ctx)
		if err != nil {
			return nil, heldBack(err)
		}
		resp, err := next(ctx, req)
		if ms := throttleMillis(done()); ms > 0 {
			setThrottle(resp, err, ms)
		}
		return resp, err
	}
}

// WrapStreamingClient leaves the process's own streams alone: none is
// opened while a request waits for it.
func (r requestTime) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler holds a stream back at its start while its
// principal owes.
func (r requestTime) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if r.g != nil {
			_, done, err := r.g.BeginRequest(ctx)
			if err != nil {
				return heldBack(err)
			}
			done()
		}
		return next(ctx, conn)
	}
}

// heldBack is the answer to a request whose deadline passed, or whose
// caller left, while it was held back for its principal's request quota.
func heldBack(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.New(connect.CodeDeadlineExceeded, commonv1.Reason_REASON_REQUEST_TIMED_OUT,
			"request deadline passed while held back for its principal's request quota")
	}
	return apierr.New(connect.CodeCanceled, commonv1.Reason_REASON_UNSPECIFIED,
		"request canceled while held back for its principal's request quota")
}

// throttleMillis rounds d up to whole milliseconds, so a client that waits
// what it is told never comes back early, capped at int32.
func throttleMillis(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(min((d+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
}

// setThrottle puts ms in the answer: its throttle_time_ms field when it
// has one and that holds less, and ThrottleHeader (in the error's
// metadata for an error).
func setThrottle(resp connect.AnyResponse, err error, ms int32) {
	v := strconv.Itoa(int(ms))
	if err != nil {
		if ce := new(connect.Error); errors.As(err, &ce) {
			ce.Meta().Set(ThrottleHeader, v)
		}
		return
	}
	if resp == nil {
		return
	}
	resp.Header().Set(ThrottleHeader, v)
	m, ok := resp.Any().(proto.Message)
	if !ok {
		return
	}
	pm := m.ProtoReflect()
	fd := pm.Descriptor().Fields().ByName("throttle_time_ms")
	if fd == nil || fd.Kind() != protoreflect.Int32Kind || fd.Cardinality() == protoreflect.Repeated {
		return
	}
	if int32(pm.Get(fd).Int()) < ms {
		pm.Set(fd, protoreflect.ValueOfInt32(ms))
	}
}
