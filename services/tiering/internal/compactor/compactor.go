// Package compactor rewrites a partition's tiered objects in the bucket:
//
//   - merge: a run of adjacent small objects (each below MinObjectBytes,
//     together at most MaxObjectBytes, offsets contiguous) becomes one
//     object holding the same batch bytes, concatenated exactly as stored,
//     with rebuilt indexes;
//   - key compaction (cleanup.policy=compact): a run of adjacent objects
//     (together at most MaxObjectBytes) is rewritten keeping only the
//     newest record of each key in the partition's tier, and dropping
//     tombstones whose batch is older than the tombstone retention.
//
// The merged object's aborted transaction index is its inputs' indexes
// concatenated, when every input's is known (else it is unknown too): both
// ways copy control batches byte for byte and never drop a batch, so every
// abort marker an input's index names is in the merged object, at the same
// offset, and the entries stay in marker order (the inputs are adjacent).
// The concatenation is checked against the merged object's markers
// (segment.CheckTxnIndex) before it is stored.
//
// The new objects are written under a fresh segment id before the manifest
// names them; one conditional manifest write then replaces the run's
// entries with the new entry, only if the run is still in the manifest as
// it was read (else the new objects are deleted and the run is tried again
// next round). Every manifest version therefore covers the same offsets
// contiguously. The replaced objects are handed to Retire, never deleted
// here: a reader holding the previous manifest may still be reading them.
package compactor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/segment"
)

// Defaults.
const (
	DefaultMinObjectBytes     = 8 << 20
	DefaultMaxObjectBytes     = 256 << 20
	DefaultTombstoneRetention = 24 * time.Hour
)

// ErrRunChanged: the manifest no longer holds the run as it was read (a
// concurrent upload trimmed nothing, but retention or another compactor
// moved it). Nothing was changed; the next round tries again.
var ErrRunChanged = errors.New("compactor: the run changed in the manifest meanwhile")

// Compactor compacts partitions. Safe for concurrent use on different
// partitions; two compactors on one partition are safe too (the manifest
// write is conditional) but waste work.
type Compactor struct {
	Store          *manifest.Store
	MinObjectBytes int64 // objects below this are merged; default DefaultMinObjectBytes
	MaxObjectBytes int64 // bound on a run's total size; default DefaultMaxObjectBytes
	SpoolDir       string
	Logger         *slog.Logger
	Now            func() time.Time
	// Retire receives the keys of objects the manifest stopped naming;
	// they are deleted later (retention's orphan collection after the
	// grace period). nil: they are left for the orphan collection alone.
	Retire func(keys []string)
	// beforeSwap, a test hook, runs inside the manifest update function
	// (after the manifest was read, before the conditional write).
	beforeSwap func(attempt int)
}

// Options are one partition's compaction settings.
type Options struct {
	// Compact enables key compaction (cleanup.policy contains compact).
	Compact bool
	// TombstoneRetention is how long a tombstone is kept after its batch's
	// max timestamp (delete.retention.ms).
	TombstoneRetention time.Duration
}

// Result reports one partition's compaction.
type Result struct {
	Runs           int   // runs replaced in the manifest
	ObjectsRemoved int   // entries replaced
	RecordsDropped int64 // records removed by key compaction
	Manifest       *tieringv1.Manifest
}

func (c *Compactor) defaults() (minB, maxB int64, logger *slog.Logger, now func() time.Time) {
	minB, maxB, logger, now = c.MinObjectBytes, c.MaxObjectBytes, c.Logger, c.Now
	if minB <= 0 {
		minB = DefaultMinObjectBytes
	}
	if maxB <= 0 {
		maxB = DefaultMaxObjectBytes
	}
	if logger == nil {
		logger = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return
}

// Partition compacts one partition: every eligible run, one manifest write
// each. It stops at the first error; what was swapped before stays.
func (c *Compactor) Partition(ctx context.Context, p manifest.Partition, opts Options) (Result, error) {
	minB, maxB, _, _ := c.defaults()
	var res Result
	m, _, err := c.Store.Load(ctx, p)
	if err != nil {
		return res, err
	}
	res.Manifest = m
	active := manifest.Active(m)
	var latest map[string]int64
	if opts.Compact {
		if latest, err = c.keyMap(ctx, active); err != nil {
			return res, err
		}
	}
	for _, run := range runs(active, minB, maxB, opts.Compact) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		m2, dropped, swapped, err := c.compactRun(ctx, p, run, opts, latest)
		if err != nil {
			return res, err
		}
		if swapped {
			res.Runs++
			res.ObjectsRemoved += len(run)
			res.RecordsDropped += dropped
			res.Manifest = m2
		}
	}
	return res, nil
}

