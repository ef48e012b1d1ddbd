package partlog

import (
	"context"
	"fmt"
)

// TruncateTo removes every batch at and after offset, for a follower
// whose log diverged from the leader's. Batches are removed whole: if
// offset falls inside a batch, that batch goes too and the log ends at its
// base offset. The epoch history, high watermark and recovery point are
// cut to the new log end and persisted before the segment files change. An
// offset at or past the log end does nothing; one at or below the log
// start empties the log (see TruncateFullyAndStartAt).
func (l *Log) TruncateTo(offset int64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if offset >= l.leo.Load() {
		return nil
	}
	if offset <= l.logStart.Load() {
		// Producers outlive the batches: what the state knew of the
		// batches below offset is still true.
		return l.truncateFullyLocked(offset, l.producers.before(offset))
	}

	// Find where the batch holding offset starts.
	l.segMu.RLock()
	i := l.segmentFor(offset)
	s := l.segs[i]
	var hdr [61]byte
	m, ok, err := s.find(offset, hdr[:])
	l.segMu.RUnlock()
	if err != nil {
		return l.fail(err)
	}
	newEnd, pos := offset, s.size.Load()
	if ok {
		// offset may lie in a gap the cleaner left, before batch m.
		newEnd, pos = min(m.base, offset), m.position
	}
	l.truncGen++
	if err := l.lowerCleanerCheckpointLocked(s.base); err != nil {
		return err
	}

	// Persist the new bounds first: after a crash mid-way, recovery scans
	// from the lowered recovery point and rebuilds the epoch history.
	// Producer snapshots past the new end describe batches about to go.
	l.removeSnapshots(func(off int64) bool { return off > newEnd })
	l.epochs.truncateFromEnd(newEnd)
	if err := l.persistEpochsLocked(); err != nil {
		return err
	}
	l.lowerSynced(newEnd)
	l.hwMu.Lock()
	l.hw.Store(min(l.hw.Load(), newEnd))
	l.hwMu.Unlock()
	if err := l.checkpointLocked(); err != nil {
		return err
	}

	l.segMu.Lock()
	defer l.segMu.Unlock()
	dropped := l.segs[i+1:]
	l.segs = l.segs[: i+1 : i+1]
	l.leo.Store(newEnd)
	for _, d := range dropped {
		l.deleteSegmentLocked(d)
	}
	l.unflushed = removeSegments(l.unflushed, dropped)
	l.unflushed = removeSegments(l.unflushed, []*segment{s})
	s.removeIndexes(l.fs)
	if err := s.file.Truncate(pos); err != nil {
		return l.fail(fmt.Errorf("partlog: truncate segment %s: %w", segmentName(s.base), err))
	}
	if err := s.file.Sync(); err != nil {
		return l.fail(fmt.Errorf("partlog: fsync segment %s: %w", segmentName(s.base), err))
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("partlog: fsync dir: %w", err))
	}
	// Rebuild the in-memory index of the shortened segment from the
	// entries that survive.
	s.idxMu.Lock()
	k := 0
	for k < len(s.offsets) && int64(s.offsets[k].Pos) < pos {
		k++
	}
	s.offsets = s.offsets[:k:k]
	s.recent.dropFrom(pos)
	t := 0
	for t < len(s.times) && s.base+int64(s.times[t].Rel) < newEnd {
		t++
	}
	s.times = s.times[:t:t]
	// Aborted transactions whose marker is cut go from the index (Kafka's
	// TransactionIndex.truncateTo); their transactions open again below.
	k = len(s.aborted)
	for k > 0 && s.aborted[k-1].LastOffset >= newEnd {
		k--
	}
	trimmed := k < len(s.aborted)
	s.aborted = s.aborted[:k:k]
	s.idxMu.Unlock()
	s.size.Store(pos)
	s.next.Store(newEnd)
	if trimmed {
		if err := s.writeAbortedTxns(l.fs); err != nil {
			return l.fail(fmt.Errorf("partlog: truncate %s: %w", segmentName(s.base)+txnIndexSuffix, err))
		}
	}
	if err := l.rescanTail(s); err != nil {
		return l.fail(err)
	}
	l.loadProducersLocked()
	return nil
}

