package metaview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
)

// Defaults of WatchConfig.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// NotANode is the WatchConfig.NodeID of a watcher that is not a storage
// node (the gateway, tools).
const NotANode int32 = -1

// WatchConfig says where and how to watch the controller's metadata.
type WatchConfig struct {
	// Controllers are the controllers' clients, tried in turn: after a
	// failed or ended stream the watcher moves to the next one. Required;
	// Watch returns at once without any.
	Controllers []controllerv1connect.ControllerServiceClient
	// Names label Controllers in logs (their URLs), index for index.
	// Optional.
	Names []string
	// NodeID is sent as the request's node_id: a storage node's own id, or
	// NotANode for any other watcher. The zero value is node 0.
	NodeID int32
	// Resume, when true, reopens a stream with from_version set to the
	// version last applied, so the controller resumes with the deltas
	// after it (or sends a fresh snapshot when that history is gone).
	// False (the default) asks every stream for a fresh snapshot, which
	// replaces whatever the cache held; until it arrives the cache keeps
	// serving the last view it had.
	Resume bool
	// MinBackoff is the wait before the first reconnect after a failure;
	// it grows 2x per consecutive failure up to MaxBackoff, each wait
	// jittered by ±50%, and starts over once a stream delivers a message
	// that applies. Zero means DefaultMinBackoff.
	MinBackoff time.Duration
	// MaxBackoff caps the growth of the reconnect wait (before jitter).
	// Zero means DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Notify, when not nil, is called after every message a stream
	// delivers and the cache accepts, in stream order on Watch's
	// goroutine, with the view in force after it: a new view, or the same
	// one again for a progress notice or a stale delta. It must not block
	// for long: the stream waits for it.
	Notify func(*View)
	// Logger receives one line per broken stream. Nil means slog.Default().
	Logger *slog.Logger
}

// Watch feeds c from the controllers' WatchMetadata streams until ctx
// ends, then returns.
func Watch(ctx context.Context, c *Cache, cfg WatchConfig) {
	if len(cfg.Controllers) == 0 {
		return
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	minB, maxB := cfg.MinBackoff, cfg.MaxBackoff
	if minB <= 0 {
		minB = DefaultMinBackoff
	}
	if maxB <= 0 {
		maxB = DefaultMaxBackoff
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     minB,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         max(minB, maxB),
	}
	b.Reset()
	for i := 0; ; i = (i + 1) % len(cfg.Controllers) {
		delivered, err := watchOnce(ctx, c, cfg, cfg.Controllers[i])
		if ctx.Err() != nil {
			return
		}
		if delivered {
			b.Reset()
		}
		wait := b.NextBackOff()
		name := fmt.Sprintf("#%d", i)
		if i < len(cfg.Names) {
			name = cfg.Names[i]
		}
		var version int64
		if v := c.Load(); v != nil {
			version = v.Version
		}
		logger.Warn("metadata stream broke; reconnecting", slog.String("controller", name), slog.String("err", err.Error()),
			slog.Int64("version", version), slog.Duration("backoff", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// errStreamEnded reports a stream the controller closed without an error;
// the watch must go on, so it is treated like a failure.
var errStreamEnded = errors.New("stream ended by the controller")

// watchOnce runs one stream to its end and reports whether it delivered a
// message that applied, and why it ended.
func watchOnce(ctx context.Context, c *Cache, cfg WatchConfig, client controllerv1connect.ControllerServiceClient) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &controllerv1.WatchMetadataRequest{NodeId: cfg.NodeID}
	if v := c.Load(); cfg.Resume && v != nil {
		req.FromVersion = v.Version
	}
	stream, err := client.WatchMetadata(ctx, connect.NewRequest(req))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	delivered := false
	for stream.Receive() {
		if err := c.Apply(stream.Msg()); err != nil {
			return delivered, err
		}
		delivered = true
		if cfg.Notify != nil {
			cfg.Notify(c.Load())
		}
	}
	if err := stream.Err(); err != nil {
		return delivered, err
	}
	return delivered, errStreamEnded
}
