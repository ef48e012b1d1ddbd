package metacache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
)

// Defaults of WatchConfig.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// WatchConfig says where and how to watch the controller's metadata.
type WatchConfig struct {
	// Controllers are the controllers' clients, tried in turn: after a
	// failed or ended stream the watcher moves to the next one. Required.
	Controllers []controllerv1connect.ControllerServiceClient
	// Names label Controllers in logs (their URLs), index for index.
	// Optional.
	Names []string
	// MinBackoff is the wait before the first reconnect after a failure;
	// it doubles per consecutive failure up to MaxBackoff, with up to 50%
	// jitter, and starts over once a stream delivers a snapshot.
	// Zero means DefaultMinBackoff.
	MinBackoff time.Duration
	// MaxBackoff caps the reconnect wait. Zero means DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Logger receives one line per broken stream. Nil means slog.Default().
	Logger *slog.Logger
}

// Watch feeds c from the controllers' WatchMetadata streams until ctx ends.
// Every stream is opened with from_version 0, so each (re)connect starts
// with a fresh snapshot that replaces whatever the cache held: simpler than
// resuming, and always right when the new stream comes from another
// controller. Until that snapshot arrives the cache keeps serving the last
// state it had. Watch returns when ctx is done.
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
	if maxB < minB {
		maxB = minB
	}
	backoff := minB
	for i := 0; ; i = (i + 1) % len(cfg.Controllers) {
		gotSnapshot, err := watchOnce(ctx, c, cfg.Controllers[i])
		if ctx.Err() != nil {
			return
		}
		if gotSnapshot {
			backoff = minB
		}
		name := fmt.Sprintf("#%d", i)
		if i < len(cfg.Names) {
			name = cfg.Names[i]
		}
		logger.Warn("metadata stream broke; reconnecting",
			slog.String("controller", name), slog.String("err", err.Error()), slog.Duration("backoff", backoff))
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxB)
	}
}

// errStreamEnded reports a stream the controller closed without an error;
// the watch must go on, so it is treated like a failure.
var errStreamEnded = errors.New("stream ended by the controller")

// watchOnce runs one stream to its end and reports whether it delivered a
// snapshot, and why it ended.
func watchOnce(ctx context.Context, c *Cache, client controllerv1connect.ControllerServiceClient) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.WatchMetadata(ctx, connect.NewRequest(&controllerv1.WatchMetadataRequest{NodeId: -1}))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	gotSnapshot := false
	for stream.Receive() {
		msg := stream.Msg()
		if err := c.Apply(msg); err != nil {
			return gotSnapshot, err
		}
		if msg.GetSnapshot() != nil {
			gotSnapshot = true
		}
	}
	if err := stream.Err(); err != nil {
		return gotSnapshot, err
	}
	return gotSnapshot, errStreamEnded
}