// runs groups the active entries into candidate runs: adjacent entries with
// contiguous offsets, together at most maxB bytes. For a merge, every entry
// is below minB and a run has two entries at least; for key compaction any
// entry qualifies and a run of one is rewritten only if it drops records.
func runs(active []*tieringv1.SegmentEntry, minB, maxB int64, compact bool) [][]*tieringv1.SegmentEntry {
	var out [][]*tieringv1.SegmentEntry
	var cur []*tieringv1.SegmentEntry
	var size int64
	flush := func() {
		if len(cur) >= 2 || (compact && len(cur) == 1) {
			out = append(out, cur)
		}
		cur, size = nil, 0
	}
	for _, e := range active {
		eligible := compact || e.GetSizeBytes() < minB
		if !eligible {
			flush()
			continue
		}
		if len(cur) > 0 && (cur[len(cur)-1].GetLastOffset()+1 != e.GetBaseOffset() || size+e.GetSizeBytes() > maxB) {
			flush()
		}
		cur = append(cur, e)
		size += e.GetSizeBytes()
	}
	flush()
	return out
}

// readObject reads a whole .log object.
func (c *Compactor) readObject(ctx context.Context, e *tieringv1.SegmentEntry) ([]byte, error) {
	data, err := objstore.ReadAll(ctx, c.Store.Bucket, e.GetObjectKey(), 0, -1)
	if err != nil {
		return nil, fmt.Errorf("compactor: reading %s: %w", e.GetObjectKey(), err)
	}
	if int64(len(data)) != e.GetSizeBytes() {
		return nil, fmt.Errorf("compactor: %s has %d bytes, manifest says %d", e.GetObjectKey(), len(data), e.GetSizeBytes())
	}
	return data, nil
}

// compactable reports whether key compaction may look into a batch:
// control and transactional batches are copied as they are and their
// records neither survive nor shadow others' (an aborted transaction's
// record must not hide a committed one).
func compactable(h recordbatch.Header) bool { return !h.Control() && !h.Transactional() }

// keyMap returns the offset of the newest record of each key in the tier.
func (c *Compactor) keyMap(ctx context.Context, active []*tieringv1.SegmentEntry) (map[string]int64, error) {
	latest := map[string]int64{}
	for _, e := range active {
		data, err := c.readObject(ctx, e)
		if err != nil {
			return nil, err
		}
		it := recordbatch.NewIter(data, false)
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			if !compactable(h) {
				continue
			}
			batch, err := recordbatch.Decode(b)
			if err != nil {
				return nil, fmt.Errorf("compactor: %s at offset %d: %w", e.GetObjectKey(), h.BaseOffset, err)
			}
			for _, r := range batch.Records {
				if r.Key != nil {
					latest[string(r.Key)] = r.Offset
				}
			}
		}
		if it.Err() != nil {
			return nil, fmt.Errorf("compactor: %s: %w", e.GetObjectKey(), it.Err())
		}
	}
	return latest, nil
}

// filter writes the batches of one object to w: unchanged batches byte for
// byte, batches that lose records rebuilt (recordbatch.Rebuild). It returns how
// many records it dropped.
func filter(w io.Writer, data []byte, opts Options, latest map[string]int64, nowMs int64) (int64, error) {
	var dropped int64
	it := recordbatch.NewIter(data, true)
	for {
		h, b, ok := it.Next()
		if !ok {
			break
		}
		out := b
		if opts.Compact && compactable(h) {
			batch, err := recordbatch.Decode(b)
			if err != nil {
				return 0, err
			}
			expired := nowMs-h.MaxTimestamp > opts.TombstoneRetention.Milliseconds()
			kept := batch.Records[:0:0]
			for _, r := range batch.Records {
				if r.Key != nil {
					if newest, ok := latest[string(r.Key)]; ok && newest > r.Offset {
						continue // a newer record of the key is in the tier
					}
					if r.Value == nil && expired {
						continue // tombstone past its retention
					}
				}
				kept = append(kept, r)
			}
			if len(kept) < len(batch.Records) {
				dropped += int64(len(batch.Records) - len(kept))
				out = recordbatch.Rebuild(h, kept)
			}
		}
		if _, err := w.Write(out); err != nil {
			return 0, err
		}
	}
	if it.Err() != nil {
		return 0, it.Err()
	}
	return dropped, nil
}

