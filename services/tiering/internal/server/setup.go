package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
	"github.com/strata-mq/strata/services/tiering/internal/embeds3"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// Setup returns the serve.SetupFunc of strata-tiering: it starts the
// embedded S3 server when asked, opens the bucket, follows topic metadata,
// runs retention, and serves TieringService.
func Setup(cfg *Config) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		logger := p.Logger()
		endpoint, pathStyle, create := cfg.S3Endpoint, cfg.S3PathStyle, cfg.S3CreateBucket
		access, secret := cfg.S3AccessKey, cfg.S3SecretKey
		if cfg.EmbeddedS3Listen != "" {
			srv, err := embeds3.Start(cfg.EmbeddedS3Listen, cfg.EmbeddedS3Dir)
			if err != nil {
				return nil, err
			}
			p.OnShutdown("embedded s3", srv.Close)
			logger.Info("embedded S3 server listening", "url", srv.URL(), "dir", cfg.EmbeddedS3Dir)
			if endpoint == "" {
				endpoint, pathStyle, create = srv.URL(), true, true
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
		t := newTopics(cfg, p.HTTPClient(), []connect.ClientOption{p.ConnectOption()}, logger)
		svc := NewService(store, up, rd, t, logger)

		runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{}, 3)
		go func() { t.run(runCtx); done <- struct{}{} }()
		ret := &retention{store: store, topics: t, reader: rd, grace: cfg.OrphanGrace, logger: logger, now: time.Now,
			retired: newRetired(cfg.OrphanGrace, time.Now)}
		go func() { everyInterval(runCtx, cfg.RetentionInterval, ret.round); done <- struct{}{} }()
		if cfg.CompactionInterval > 0 {
			comp := &compaction{store: store, topics: t, reader: rd, tombstoneRetention: cfg.TombstoneRetention, logger: logger,
				compactor: &compactor.Compactor{Store: store, MinObjectBytes: cfg.CompactionMinObjectBytes,
					MaxObjectBytes: cfg.CompactionMaxObjectBytes, SpoolDir: cfg.SpoolDir, Logger: logger, Retire: ret.retired.add}}
			go func() { everyInterval(runCtx, cfg.CompactionInterval, comp.round); done <- struct{}{} }()
		} else {
			done <- struct{}{}
		}
		p.OnShutdown("tiering loops", func(context.Context) error {
			stop()
			<-done
			<-done
			<-done
			return nil
		})
		mux := http.NewServeMux()
		mux.Handle(tieringv1connect.NewTieringServiceHandler(svc, connect.WithHandlerOptions(p.ConnectOption())))
		return mux, nil
	}
}
