package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/strata-mq/strata/services/tiering/internal/manifest"
)

// everyInterval calls round every interval, the first time one interval
// after the start, until ctx ends.
func everyInterval(ctx context.Context, interval time.Duration, round func(context.Context)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		round(ctx)
	}
}

// eachPartition calls fn for every partition that has a manifest in the
// bucket, in the store's order, until ctx ends. A failed listing or
// partition is logged under job's name and left to the next round.
func eachPartition(ctx context.Context, store *manifest.Store, logger *slog.Logger, job string, fn func(context.Context, manifest.Partition) error) {
	parts, err := store.Partitions(ctx, "")
	if err != nil {
		logger.Warn(job+": listing manifests", "err", err)
		return
	}
	for _, p := range parts {
		if ctx.Err() != nil {
			return
		}
		if err := fn(ctx, p); err != nil {
			logger.Warn(job+"; tried again next round", "topic", p.Topic, "partition", p.Partition, "err", err)
		}
	}
}
