package server

import (
	"context"
	"log/slog"
	"strings"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
)

// retention applies each topic's total retention (retention.ms,
// retention.bytes, for a topic whose cleanup.policy includes delete: see
// topicconfig.Retention) to its tiered segments and deletes objects no manifest
// names once they are older than the grace period (left by uploads that
// failed between the object and the manifest write).
//
// Expiry is two-phase so the manifest never names a missing object: the
// manifest first marks expired entries DELETING (they stop being served
// and the tiered log start moves past them), then their objects are
// deleted, then the entries are dropped. A crash in between is finished by
// the next round.
type retention struct {
	store  *manifest.Store
	topics *topics
	reader interface {
		SetManifest(manifest.Partition, *tieringv1.Manifest)
	}
	grace time.Duration
	// retired: objects compaction replaced, kept for the grace period
	// after the replacement (nil: none).
	retired *retired
	logger  *slog.Logger
	now     func() time.Time
}

// round applies retention to every partition once.
func (r *retention) round(ctx context.Context) {
	eachPartition(ctx, r.store, r.logger, "retention", r.partition)
}

func (r *retention) partition(ctx context.Context, p manifest.Partition) error {
	now := r.now().UnixMilli()
	var retMs, retBytes int64 = -1, -1
	if ti := r.topics.current(p.Topic); ti != nil && ti.ID == p.TopicID {
		retMs, retBytes = topicconfig.Retention(ti.Configs)
	}
	m, err := r.store.Update(ctx, p, func(m *tieringv1.Manifest) error {
		active := manifest.Active(m)
		total := manifest.SizeBytes(m)
		changed := false
		for _, e := range active {
			byTime := retMs >= 0 && e.GetMaxTimestampMs() >= 0 && now-e.GetMaxTimestampMs() > retMs
			bySize := retBytes >= 0 && total > retBytes
			deleted := e.GetLastOffset() < m.GetDeleteRecordsOffset() // DeleteRecords
			if !byTime && !bySize && !deleted {
				break
			}
			e.State = tieringv1.SegmentState_SEGMENT_STATE_DELETING
			total -= e.GetSizeBytes()
			changed = true
		}
		if !changed {
			return manifest.ErrUnchanged
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.reader.SetManifest(p, m)
	named := map[string]bool{}
	var doomed []*tieringv1.SegmentEntry
	for _, e := range m.GetSegments() {
		if e.GetState() == tieringv1.SegmentState_SEGMENT_STATE_DELETING {
			doomed = append(doomed, e)
			continue
		}
		for _, k := range manifest.ObjectKeys(e) {
			named[k] = true
		}
	}
	if len(doomed) > 0 {
		gone := map[string]bool{}
		for _, e := range doomed {
			ok := true
			for _, k := range manifest.ObjectKeys(e) {
				if err := r.store.Bucket.Delete(ctx, k); err != nil {
					ok = false
				}
			}
			if ok {
				gone[e.GetSegmentId()] = true
			}
		}
		m, err = r.store.Update(ctx, p, func(m *tieringv1.Manifest) error {
			kept := m.Segments[:0]
			for _, e := range m.GetSegments() {
				if !(e.GetState() == tieringv1.SegmentState_SEGMENT_STATE_DELETING && gone[e.GetSegmentId()]) {
					kept = append(kept, e)
				}
			}
			m.Segments = kept
			return nil
		})
		if err != nil {
			return err
		}
		r.reader.SetManifest(p, m)
		r.logger.Info("tiered segments expired", "topic", p.Topic, "partition", p.Partition, "segments", len(gone), "log_start_offset", m.GetLogStartOffset())
	}
	// Objects no manifest entry names, older than the grace period.
	for _, e := range m.GetSegments() {
		for _, k := range manifest.ObjectKeys(e) {
			named[k] = true
		}
	}
	dir := manifest.Dir(r.store.Prefix, p) + "/"
	var orphans []string
	err = r.store.Bucket.List(ctx, dir, func(o objstore.ObjectInfo) error {
		name := strings.TrimPrefix(o.Key, dir)
		if name == manifest.FileName || strings.Contains(name, "/") || named[o.Key] || r.retired.held(o.Key) {
			return nil
		}
		if !o.LastModified.IsZero() && r.now().Sub(o.LastModified) > r.grace {
			orphans = append(orphans, o.Key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range orphans {
		if err := r.store.Bucket.Delete(ctx, k); err == nil {
			r.logger.Info("deleted unreferenced object", "key", k)
		}
	}
	return nil
}