// compactRun writes the run's replacement and swaps it into the manifest.
// swapped is false (and err nil) when there was nothing worth doing.
func (c *Compactor) compactRun(ctx context.Context, p manifest.Partition, run []*tieringv1.SegmentEntry, opts Options, latest map[string]int64) (*tieringv1.Manifest, int64, bool, error) {
	_, _, logger, now := c.defaults()
	f, err := os.CreateTemp(c.SpoolDir, "strata-compact-*.log")
	if err != nil {
		return nil, 0, false, fmt.Errorf("compactor: spool: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	var dropped int64
	compacted := false
	for _, e := range run {
		compacted = compacted || e.GetCompacted()
		data, err := c.readObject(ctx, e)
		if err != nil {
			return nil, 0, false, err
		}
		if !opts.Compact {
			if _, err := f.Write(data); err != nil {
				return nil, 0, false, err
			}
			continue
		}
		n, err := filter(f, data, opts, latest, now().UnixMilli())
		if err != nil {
			return nil, 0, false, fmt.Errorf("compactor: %s: %w", e.GetObjectKey(), err)
		}
		dropped += n
	}
	if len(run) == 1 && dropped == 0 {
		return nil, 0, false, nil // already compact
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, false, err
	}
	first, last := run[0], run[len(run)-1]
	info, err := segment.Scan(f, first.GetBaseOffset())
	if err != nil {
		return nil, 0, false, fmt.Errorf("compactor: rewritten run %d..%d: %w", first.GetBaseOffset(), last.GetLastOffset(), err)
	}
	if info.StartPos != 0 || info.BaseOffset != first.GetBaseOffset() || info.LastOffset != last.GetLastOffset() {
		return nil, 0, false, fmt.Errorf("compactor: rewritten run holds %d..%d, want %d..%d", info.BaseOffset, info.LastOffset, first.GetBaseOffset(), last.GetLastOffset())
	}

	txnKnown, txnIndex, err := c.mergedTxnIndex(ctx, run, info)
	if err != nil {
		return nil, 0, false, err
	}

	segID := uuid.NewString()
	logKey, idxKey, timeKey := manifest.SegmentKeys(c.Store.Prefix, p, info.BaseOffset, segID)
	var txnKey string
	if len(txnIndex) > 0 {
		txnKey = manifest.TxnIndexKey(c.Store.Prefix, p, info.BaseOffset, segID)
	}
	b := c.Store.Bucket
	cleanup := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, k := range []string{logKey, idxKey, timeKey, txnKey} {
			if k == "" {
				continue
			}
			if err := b.Delete(dctx, k); err != nil {
				logger.Warn("compactor: deleting unused object; retention removes it later", "key", k, "err", err)
			}
		}
	}
	err = b.Upload(ctx, logKey, io.NewSectionReader(f, 0, info.Size), info.Size)
	if err == nil {
		err = b.Upload(ctx, idxKey, bytes.NewReader(info.OffsetIndex), int64(len(info.OffsetIndex)))
	}
	if err == nil {
		err = b.Upload(ctx, timeKey, bytes.NewReader(info.TimeIndex), int64(len(info.TimeIndex)))
	}
	if err == nil && txnKey != "" {
		err = b.Upload(ctx, txnKey, bytes.NewReader(txnIndex), int64(len(txnIndex)))
	}
	if err != nil {
		cleanup()
		return nil, 0, false, fmt.Errorf("compactor: uploading: %w", err)
	}

	entry := &tieringv1.SegmentEntry{
		SegmentId: segID, ObjectKey: logKey, BaseOffset: info.BaseOffset, LastOffset: info.LastOffset,
		SizeBytes: info.Size, MinTimestampMs: info.MinTS, MaxTimestampMs: info.MaxTS,
		OffsetIndexKey: idxKey, TimeIndexKey: timeKey, State: tieringv1.SegmentState_SEGMENT_STATE_ACTIVE,
		UploadedAtMs: now().UnixMilli(), Compacted: compacted || dropped > 0,
		TxnIndexKnown: txnKnown, TxnIndexKey: txnKey,
	}
	for _, e := range run {
		entry.UploadLeaderEpoch = max(entry.UploadLeaderEpoch, e.GetUploadLeaderEpoch())
		for _, ep := range e.GetLeaderEpochs() {
			if n := len(entry.LeaderEpochs); n > 0 && entry.LeaderEpochs[n-1].GetEpoch() == ep.GetEpoch() {
				continue
			}
			entry.LeaderEpochs = append(entry.LeaderEpochs, &tieringv1.EpochStart{Epoch: ep.GetEpoch(), StartOffset: ep.GetStartOffset()})
		}
	}
	ids := map[string]bool{}
	for _, e := range run {
		ids[e.GetSegmentId()] = true
	}
	attempt := 0
	m, err := c.Store.Update(ctx, p, func(m *tieringv1.Manifest) error {
		if c.beforeSwap != nil {
			c.beforeSwap(attempt)
		}
		attempt++
		// The run must still be in the manifest, active, in order.
		active := manifest.Active(m)
		i := 0
		for i < len(active) && active[i].GetSegmentId() != run[0].GetSegmentId() {
			i++
		}
		if i+len(run) > len(active) {
			return ErrRunChanged
		}
		for j, e := range run {
			a := active[i+j]
			if a.GetSegmentId() != e.GetSegmentId() || a.GetBaseOffset() != e.GetBaseOffset() || a.GetLastOffset() != e.GetLastOffset() {
				return ErrRunChanged
			}
		}
		kept := m.Segments[:0]
		for _, e := range m.GetSegments() {
			if !ids[e.GetSegmentId()] {
				kept = append(kept, e)
			}
		}
		m.Segments = append(kept, entry)
		return nil
	})
	if err != nil {
		// Safe to delete only when the manifest certainly does not name the
		// new objects: the run changed (no write was made) or every write
		// lost its condition. Otherwise (a store error, maybe after the
		// write landed) the orphan collection decides later.
		if errors.Is(err, ErrRunChanged) || errors.Is(err, manifest.ErrConflict) {
			cleanup()
		}
		return nil, 0, false, err
	}
	var retired []string
	for _, e := range run {
		retired = append(retired, manifest.ObjectKeys(e)...)
	}
	if c.Retire != nil {
		c.Retire(retired)
	}
	logger.Info("tiered objects compacted", "topic", p.Topic, "partition", p.Partition, "base_offset", entry.BaseOffset,
		"last_offset", entry.LastOffset, "objects", len(run), "bytes", entry.SizeBytes, "records_dropped", dropped,
		"manifest_version", m.GetVersion())
	return m, dropped, true, nil
}

// mergedTxnIndex returns the aborted transaction index of the object that
// replaces run, whose rewritten bytes info describes: unknown when an
// input's is, else the inputs' entries in order, checked against the
// object's abort markers (see the package comment).
func (c *Compactor) mergedTxnIndex(ctx context.Context, run []*tieringv1.SegmentEntry, info segment.Info) (known bool, index []byte, _ error) {
	for _, e := range run {
		if !e.GetTxnIndexKnown() {
			return false, nil, nil
		}
		if e.GetTxnIndexKey() == "" {
			continue
		}
		b, err := objstore.ReadAll(ctx, c.Store.Bucket, e.GetTxnIndexKey(), 0, -1)
		if err != nil {
			return false, nil, fmt.Errorf("compactor: reading %s: %w", e.GetTxnIndexKey(), err)
		}
		index = append(index, b...)
	}
	first, last := run[0], run[len(run)-1]
	if _, err := segment.CheckTxnIndex(index, first.GetBaseOffset(), last.GetLastOffset()+1, info); err != nil {
		return false, nil, fmt.Errorf("compactor: merged transaction index of %d..%d: %w", first.GetBaseOffset(), last.GetLastOffset(), err)
	}
	return true, index, nil
}
