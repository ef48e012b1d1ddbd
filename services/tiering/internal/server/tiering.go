package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
	"github.com/strata-mq/strata/services/tiering/internal/embeds3"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// Options are what a Tiering takes from the process that runs it.
type Options struct {
	// HTTPClient reaches the controllers or the gateway for topic
	// metadata. strata-tiering gives the process's, which presents its
	// certificate (mutual TLS) when TLS is on. Required.
	HTTPClient *http.Client
	// ClientOptions instrument those calls. Default none.
	ClientOptions []connect.ClientOption
	// Logger is the tiering logger. Default slog.Default().
	Logger *slog.Logger
	// Guard admits only Strata services to TieringService (security.go).
	// strata-tiering gives the process's (lib/serve). Default a guard that
	// does not enforce: every call allowed.
	Guard *guard.Guard
}

// Tiering is one tiering instance: the embedded S3 server when configured,
// the bucket, the topic metadata it follows, the retention and compaction
// loops, and TieringService. Safe for concurrent use.
type Tiering struct {
	cfg     *Config
	logger  *slog.Logger
	s3      *embeds3.Server // nil without --embedded-s3-listen
	service *Service
	guard   *guard.Guard

	stop     context.CancelFunc
	loops    sync.WaitGroup
	closing  atomic.Bool
	once     sync.Once
	closeErr error
}

// Start builds a tiering instance from a validated cfg: it starts the
// embedded S3 server when asked, opens the bucket (creating it when
// configured), and starts following topic metadata and the retention and
// compaction loops, which run until Close. A failed Start leaves nothing
// running.
func Start(ctx context.Context, cfg *Config, opts Options) (_ *Tiering, err error) {
	if opts.HTTPClient == nil {
		return nil, errors.New("tiering: Options.HTTPClient is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := &Tiering{cfg: cfg, logger: logger, guard: opts.Guard}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.guard == nil {
		if t.guard, err = guard.New(ctx, guard.Config{Logger: logger}); err != nil {
			return nil, fmt.Errorf("tiering: %w", err)
		}
	}
	endpoint, pathStyle, create := cfg.S3Endpoint, cfg.S3PathStyle, cfg.S3CreateBucket
	access, secret := cfg.S3AccessKey, cfg.S3SecretKey
	if cfg.EmbeddedS3Listen != "" {
		t.s3, err = embeds3.Start(cfg.EmbeddedS3Listen, cfg.EmbeddedS3Dir)
		if err != nil {
			return nil, err
		}
		logger.Info("embedded S3 server listening", "url", t.s3.URL(), "dir", cfg.EmbeddedS3Dir)
		if endpoint == "" {
			endpoint, pathStyle, create = t.s3.URL(), true, true
			if access == "" {
				access, secret = "strata", "strata"
			}
		}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	bucket, err := objstore.OpenS3(octx, objstore.S3Config{
		Endpoint: endpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket, AccessKey: access, SecretKey: secret,
		PathStyle: pathStyle, CreateBucket: create,
	})
	if err != nil {
		return nil, fmt.Errorf("tiering: %w", err)
	}
	if cfg.SpoolDir != "" {
		if err := os.MkdirAll(cfg.SpoolDir, 0o755); err != nil {
			return nil, fmt.Errorf("tiering: spool dir: %w", err)
		}
	}
	var store *manifest.Store
	if cfg.FaultUploadDelay > 0 {
		fb := objstore.NewFaulty(bucket)
		fb.AddFault(objstore.Fault{Op: objstore.OpUpload, Key: func(k string) bool { return strings.HasSuffix(k, ".log") },
			Delay: cfg.FaultUploadDelay, Count: cfg.FaultUploadCount})
		logger.Warn("fault injection: segment .log uploads are delayed", "delay", cfg.FaultUploadDelay, "count", cfg.FaultUploadCount)
		store = &manifest.Store{Bucket: fb, Prefix: cfg.S3Prefix}
	} else {
		store = &manifest.Store{Bucket: bucket, Prefix: cfg.S3Prefix}
	}
	rd := reader.New(reader.Config{Store: store, CacheBytes: cfg.CacheBytes})
	up := &uploader.Uploader{Store: store, SpoolDir: cfg.SpoolDir, Logger: logger}
	topics := newTopics(cfg, opts.HTTPClient, opts.ClientOptions, logger)
	t.service = NewService(store, up, rd, topics, logger)

	// The loops outlive ctx (which may be a start-up context) and stop on
	// Close.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t.stop = stop
	t.loops.Go(func() { topics.run(runCtx) })
	ret := &retention{store: store, topics: topics, reader: rd, grace: cfg.OrphanGrace, logger: logger, now: time.Now,
		retired: newRetired(cfg.OrphanGrace, time.Now)}
	retentionEvery := cfg.RetentionInterval
	if retentionEvery <= 0 {
		retentionEvery = time.Minute // --retention-interval's default
	}
	t.loops.Go(func() { everyInterval(runCtx, retentionEvery, ret.round) })
	if cfg.CompactionInterval > 0 {
		comp := &compaction{store: store, topics: topics, reader: rd, tombstoneRetention: cfg.TombstoneRetention, logger: logger,
			compactor: &compactor.Compactor{Store: store, MinObjectBytes: cfg.CompactionMinObjectBytes,
				MaxObjectBytes: cfg.CompactionMaxObjectBytes, SpoolDir: cfg.SpoolDir, Logger: logger, Retire: ret.retired.add}}
		t.loops.Go(func() { everyInterval(runCtx, cfg.CompactionInterval, comp.round) })
	}
	return t, nil
}

// Handler returns the TieringService path and handler. Every call must
// come from a Strata service (security.go); the check runs inside opts'
// interceptors, so tracing sees refusals too.
func (t *Tiering) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(rules.Interceptor(), serviceOnly{t.guard}))
	return tieringv1connect.NewTieringServiceHandler(t.service, opts...)
}

// Ready is the readiness check: nil until Close begins. Start has already
// reached the bucket; a call the bucket cannot answer fails on its own.
func (t *Tiering) Ready(context.Context) error {
	if t.closing.Load() {
		return errors.New("tiering: closing")
	}
	return nil
}

// Close stops the loops and waits for them, then stops the embedded S3
// server, whose error it returns. Safe to call twice; later calls return
// the first call's error.
func (t *Tiering) Close() error {
	t.once.Do(func() {
		t.closing.Store(true)
		if t.stop != nil {
			t.stop()
		}
		t.loops.Wait()
		if t.s3 != nil {
			ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ShutdownTimeout())
			defer cancel()
			t.closeErr = t.s3.Close(ctx)
		}
	})
	return t.closeErr
}
