package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/serve"
)

// Setup returns the serve.SetupFunc of strata-tiering: it starts the
// instance (Start) with the process's HTTP client, otelconnect, logger and
// guard,
// registers its readiness and shutdown, and serves TieringService.
func Setup(cfg *Config) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		t, err := Start(ctx, cfg, Options{
			HTTPClient:    p.HTTPClient(),
			ClientOptions: []connect.ClientOption{p.ConnectOption()},
			Logger:        p.Logger(),
			Guard:         p.Guard(),
		})
		if err != nil {
			return nil, err
		}
		p.OnShutdown("tiering", func(context.Context) error { return t.Close() })
		p.AddReadinessCheck("tiering", t.Ready)
		mux := http.NewServeMux()
		mux.Handle(t.Handler(p.HandlerOption()))
		return mux, nil
	}
}
