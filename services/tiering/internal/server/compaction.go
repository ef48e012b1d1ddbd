package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
)

// compaction runs the compactor over every partition in the bucket, every
// --compaction-interval, beside retention. A topic whose cleanup.policy
// contains "compact" gets key compaction, with delete.retention.ms (or
// --tombstone-retention) as the tombstone retention; every other topic,
// and every topic when there is no metadata source, is only merged.
type compaction struct {
	store     *manifest.Store
	topics    *topics
	compactor *compactor.Compactor
	reader    interface {
		SetManifest(manifest.Partition, *tieringv1.Manifest)
	}
	tombstoneRetention time.Duration
	logger             *slog.Logger
}

// round compacts every partition once.
func (c *compaction) round(ctx context.Context) {
	eachPartition(ctx, c.store, c.logger, "compaction", c.partition)
}

func (c *compaction) partition(ctx context.Context, p manifest.Partition) error {
	opts := compactor.Options{TombstoneRetention: c.tombstoneRetention}
	if ti := c.topics.current(p.Topic); ti != nil && ti.ID == p.TopicID {
		opts = compactionOptions(ti.Configs, c.tombstoneRetention)
	}
	res, err := c.compactor.Partition(ctx, p, opts)
	if res.Runs > 0 && res.Manifest != nil {
		c.reader.SetManifest(p, res.Manifest)
	}
	return err
}

// retired holds objects compaction replaced, until the grace period after
// the replacement has passed: readers holding an older manifest may still
// read them. Retention's orphan collection skips them until then, and
// deletes them after (they are no longer named). Safe for concurrent use.
// Lost on restart; the orphan collection then deletes them at once.
type retired struct {
	mu    sync.Mutex
	until map[string]time.Time
	grace time.Duration
	now   func() time.Time
}

func newRetired(grace time.Duration, now func() time.Time) *retired {
	return &retired{until: map[string]time.Time{}, grace: grace, now: now}
}

func (r *retired) add(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now().Add(r.grace)
	for _, k := range keys {
		r.until[k] = t
	}
}

// held reports whether key must not be deleted yet; expired keys are
// forgotten.
func (r *retired) held(key string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.until[key]
	if ok && !r.now().Before(t) {
		delete(r.until, key)
		return false
	}
	return ok
}

// compactionOptions reads a topic's compaction settings from its configs:
// key compaction when cleanup.policy lists compact, and delete.retention.ms
// (saturated, see topicconfig.Millis) for tombstones, or tombstones when
// the topic's configs do not carry the key.
func compactionOptions(cfg map[string]string, tombstones time.Duration) compactor.Options {
	compact, _ := topicconfig.Cleanup(cfg)
	opts := compactor.Options{Compact: compact, TombstoneRetention: tombstones}
	if ms := topicconfig.Int64(cfg, topicconfig.DeleteRetentionMs, -1); ms >= 0 {
		opts.TombstoneRetention = topicconfig.Millis(ms)
	}
	return opts
}