// rescanTail recomputes the appender-only index state of a segment after
// truncation: bytes since the last offset index entry, and the largest
// MaxTimestamp, read from the batch headers after the last time index
// entry (the entry bounds every batch before it). The caller holds mu.
func (l *Log) rescanTail(s *segment) error {
	end := s.size.Load()
	s.idxMu.RLock()
	s.sinceIndex = int(end)
	if n := len(s.offsets); n > 0 {
		s.sinceIndex = int(end - int64(s.offsets[n-1].Pos))
	}
	s.indexTS = -1
	var from int64
	if n := len(s.times); n > 0 {
		s.indexTS = s.times[n-1].Timestamp
		from = LookupOffset(s.offsets, s.times[n-1].Rel)
	}
	s.idxMu.RUnlock()
	maxTS := s.indexTS
	var hdr [61]byte
	for pos := from; pos < end; {
		m, err := s.readMeta(pos, hdr[:])
		if err != nil {
			return err
		}
		maxTS = max(maxTS, m.maxTS)
		pos += int64(m.size)
	}
	s.maxTS.Store(maxTS)
	return nil
}

// TruncateFullyAndStartAt deletes every segment and starts an empty log at
// offset, with an empty epoch history and no producer state: what the
// producers of the batches below offset sent is not known (see
// ProducersComplete). A replica does this when the tier holds what its
// log lacks; a follower whose log is entirely below the leader's log start
// starts with the leader's producer state instead (ResetWithProducers).
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("partlog: truncate fully: negative offset %d", offset)
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.truncateFullyLocked(offset, nil)
}

// ResetWithProducers is TruncateFullyAndStartAt with the idempotent-producer
// state as of offset to begin with, as the leader's ProducerStateAt
// encodes it: a follower whose log lies entirely below the leader's log
// start then still recognises a retry of a batch below offset once it
// leads. The state is saved at offset before anything is appended.
func (l *Log) ResetWithProducers(offset int64, state []byte) error {
	at, ps, err := decodeSnapshot(state)
	if err != nil {
		return fmt.Errorf("partlog: reset: %w", err)
	}
	if at != offset {
		return fmt.Errorf("partlog: reset at %d with a producer state as of %d", offset, at)
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.truncateFullyLocked(offset, ps); err != nil {
		return err
	}
	if l.producersGapUntil != 0 {
		l.clearProducersGapLocked() // the leader's state is all there is to know
	}
	return nil
}

// truncateFullyLocked empties the log and starts it at offset with the
// producer state ps, saved durably at offset; nil means none is known.
// The caller holds flushMu and mu.
func (l *Log) truncateFullyLocked(offset int64, ps *producers) error {
	l.truncGen++
	if err := l.lowerCleanerCheckpointLocked(offset); err != nil {
		return err
	}
	l.removeSnapshots(func(int64) bool { return true })
	l.producers = newProducers()
	l.epochs.entries = nil
	if err := l.persistEpochsLocked(); err != nil {
		return err
	}
	// Readers are kept out before the files change: Create below may
	// empty the file of a segment with the same base.
	l.segMu.Lock()
	ns, err := l.createSegment(offset)
	if err != nil {
		l.segMu.Unlock()
		return l.fail(err)
	}
	// Create empties a segment file of the same name in place; make that
	// durable now, or a crash could bring back the truncated batches.
	if err := ns.file.Sync(); err != nil {
		l.segMu.Unlock()
		return l.fail(fmt.Errorf("partlog: fsync segment %s: %w", segmentName(offset), err))
	}
	old := l.segs
	l.segs = []*segment{ns}
	l.unflushed = nil
	l.logStart.Store(offset)
	l.leo.Store(offset)
	l.hwMu.Lock()
	l.hw.Store(offset)
	l.hwMu.Unlock()
	l.lowerSynced(offset)
	for _, d := range old {
		if d.base != offset { // same name: Create already emptied it
			l.deleteSegmentLocked(d)
		} else {
			_ = d.file.Close()
		}
	}
	l.segMu.Unlock()
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("partlog: fsync dir: %w", err))
	}
	l.dirDirty = false
	if err := l.checkpointLocked(); err != nil {
		return err
	}
	switch {
	case ps != nil:
		l.producers = ps
		l.writeSnapshotLocked(true)
	case offset > 0:
		l.markProducersGapLocked()
	}
	l.resetTxnsLocked(nil)
	return nil
}

