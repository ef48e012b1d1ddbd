package partlog

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Cleaner files (part of the format, do not change).
//
//	<base>.cleaned          a cleaned segment being written; removed by Open
//	<base>.<end>.swap       a cleaned segment, fsynced, replacing every
//	                        segment whose base is in [base, end); Open
//	                        completes the swap
//	cleaner-checkpoint      the first dirty offset (text checkpoint):
//
//	strata-cleaner-checkpoint v1
//	first-dirty-offset <int64>
//	crc32c <8 hex digits>
//
// A swap, as Kafka's replaceSegments (.cleaned, then .swap):
//
//  1. the cleaned segment is written to <base>.cleaned and fsynced;
//  2. cleaner-checkpoint is raised (durably) to cover the group;
//  3. <base>.cleaned is renamed to <base>.<end>.swap, and the directory
//     fsynced: from here the swap is decided;
//  4. the replaced segments' files are removed, except <base>.log;
//  5. the .swap file is renamed over <base>.log, and the directory fsynced.
//
// A crash before 3 leaves the original segments and a .cleaned file that
// Open removes. A crash after 3 leaves a .swap file (its bytes fsynced in
// 1): Open removes whatever is left of the segments in [base, end) and
// renames it to <base>.log. So a half-written cleaned segment is never
// read, and the original is removed only once its replacement is durable.
//
// Cleaning leaves gaps: between batches, and between a cleaned segment's
// last batch and the next segment's base. Recovery accepts a gap inside a
// segment (a torn write cannot leave one: the bytes after a lost batch
// are lost too), and a gap at a segment's end only where cleaning can have
// made it: the segment lies below the checkpointed recovery point (its
// bytes were fsynced, so its tail was not torn), or it starts below the
// cleaner-checkpoint (step 2 comes before any swap, and the cleaner only
// cleans fsynced segments).
const (
	cleanedSuffix          = ".cleaned"
	swapSuffix             = ".swap"
	cleanerCheckpointFile  = "cleaner-checkpoint"
	cleanerCheckpointHeadr = "strata-cleaner-checkpoint v1"
)

func cleanedName(base int64) string { return segmentName(base) + cleanedSuffix }

func swapName(base, end int64) string { return segmentName(base) + "." + segmentName(end) + swapSuffix }

// parseSwapName returns the range a .swap file name carries.
func parseSwapName(name string) (base, end int64, ok bool) {
	rest, ok := strings.CutSuffix(name, swapSuffix)
	if !ok {
		return 0, 0, false
	}
	b, e, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	base, ok1 := parseOffsetName(b, "")
	end, ok2 := parseOffsetName(e, "")
	return base, end, ok1 && ok2 && end > base
}

// setCleanerCheckpointLocked persists and sets the first dirty offset. A
// failure fails the log: recovery relies on it. The caller holds mu.
func (l *Log) setCleanerCheckpointLocked(off int64) error {
	if off == l.cleanerCkpt {
		return nil
	}
	if err := cleanerCheckpoint.write(l.fs, l.dir, off); err != nil {
		return l.fail(err)
	}
	l.cleanerCkpt = off
	return nil
}

// lowerCleanerCheckpointLocked moves the first dirty offset down to the
// base of the segment a truncation keeps as its last, before the segment
// files change: that segment's tail is about to be rewritten unsynced, so
// recovery must no longer take a gap after it for the cleaner's. The
// caller holds mu.
func (l *Log) lowerCleanerCheckpointLocked(base int64) error {
	if l.cleanerCkpt <= base {
		return nil
	}
	return l.setCleanerCheckpointLocked(base)
}

// advanceCleanerCheckpoint records that the log is clean up to off, unless
// the log changed since the plan. It holds mu.
func (l *Log) advanceCleanerCheckpoint(p *cleanPlan, off int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if l.truncGen != p.truncGen || off <= l.cleanerCkpt {
		return nil
	}
	return l.setCleanerCheckpointLocked(off)
}

