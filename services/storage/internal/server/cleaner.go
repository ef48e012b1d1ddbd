package server

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// The log cleaner of a storage node: every replica of a topic whose
// cleanup.policy includes compact is cleaned (partlog.Log.Clean) by this
// node on its own, leader or follower, as Kafka's LogCleaner cleans every
// log of a broker. One goroutine cleans one log at a time, the dirtiest
// first; when a round finds nothing to clean it sleeps CleanerBackoff
// (log.cleaner.backoff.ms). The passes' reads and writes share one rate
// limit, CleanerIOMaxBytesPerSecond (log.cleaner.io.max.bytes.per.second).
//
// Replicas of tiered topics on a node that tiers are not cleaned: their
// sealed segments are uploaded by base offset, and the tier's compactor
// compacts what it holds.

// DefaultCleanerBackoff is log.cleaner.backoff.ms's default.
const DefaultCleanerBackoff = 15 * time.Second

// cleanerState is what the cleaner last saw of each replica, for metrics.
type cleanerState struct {
	mu   sync.Mutex
	last map[tpKey]cleanerSeen
}

type cleanerSeen struct {
	ratio    float64   // dirty ratio before the last pass looked at it
	lastPass time.Time // when a pass last cleaned it; zero if never
}

// cleanConfig reads the cleaner's topic configs by their Kafka names.
func cleanConfig(m map[string]string) partlog.CleanConfig {
	return partlog.CleanConfig{
		DeleteRetention:        topicconfig.Duration(m, topicconfig.DeleteRetentionMs, topicconfig.DefaultDeleteRetentionMs),
		MinCompactionLag:       topicconfig.Duration(m, topicconfig.MinCompactionLagMs, 0),
		MaxCompactionLag:       topicconfig.Duration(m, topicconfig.MaxCompactionLagMs, topicconfig.DefaultMaxCompactionLagMs),
		MinCleanableDirtyRatio: topicconfig.Float64(m, topicconfig.MinCleanableDirtyRatio, topicconfig.DefaultMinCleanableDirtyRatio),
	}
}

// cleanerThrottle returns the Throttle of the passes: a token bucket of
// bytesPerSecond (none when <= 0), waited on in pieces no larger than
// its burst.
func cleanerThrottle(bytesPerSecond int64) func(ctx context.Context, n int) error {
	if bytesPerSecond <= 0 {
		return nil
	}
	burst := int(min(bytesPerSecond, math.MaxInt32))
	lim := rate.NewLimiter(rate.Limit(bytesPerSecond), burst)
	return func(ctx context.Context, n int) error {
		for n > 0 {
			k := min(n, burst)
			if err := lim.WaitN(ctx, k); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
}

type cleanJob struct {
	k  tpKey
	r  *replica.Replica
	cc partlog.CleanConfig
}

// compactedReplicas lists the replicas the cleaner looks after.
func (n *Node) compactedReplicas() []cleanJob {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []cleanJob
	for k, h := range n.replicas {
		if compact, _ := topicconfig.Cleanup(h.configs); !compact {
			continue
		}
		out = append(out, cleanJob{k: k, r: h.r, cc: cleanConfig(h.configs)})
	}
	return out
}

func (n *Node) cleanerLoop(ctx context.Context) {
	ctx = untraced(ctx)
	throttle := cleanerThrottle(n.cfg.CleanerIOMaxBytesPerSecond)
	for {
		if !n.cleanerRound(ctx, throttle) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(n.cfg.CleanerBackoff):
			}
		} else if ctx.Err() != nil {
			return
		}
	}
}

// cleanerRound offers every compacted replica one pass, dirtiest first,
// and reports whether any pass cleaned something.
func (n *Node) cleanerRound(ctx context.Context, throttle func(context.Context, int) error) bool {
	jobs := n.compactedReplicas()
	ratios := make(map[tpKey]float64, len(jobs))
	var live []cleanJob
	for _, j := range jobs {
		if n.tier != nil {
			if _, tiered := n.tieredTopic(j.k.topic); tiered {
				continue
			}
		}
		ratios[j.k] = j.r.Log().DirtyRatio(j.cc)
		live = append(live, j)
		// The counters exist at 0 from the first round that sees a
		// compacted topic, so a rate over them has a series before the
		// first pass or error (as produce_held_total does).
		cleanedBytes.Add(ctx, 0, topicAttr(j.k.topic)...)
		cleanerErrors.Add(ctx, 0, topicAttr(j.k.topic)...)
	}
	slices.SortFunc(live, func(a, b cleanJob) int {
		switch ra, rb := ratios[a.k], ratios[b.k]; {
		case ra > rb:
			return -1
		case ra < rb:
			return 1
		}
		return 0
	})
	n.cleaner.mu.Lock()
	for k := range n.cleaner.last {
		if _, ok := ratios[k]; !ok {
			delete(n.cleaner.last, k) // no longer hosted or compacted
		}
	}
	for k, r := range ratios {
		s := n.cleaner.last[k]
		s.ratio = r
		n.cleaner.last[k] = s
	}
	n.cleaner.mu.Unlock()
	cleaned := false
	for _, j := range live {
		if ctx.Err() != nil {
			return cleaned
		}
		j.cc.Throttle = throttle
		res, err := j.r.Log().Clean(ctx, j.cc)
		switch {
		case err != nil && (errors.Is(err, partlog.ErrClosed) || ctx.Err() != nil):
			continue
		case err != nil:
			cleanerErrors.Add(ctx, 1, topicAttr(j.k.topic)...)
			n.logger.Warn("log cleaner: pass failed", "topic", j.k.topic, "partition", j.k.partition, "err", err)
			continue
		case !res.Cleaned:
			continue
		}
		cleaned = true
		cleanedBytes.Add(ctx, res.BytesRead, topicAttr(j.k.topic)...)
		n.cleaner.mu.Lock()
		n.cleaner.last[j.k] = cleanerSeen{ratio: j.r.Log().DirtyRatio(j.cc), lastPass: time.Now()}
		n.cleaner.mu.Unlock()
		n.logger.Debug("log cleaner: pass", "topic", j.k.topic, "partition", j.k.partition,
			"dirty_ratio", res.DirtyRatio, "cleaned_to", res.CleanedTo, "records_removed", res.RecordsRemoved,
			"bytes_read", res.BytesRead, "bytes_written", res.BytesWritten)
	}
	return cleaned
}

// DirtyRatio is the dirty ratio the cleaner last saw for a hosted replica
// of a compacted topic, and false for any other.
func (n *Node) DirtyRatio(topic string, partition int32) (float64, bool) {
	n.cleaner.mu.Lock()
	defer n.cleaner.mu.Unlock()
	s, ok := n.cleaner.last[tpKey{topic, partition}]
	return s.ratio, ok
}
