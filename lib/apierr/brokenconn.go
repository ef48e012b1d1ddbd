package apierr

import (
	"context"
	"errors"
	"syscall"

	"connectrpc.com/connect"
)

// BrokenConnection corrects the code of a client call's error whose
// connection to the server broke: connect-go reports a write or read that
// failed with EPIPE or ECONNRESET as CANCELED (on a server that means the
// caller left), so a call written onto a pooled connection to a peer that
// had just died looked like a call its own caller had cancelled, and
// retry loops that move past UNAVAILABLE gave up. While ctx, the caller's
// context, is still live the server went away instead, and the error is
// UNAVAILABLE, wrapping the same cause. Any other error is returned as it
// is.
func BrokenConnection(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || connect.CodeOf(err) != connect.CodeCanceled {
		return err
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		return err // an answer from the server, or the caller's own cancel
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, ce.Unwrap())
}

// BrokenConnectionInterceptor applies [BrokenConnection] to every call a
// client makes: unary calls and the sends and receives of streams. On a
// handler it does nothing. Every Strata process's clients and the Go
// client take it.
type BrokenConnectionInterceptor struct{}

// WrapUnary corrects a client call's error.
func (BrokenConnectionInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if req.Spec().IsClient {
			err = BrokenConnection(ctx, err)
		}
		return resp, err
	}
}

// WrapStreamingClient corrects the errors of a stream's sends and
// receives.
func (BrokenConnectionInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return brokenConnStream{StreamingClientConn: next(ctx, spec), ctx: ctx}
	}
}

// WrapStreamingHandler leaves handlers alone.
func (BrokenConnectionInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type brokenConnStream struct {
	connect.StreamingClientConn
	ctx context.Context
}

func (s brokenConnStream) Send(msg any) error {
	return BrokenConnection(s.ctx, s.StreamingClientConn.Send(msg))
}

func (s brokenConnStream) Receive(msg any) error {
	return BrokenConnection(s.ctx, s.StreamingClientConn.Receive(msg))
}

func (s brokenConnStream) CloseRequest() error {
	return BrokenConnection(s.ctx, s.StreamingClientConn.CloseRequest())
}

func (s brokenConnStream) CloseResponse() error {
	return BrokenConnection(s.ctx, s.StreamingClientConn.CloseResponse())
}