// lowerSynced moves the recovery point and the group-commit mark down to
// a new log end, so appends after a truncation wait for their own fsync.
// The caller holds flushMu and mu.
func (l *Log) lowerSynced(end int64) {
	l.recoveryPoint.Store(min(l.recoveryPoint.Load(), end))
	l.gc.mu.Lock()
	l.gc.synced = min(l.gc.synced, end)
	l.gc.mu.Unlock()
}

// deleteSegmentLocked closes and removes a segment's files. The caller
// holds flushMu, mu and segMu exclusively, so no reader or fsync uses it.
func (l *Log) deleteSegmentLocked(s *segment) {
	_ = s.file.Close()
	for _, suf := range segmentFileSuffixes {
		_ = l.fs.Remove(s.path(suf))
	}
}

func removeSegments(list, drop []*segment) []*segment {
	out := list[:0]
	for _, s := range list {
		keep := true
		for _, d := range drop {
			keep = keep && s != d
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// ApplyRetention deletes the oldest sealed segments that retention allows:
// by time, those whose newest batch (MaxTimestamp) is older than
// RetentionAge; by size, the oldest while the log is larger than
// RetentionBytes. It never deletes the active segment, nor a segment with
// offsets at or above the high watermark. The log start offset moves to
// the first remaining segment. It returns how many segments it deleted.
func (l *Log) ApplyRetention(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	nowMs := l.clock().UnixMilli()
	var total int64
	for _, s := range l.segs {
		total += s.size.Load()
	}
	hw := l.hw.Load()
	n := 0
	for ; n < len(l.segs)-1; n++ {
		s := l.segs[n]
		if s.next.Load() > hw {
			break
		}
		byTime := l.cfg.Load().RetentionAge >= 0 && s.maxTS.Load() >= 0 &&
			nowMs-s.maxTS.Load() > l.cfg.Load().RetentionAge.Milliseconds()
		bySize := l.cfg.Load().RetentionBytes >= 0 && total-s.size.Load() >= l.cfg.Load().RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size.Load()
	}
	if n == 0 {
		return 0, nil
	}
	return n, l.deleteOldestLocked(n, l.segs[n].base, "retention")
}

// DeleteRecordsBefore raises the log start offset to offset (Kafka's
// DeleteRecords), deleting the segments wholly below it. Offsets below the
// new start are no longer readable even where their segment remains.
// offset may not pass the high watermark.
func (l *Log) DeleteRecordsBefore(offset int64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if hw := l.hw.Load(); offset > hw {
		return &OffsetOutOfRangeError{Offset: offset, LogStart: l.logStart.Load(), LogEnd: hw}
	}
	if offset <= l.logStart.Load() {
		return nil
	}
	n := 0
	for n < len(l.segs)-1 && l.segs[n+1].base <= offset {
		n++
	}
	return l.deleteOldestLocked(n, offset, "delete records")
}

// deleteOldestLocked deletes the first n segments and sets the log start
// to newStart. The new start is checkpointed before files are removed.
// The caller holds flushMu and mu.
func (l *Log) deleteOldestLocked(n int, newStart int64, why string) error {
	// Producers outlive the segments that hold their batches (KIP-360): a
	// durable snapshot of them comes first, and the older snapshots go
	// with the segments.
	l.writeSnapshotLocked(true)
	l.logStart.Store(newStart)
	if l.epochs.truncateFromStart(newStart) {
		if err := l.persistEpochsLocked(); err != nil {
			return err
		}
	}
	if err := l.checkpointLocked(); err != nil {
		return err
	}
	l.segMu.Lock()
	dropped := l.segs[:n:n]
	l.segs = append([]*segment(nil), l.segs[n:]...)
	for _, s := range dropped {
		l.logger.Info("partlog: deleting segment", "segment", segmentName(s.base), "bytes", s.size.Load(), "reason", why)
		l.deleteSegmentLocked(s)
	}
	l.unflushed = removeSegments(l.unflushed, dropped)
	first := l.segs[0].base
	l.segMu.Unlock()
	l.removeSnapshots(func(off int64) bool { return off < first })
	return nil
}
