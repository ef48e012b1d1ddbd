package partlog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// scanChunk is how much of a segment recovery reads at a time.
const scanChunk = 1 << 20

// recover loads the directory: see "Recovery" in the package doc.
func (l *Log) recover() error {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("partlog: open %s: %w", l.dir, err)
	}
	// A cleaning pass may have left a cleaned segment, swapped in or not.
	if changed, err := l.recoverCleanerFiles(names); err != nil {
		return err
	} else if changed {
		if names, err = l.fs.ReadDir(l.dir); err != nil {
			return fmt.Errorf("partlog: open %s: %w", l.dir, err)
		}
	}
	cleanerCkpt, ccErr := cleanerCheckpoint.read(l.fs, l.dir)
	if ccErr != nil && !errors.Is(ccErr, errNoCheckpoint) {
		l.logger.Warn("partlog: recovery: cleaner checkpoint unusable; the log counts as dirty", "err", ccErr)
	}
	var bases []int64
	indexFiles := map[int64][]string{}
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			_ = l.fs.Remove(l.join(name))
			continue
		}
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
			continue
		}
		for _, suf := range []string{offsetIndexSuffix, timeIndexSuffix, txnIndexSuffix} {
			if base, ok := parseSegmentName(strings.TrimSuffix(name, suf) + segmentSuffix); ok && strings.HasSuffix(name, suf) {
				indexFiles[base] = append(indexFiles[base], name)
			}
		}
	}
	slices.Sort(bases)
	for base, files := range indexFiles {
		if _, ok := slices.BinarySearch(bases, base); !ok {
			for _, f := range files {
				_ = l.fs.Remove(l.join(f))
			}
		}
	}

	// The clean-shutdown marker says whether the last process to hold the
	// log closed it. Its absence (a crash, kill -9 or power loss) changes
	// no rule below, which never trusts a byte past the recovery point,
	// but is reported, and is what UncleanShutdown tells replication.
	cleanEnd, cleanErr := cleanShutdownCheckpoint.read(l.fs, l.dir)

	// Checkpoints. A missing or corrupt one only costs a longer scan.
	ckpt, ckErr := readLogCheckpoint(l.fs, l.dir)
	if ckErr != nil {
		if !errors.Is(ckErr, errNoCheckpoint) {
			l.logger.Warn("partlog: recovery: log checkpoint unusable, scanning every segment", "err", ckErr)
		}
		ckpt = logCheckpoint{}
	}
	epochs, epErr := readEpochCheckpoint(l.fs, l.dir)
	if epErr != nil {
		if !errors.Is(epErr, errNoCheckpoint) {
			l.logger.Warn("partlog: recovery: leader epoch checkpoint unusable, rebuilding it from every segment", "err", epErr)
		}
		if len(bases) > 0 {
			ckpt.recoveryPoint = 0 // rebuild the epoch history from a full scan
		}
		epochs = nil
	}
	l.epochs.entries = epochs
	origEpochs := l.epochs.clone()
	rp := ckpt.recoveryPoint

	var scanned []*segment
	var reindex []*segment // segments whose transaction index is rebuilt from their batches
	cut := false
	for i, base := range bases {
		if cut {
			l.removeSegmentFiles(base, "after a truncation point")
			continue
		}
		f, err := l.fs.OpenReadWrite(l.join(segmentName(base) + segmentSuffix))
		if err != nil {
			return fmt.Errorf("partlog: open segment %s: %w", segmentName(base), err)
		}
		s := newSegment(l.dir, base, f, l.clock())
		l.segs = append(l.segs, s)
		if i > 0 {
			// A cleaned segment may end before the next one begins; see
			// cleanswap.go for why such a gap is known to be the cleaner's.
			if prev := l.segs[i-1]; prev.next.Load() < base && (base <= rp || prev.base < cleanerCkpt) {
				prev.next.Store(base)
			}
			if prev := l.segs[i-1]; prev.next.Load() != base {
				l.logger.Warn("partlog: recovery: segment does not follow the previous one; deleting it and every later segment",
					"segment", segmentName(base), "expected_base", prev.next.Load())
				l.segs = l.segs[:i]
				_ = f.Close()
				l.removeSegmentFiles(base, "not contiguous")
				cut = true
				continue
			}
		}
		fileSize, err := f.Size()
		if err != nil {
			return fmt.Errorf("partlog: open segment %s: %w", segmentName(base), err)
		}
		m, offs, times, ierr := s.loadIndexes(l.fs)
		switch {
		case ierr == nil && m.LogSize == fileSize && m.NextOffset <= rp &&
			(i+1 == len(bases) || bases[i+1] == m.NextOffset):
			s.install(m, offs, times)
			// Trusted, so its transaction index was fsynced with it:
			// a missing one means no aborted transaction (txnindex.go).
			if ab, err := s.loadAbortedTxns(l.fs); err != nil {
				l.logger.Warn("partlog: recovery: transaction index unusable; rebuilding it", "segment", segmentName(base), "err", err)
				reindex = append(reindex, s)
			} else {
				s.aborted = ab
			}
			continue
		case ierr == nil:
			ierr = fmt.Errorf("index covers %d bytes up to offset %d; file has %d bytes, recovery point %d",
				m.LogSize, m.NextOffset, fileSize, rp)
		}
		if m.NextOffset <= rp && rp > base {
			l.logger.Info("partlog: recovery: rebuilding index", "segment", segmentName(base), "reason", ierr)
		}
		scanned = append(scanned, s)
		reindex = append(reindex, s)
		if pos, off, reason := l.scanSegment(s, fileSize); reason != nil {
			l.logger.Warn("partlog: recovery: truncating segment at the first invalid batch; nothing after it is kept",
				"segment", segmentName(base), "position", pos, "offset", off,
				"bytes_cut", fileSize-pos, "reason", reason)
			if err := f.Truncate(pos); err != nil {
				return fmt.Errorf("partlog: recovery: truncate %s: %w", segmentName(base), err)
			}
			cut = true
		}
	}

	if len(l.segs) == 0 {
		s, err := l.createSegment(ckpt.logStart)
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s)
	}
	act := l.active()
	leo := act.next.Load()
	// The active segment grows unsynced: no gap after it is the cleaner's.
	l.cleanerCkpt = min(cleanerCkpt, act.base)
	if ccErr == nil && l.cleanerCkpt != cleanerCkpt {
		if err := cleanerCheckpoint.write(l.fs, l.dir, l.cleanerCkpt); err != nil {
			return err
		}
	}
	l.leo.Store(leo)
	logStart := max(ckpt.logStart, l.segs[0].base)
	logStart = min(logStart, leo)
	l.logStart.Store(logStart)
	l.hw.Store(min(max(ckpt.highWatermark, logStart), leo))

	// Transaction indexes are rebuilt, durably, before the offset
	// indexes that let the next open trust their segments are written.
	if err := l.reindexTxnsLocked(reindex); err != nil {
		return err
	}

	// Rebuilt indexes of sealed segments are written now; the active
	// segment's are removed because they are about to go stale.
	for _, s := range scanned {
		if s != act {
			if err := s.writeIndexes(l.fs); err != nil {
				l.logger.Warn("partlog: recovery: write rebuilt index", "segment", segmentName(s.base), "err", err)
			}
		}
	}
	act.removeIndexes(l.fs)

	// Everything up to leo is verified; make it durable so the recovery
	// point can move there.
	for _, s := range scanned {
		if err := s.file.Sync(); err != nil {
			return fmt.Errorf("partlog: recovery: fsync %s: %w", segmentName(s.base), err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("partlog: recovery: fsync dir: %w", err)
	}
	l.recoveryPoint.Store(leo)

	l.epochs.truncateFromEnd(leo)
	l.epochs.truncateFromStart(logStart)
	if !slices.Equal(origEpochs, l.epochs.entries) || epErr != nil {
		if err := writeEpochCheckpoint(l.fs, l.dir, l.epochs.entries); err != nil {
			return err
		}
	}
	if err := writeLogCheckpoint(l.fs, l.dir, logCheckpoint{recoveryPoint: leo, highWatermark: l.hw.Load(), logStart: logStart}); err != nil {
		return err
	}
	clean := cleanErr == nil && ckErr == nil && cleanEnd == ckpt.recoveryPoint && cleanEnd == leo
	l.unclean = len(bases) > 0 && !clean
	if l.unclean {
		l.logger.Warn("partlog: recovery: the log was not closed cleanly; recovered from its last fsynced point",
			"recovery_point", ckpt.recoveryPoint, "log_end", leo, "segments_scanned", len(scanned))
	}
	if cleanErr == nil || !errors.Is(cleanErr, errNoCheckpoint) {
		// From here on any stop is unclean until the next Close.
		if err := l.fs.Remove(l.join(cleanShutdownFile)); err != nil {
			return fmt.Errorf("partlog: recovery: remove %s: %w", cleanShutdownFile, err)
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("partlog: recovery: fsync dir: %w", err)
		}
	}
	l.loadProducersLocked()
	l.logger.Debug("partlog: opened", "segments", len(l.segs), "log_start", logStart, "log_end", leo,
		"high_watermark", l.hw.Load(), "segments_scanned", len(scanned))
	return nil
}

func (l *Log) join(name string) string { return filepath.Join(l.dir, name) }

// removeSegmentFiles deletes a segment's files during recovery.
func (l *Log) removeSegmentFiles(base int64, why string) {
	name := segmentName(base)
	size := int64(-1)
	if fi, err := l.fs.Stat(l.join(name + segmentSuffix)); err == nil {
		size = fi.Size()
	}
	l.logger.Warn("partlog: recovery: deleting segment", "segment", name, "bytes", size, "reason", why)
	for _, suf := range segmentFileSuffixes {
		_ = l.fs.Remove(l.join(name + suf))
	}
}

// scanSegment reads every batch of s from the start, checking CRC, magic
// and offset contiguity, and rebuilds the indexes and epoch history. It
// stops at the first invalid or incomplete batch and returns its position
// and expected offset and why; reason is nil when the whole file is valid.
func (l *Log) scanSegment(s *segment, fileSize int64) (pos, offset int64, reason error) {
	s.resetIndex()
	buf := make([]byte, min(scanChunk, max(fileSize, recordbatch.LengthPrefixSize)))
	var bufPos, bufLen int64 // buf[:bufLen] holds the file from bufPos
	window := func(at, n int64) ([]byte, error) {
		if at >= bufPos && at+n <= bufPos+bufLen {
			return buf[at-bufPos : at-bufPos+n], nil
		}
		if n > int64(len(buf)) {
			buf = make([]byte, n)
		}
		want := min(int64(len(buf)), fileSize-at)
		got, err := s.file.ReadAt(buf[:want], at)
		if err != nil && !(errors.Is(err, io.EOF) && int64(got) == want) {
			return nil, err
		}
		bufPos, bufLen = at, int64(got)
		if bufLen < n {
			return nil, io.ErrUnexpectedEOF
		}
		return buf[:n], nil
	}
	next := s.base
	defer func() {
		s.size.Store(pos)
		s.next.Store(next)
	}()
	for pos < fileSize {
		rem := fileSize - pos
		if rem < recordbatch.LengthPrefixSize {
			return pos, next, fmt.Errorf("torn batch: %d trailing bytes", rem)
		}
		b, err := window(pos, recordbatch.LengthPrefixSize)
		if err != nil {
			return pos, next, err
		}
		size, err := recordbatch.PeekSize(b)
		if err != nil {
			return pos, next, err
		}
		if int64(size) > rem {
			return pos, next, fmt.Errorf("torn batch: %d-byte batch, %d bytes left in the file", size, rem)
		}
		if b, err = window(pos, int64(size)); err != nil {
			return pos, next, err
		}
		h, err := recordbatch.Verify(b)
		if err != nil {
			return pos, next, err
		}
		// Offsets increase; a gap is where the cleaner removed batches, or
		// a follower copied a cleaned range (a torn write cannot leave
		// one: every byte after a lost batch is lost with it).
		if h.BaseOffset < next {
			return pos, next, &NonContiguousError{Expected: next, Got: h.BaseOffset}
		}
		m := batchMeta{base: h.BaseOffset, size: size, lastOff: h.LastOffset(), maxTS: h.MaxTimestamp, epoch: h.PartitionLeaderEpoch}
		s.indexBatch(m, pos, l.cfg.Load().IndexIntervalBytes)
		if h.PartitionLeaderEpoch > l.epochs.latest() {
			l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset)
		}
		pos += int64(size)
		next = h.NextOffset()
	}
	return pos, next, nil
}
