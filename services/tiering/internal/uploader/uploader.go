// Package uploader copies one sealed segment into the bucket and names it in
// the partition's manifest: spool the stream to a temporary file, verify
// every batch (CRC, contiguous offsets, the header's offsets and size),
// upload the .log object (multipart when large), the rebuilt indexes and the
// aborted transaction index the node sent (checked against the segment's
// abort markers) under a fresh segment id, and only then add the entry to
// the manifest with a conditional write.
//
// A failure at any step before the manifest write leaves no entry: at worst
// objects no manifest names, which the retention loop removes after a grace
// period. Uploading a segment again is idempotent: the manifest's existing
// entry is returned and the new copy is deleted.
package uploader

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
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/segment"
)

// Errors, mapped to Connect codes by the service.
var (
	// ErrInvalid: the header or the bytes are malformed (INVALID_ARGUMENT).
	ErrInvalid = errors.New("uploader: invalid segment")
	// ErrFenced: the uploader's leader epoch is older than the manifest's
	// (ABORTED, REASON_FENCED_LEADER_EPOCH).
	ErrFenced = errors.New("uploader: leader epoch is fenced")
	// ErrGap: the segment starts after the tiered end, or overlaps it with
	// different boundaries that cannot be trimmed (FAILED_PRECONDITION).
	ErrGap = errors.New("uploader: segment does not continue the tiered log")
	// ErrExpired: the segment lies wholly below the tier's log start, so
	// total retention already deleted it (FAILED_PRECONDITION). Storing it
	// again would bring expired records back.
	ErrExpired = errors.New("uploader: segment is below the tiered log start")
)

// Uploader uploads segments. Safe for concurrent use.
type Uploader struct {
	Store    *manifest.Store
	SpoolDir string       // temporary files; default os.TempDir()
	Logger   *slog.Logger // default slog.Default()
	Now      func() time.Time
	// AfterObjects, when set, runs after the objects are uploaded and
	// before the manifest write; a test hook to simulate a crash there.
	AfterObjects func(logKey string) error
}

// Result is a completed upload.
type Result struct {
	Entry    *tieringv1.SegmentEntry
	Manifest *tieringv1.Manifest
	Existing bool // the manifest already held the segment
}