// swapIn replaces the segments of g with the cleaned segment cs (see the
// steps above). The segments must still be in the log as planned;
// otherwise it returns errCleanAborted and changes nothing.
func (l *Log) swapIn(p *cleanPlan, g cleanGroup, cs *segment, mapEnd int64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if l.truncGen != p.truncGen {
		return errCleanAborted
	}
	i := slices.Index(l.segs, g.segs[0])
	if i < 0 || i+len(g.segs) >= len(l.segs) || !slices.Equal(l.segs[i:i+len(g.segs)], g.segs) {
		return errCleanAborted
	}
	base := cs.base
	if err := l.setCleanerCheckpointLocked(max(l.cleanerCkpt, min(g.end, mapEnd))); err != nil {
		return err
	}
	swap := l.join(swapName(base, g.end))
	if err := l.fs.Rename(l.join(cleanedName(base)), swap); err != nil {
		return l.fail(fmt.Errorf("partlog: clean: rename to %s: %w", swapName(base, g.end), err))
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("partlog: clean: fsync dir: %w", err))
	}
	for _, s := range g.segs[1:] {
		if err := l.fs.Remove(s.path(segmentSuffix)); err != nil {
			return l.fail(fmt.Errorf("partlog: clean: remove %s: %w", segmentName(s.base), err))
		}
		s.removeIndexes(l.fs)
	}
	g.segs[0].removeIndexes(l.fs)
	// The cleaner keeps markers and transactional batches whole, so the
	// cleaned segment's aborted transactions are those of the segments it
	// replaces, in order. Their files go now; the cleaned segment's is
	// written below, before its other indexes (txnindex.go).
	for _, s := range g.segs {
		s.idxMu.RLock()
		cs.aborted = append(cs.aborted, s.aborted...)
		s.idxMu.RUnlock()
		if err := l.fs.Remove(s.path(txnIndexSuffix)); err != nil && !isNotExist(err) {
			return l.fail(fmt.Errorf("partlog: clean: remove %s: %w", segmentName(s.base)+txnIndexSuffix, err))
		}
	}
	if err := l.fs.Rename(swap, cs.path(segmentSuffix)); err != nil {
		return l.fail(fmt.Errorf("partlog: clean: rename %s: %w", swapName(base, g.end), err))
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("partlog: clean: fsync dir: %w", err))
	}
	segs := make([]*segment, 0, len(l.segs)-len(g.segs)+1)
	segs = append(segs, l.segs[:i]...)
	segs = append(segs, cs)
	segs = append(segs, l.segs[i+len(g.segs):]...)
	l.segMu.Lock()
	l.segs = segs
	l.segMu.Unlock()
	// No reader holds the old segments now (they hold segMu for a read).
	for _, s := range g.segs {
		_ = s.file.Close()
	}
	l.unflushed = removeSegments(l.unflushed, g.segs)
	// The transaction index must be durable before the offset indexes
	// let recovery trust the segment without reading it; without them it
	// is read and reindexed.
	if len(cs.aborted) > 0 {
		err := cs.writeAbortedTxns(l.fs)
		if err == nil {
			err = l.fs.SyncDir(l.dir)
		}
		if err != nil {
			l.logger.Warn("partlog: write the transaction index of a cleaned segment; it will be rebuilt on open", "segment", segmentName(base), "err", err)
			return nil
		}
	}
	if err := cs.writeIndexes(l.fs); err != nil {
		l.logger.Warn("partlog: write index of a cleaned segment; it will be rebuilt on open", "segment", segmentName(base), "err", err)
	}
	return nil
}

// recoverCleanerFiles removes cleaned segments that were never swapped in
// and completes the swaps that were decided (see the steps above). It
// runs first in recovery and reports whether it changed anything.
func (l *Log) recoverCleanerFiles(names []string) (bool, error) {
	type swap struct{ base, end int64 }
	var swaps []swap
	changed := false
	for _, name := range names {
		if strings.HasSuffix(name, cleanedSuffix) {
			l.logger.Info("partlog: recovery: removing a cleaned segment never swapped in", "file", name)
			_ = l.fs.Remove(l.join(name))
			changed = true
		}
		if base, end, ok := parseSwapName(name); ok {
			swaps = append(swaps, swap{base, end})
		}
	}
	slices.SortFunc(swaps, func(a, b swap) int { return cmp.Compare(a.base, b.base) })
	for _, sw := range swaps {
		l.logger.Warn("partlog: recovery: completing a cleaned segment swap", "segment", segmentName(sw.base), "end", sw.end)
		for _, name := range names {
			for _, suf := range segmentFileSuffixes {
				if b, ok := parseOffsetName(name, suf); ok && b >= sw.base && b < sw.end {
					if err := l.fs.Remove(l.join(name)); err != nil && !isNotExist(err) {
						return changed, fmt.Errorf("partlog: recovery: remove %s: %w", name, err)
					}
				}
			}
		}
		if err := l.fs.Rename(l.join(swapName(sw.base, sw.end)), l.join(segmentName(sw.base)+segmentSuffix)); err != nil {
			return changed, fmt.Errorf("partlog: recovery: complete swap of %s: %w", segmentName(sw.base), err)
		}
		changed = true
	}
	if changed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return changed, fmt.Errorf("partlog: recovery: fsync dir: %w", err)
		}
	}
	return changed, nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
