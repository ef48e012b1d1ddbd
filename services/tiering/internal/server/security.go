package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/guard"
)

// serviceOnly refuses every TieringService call that does not come from a
// Strata service (guard.RequireService, any role): storage nodes upload,
// read and list tiered segments, and operators see the tier through them;
// no user calls tiering directly, whatever its ACLs. A guard that does not
// enforce (no --require-auth) allows every call. As a handler interceptor
// it covers every RPC, those added later included.
type serviceOnly struct{ g *guard.Guard }

// WrapUnary checks a unary call before it runs.
func (s serviceOnly) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, err := s.g.RequireService(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient leaves calls tiering makes alone.
func (serviceOnly) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler checks a streaming call (UploadSegment) before it
// reads anything.
func (s serviceOnly) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if _, err := s.g.RequireService(ctx); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