// Upload reads the segment bytes from body and makes them durable in the
// bucket. hdr is the stream's header.
func (u *Uploader) Upload(ctx context.Context, hdr *tieringv1.SegmentHeader, body io.Reader) (Result, error) {
	if err := checkHeader(hdr); err != nil {
		return Result{}, err
	}
	logger := u.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	p := manifest.Partition{Topic: hdr.GetTopic(), TopicID: hdr.GetTopicId(), Partition: hdr.GetPartition()}

	f, err := os.CreateTemp(u.SpoolDir, "strata-upload-*.log")
	if err != nil {
		return Result{}, fmt.Errorf("uploader: spool: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	n, err := io.Copy(f, body)
	if err != nil {
		return Result{}, fmt.Errorf("uploader: receiving segment: %w", err)
	}
	if n != hdr.GetSizeBytes() {
		return Result{}, fmt.Errorf("%w: received %d bytes, header says %d", ErrInvalid, n, hdr.GetSizeBytes())
	}

	m, _, err := u.Store.Load(ctx, p)
	if err != nil {
		return Result{}, err
	}
	if hdr.GetLeaderEpoch() < m.GetLeaderEpoch() {
		return Result{}, fmt.Errorf("%w: upload at epoch %d, manifest at %d", ErrFenced, hdr.GetLeaderEpoch(), m.GetLeaderEpoch())
	}
	if e, ok := covered(m, hdr); ok {
		return Result{Entry: e, Manifest: m, Existing: true}, nil
	}
	if err := expired(m, hdr); err != nil {
		return Result{}, err
	}
	from := hdr.GetBaseOffset()
	if end := manifest.TieredEnd(m); end >= 0 {
		if from > end {
			return Result{}, fmt.Errorf("%w: segment starts at %d, tier ends at %d", ErrGap, from, end)
		}
		from = end // trim what is already tiered (a new leader's segment boundaries may differ)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	info, err := segment.Scan(f, from)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if info.Batches == 0 || info.BaseOffset != from || info.LastOffset != hdr.GetLastOffset() || (from == hdr.GetBaseOffset() && info.StartPos != 0) {
		return Result{}, fmt.Errorf("%w: segment holds offsets %d..%d, header says %d..%d", ErrInvalid, info.BaseOffset, info.LastOffset, hdr.GetBaseOffset(), hdr.GetLastOffset())
	}

	// The aborted transaction index: known when the node sent one (a node
	// from before tiered segments carried it sends none), stored only when
	// it has entries for the part kept.
	txnKnown := hdr.TxnIndex != nil
	var txnIndex []byte
	if txnKnown {
		txns, err := segment.CheckTxnIndex(hdr.GetTxnIndex(), hdr.GetBaseOffset(), hdr.GetLastOffset()+1, info)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		txnIndex = partlog.AppendAbortedTxns(nil, txns)
	}

	segID := uuid.NewString()
	logKey, idxKey, timeKey := manifest.SegmentKeys(u.Store.Prefix, p, info.BaseOffset, segID)
	var txnKey string
	if len(txnIndex) > 0 {
		txnKey = manifest.TxnIndexKey(u.Store.Prefix, p, info.BaseOffset, segID)
	}
	b := u.Store.Bucket
	uploadAll := func() error {
		if err := b.Upload(ctx, logKey, io.NewSectionReader(f, info.StartPos, info.Size), info.Size); err != nil {
			return err
		}
		if err := b.Upload(ctx, idxKey, bytes.NewReader(info.OffsetIndex), int64(len(info.OffsetIndex))); err != nil {
			return err
		}
		if txnKey != "" {
			if err := b.Upload(ctx, txnKey, bytes.NewReader(txnIndex), int64(len(txnIndex))); err != nil {
				return err
			}
		}
		return b.Upload(ctx, timeKey, bytes.NewReader(info.TimeIndex), int64(len(info.TimeIndex)))
	}
	cleanup := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, k := range []string{logKey, idxKey, timeKey, txnKey} {
			if k == "" {
				continue
			}
			if err := b.Delete(dctx, k); err != nil {
				logger.Warn("deleting unused segment object; retention removes it later", "key", k, "err", err)
			}
		}
	}
	if err := uploadAll(); err != nil {
		cleanup()
		return Result{}, fmt.Errorf("uploader: %w", err)
	}
	if u.AfterObjects != nil {
		if err := u.AfterObjects(logKey); err != nil {
			return Result{}, err
		}
	}
	entry := &tieringv1.SegmentEntry{
		SegmentId: segID, ObjectKey: logKey, BaseOffset: info.BaseOffset, LastOffset: info.LastOffset,
		SizeBytes: info.Size, MinTimestampMs: info.MinTS, MaxTimestampMs: info.MaxTS,
		OffsetIndexKey: idxKey, TimeIndexKey: timeKey, State: tieringv1.SegmentState_SEGMENT_STATE_ACTIVE,
		UploadedAtMs: now().UnixMilli(), UploadLeaderEpoch: hdr.GetLeaderEpoch(),
		TxnIndexKnown: txnKnown, TxnIndexKey: txnKey,
	}
	for _, e := range info.Epochs {
		entry.LeaderEpochs = append(entry.LeaderEpochs, &tieringv1.EpochStart{Epoch: e.Epoch, StartOffset: e.StartOffset})
	}
	var existing *tieringv1.SegmentEntry
	m2, err := u.Store.Update(ctx, p, func(m *tieringv1.Manifest) error {
		existing = nil
		if hdr.GetLeaderEpoch() < m.GetLeaderEpoch() {
			return fmt.Errorf("%w: upload at epoch %d, manifest at %d", ErrFenced, hdr.GetLeaderEpoch(), m.GetLeaderEpoch())
		}
		if e, ok := covered(m, hdr); ok {
			existing = e
			return manifest.ErrUnchanged
		}
		if err := expired(m, hdr); err != nil {
			return err
		}
		if end := manifest.TieredEnd(m); end >= 0 && end != info.BaseOffset {
			return fmt.Errorf("%w: the tier moved to %d while uploading %d..%d", ErrGap, end, info.BaseOffset, info.LastOffset)
		}
		m.Segments = append(m.Segments, entry)
		m.LeaderEpoch = max(m.GetLeaderEpoch(), hdr.GetLeaderEpoch())
		return nil
	})
	if err != nil {
		cleanup()
		return Result{}, err
	}
	if existing != nil {
		cleanup()
		return Result{Entry: existing, Manifest: m2, Existing: true}, nil
	}
	logger.Info("segment tiered", "topic", p.Topic, "partition", p.Partition, "base_offset", entry.BaseOffset,
		"last_offset", entry.LastOffset, "bytes", entry.SizeBytes, "manifest_version", m2.GetVersion())
	return Result{Entry: entry, Manifest: m2}, nil
}

// covered reports whether the manifest already holds every offset of the
// segment, returning the entry holding its last offset.
func covered(m *tieringv1.Manifest, hdr *tieringv1.SegmentHeader) (*tieringv1.SegmentEntry, bool) {
	end := manifest.TieredEnd(m)
	if end < 0 || hdr.GetLastOffset() >= end || hdr.GetLastOffset() < m.GetLogStartOffset() {
		return nil, false
	}
	e := manifest.Find(m, hdr.GetLastOffset())
	return e, e != nil
}

// expired returns ErrExpired when the segment ends below the manifest's
// log start or its delete-records offset: retention or DeleteRecords
// deleted those offsets from the tier (a node that missed the deletion
// offers them again), and the tier never takes back what it expired.
func expired(m *tieringv1.Manifest, hdr *tieringv1.SegmentHeader) error {
	if start := max(m.GetLogStartOffset(), m.GetDeleteRecordsOffset()); start > 0 && hdr.GetLastOffset() < start {
		return fmt.Errorf("%w: segment %d..%d, tier starts at %d", ErrExpired, hdr.GetBaseOffset(), hdr.GetLastOffset(), start)
	}
	return nil
}

func checkHeader(h *tieringv1.SegmentHeader) error {
	var errs []error
	if h.GetTopic() == "" {
		errs = append(errs, errors.New("topic is empty"))
	}
	if len(h.GetTopicId()) != 36 {
		errs = append(errs, fmt.Errorf("topic id %q is not a UUID", h.GetTopicId()))
	}
	if h.GetPartition() < 0 {
		errs = append(errs, fmt.Errorf("partition %d is negative", h.GetPartition()))
	}
	if h.GetBaseOffset() < 0 || h.GetLastOffset() < h.GetBaseOffset() {
		errs = append(errs, fmt.Errorf("offsets %d..%d", h.GetBaseOffset(), h.GetLastOffset()))
	}
	if h.GetSizeBytes() <= 0 {
		errs = append(errs, fmt.Errorf("size %d", h.GetSizeBytes()))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
