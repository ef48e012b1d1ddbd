package partlog

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// AppendAsLeader appends one or more whole batches as the partition
// leader: it checks every batch's magic and CRC, stamps consecutive base
// offsets from the log end offset and leaderEpoch into the caller's buffer
// (in place: batches is modified), records leaderEpoch in the epoch
// history if it is new, and writes the bytes to the active segment,
// rolling it first if needed.
//
// With FlushSync it returns only after an fsync covers the bytes; many
// concurrent appenders share one fsync. If ctx ends during that wait the
// bytes are in the log but their durability is unknown; the error says
// so. A write or fsync error fails the log (see ErrFailed).
func (l *Log) AppendAsLeader(ctx context.Context, batches []byte, leaderEpoch int32) (AppendInfo, error) {
	return l.append(ctx, batches, true, leaderEpoch)
}

// AppendAsFollower appends batches copied from the leader, keeping their
// offsets and epochs. The first batch must start at or after the log end
// offset and each next batch at or after the end of the previous one, or
// the append fails with a *NonContiguousError. A gap is what the leader's
// cleaner left (a fetch at an offset it removed returns the next batch it
// kept), and is accepted as Kafka's followers accept it. Epochs newer than
// the latest in the history are recorded.
func (l *Log) AppendAsFollower(ctx context.Context, batches []byte) (AppendInfo, error) {
	return l.append(ctx, batches, false, 0)
}

// checkBatches verifies that b is one or more whole, valid batches no
// larger than MaxBatchBytes, and summarises them, counting the control
// batches. It runs outside the append lock: the CRC is the expensive part
// of an append.
func (l *Log) checkBatches(b []byte) (info AppendInfo, controls int, err error) {
	if len(b) == 0 {
		return info, 0, fmt.Errorf("%w: no batches", ErrInvalidBatch)
	}
	if len(b) > maxAppendBytes {
		return info, 0, fmt.Errorf("%w: append of %d bytes exceeds %d", ErrBatchTooLarge, len(b), maxAppendBytes)
	}
	info.MaxTimestamp = -1
	for rest := b; len(rest) > 0; {
		h, err := recordbatch.Verify(rest)
		if err != nil {
			return info, 0, fmt.Errorf("%w: batch %d at byte %d: %w", ErrInvalidBatch, info.Batches, len(b)-len(rest), err)
		}
		if h.Size() > l.cfg.Load().MaxBatchBytes {
			return info, 0, fmt.Errorf("%w: batch %d is %d bytes, limit %d", ErrBatchTooLarge, info.Batches, h.Size(), l.cfg.Load().MaxBatchBytes)
		}
		if h.Control() {
			controls++
		}
		info.Batches++
		info.Records += int64(h.LastOffsetDelta) + 1
		info.MaxTimestamp = max(info.MaxTimestamp, h.MaxTimestamp)
		rest = rest[h.Size():]
	}
	info.Bytes = len(b)
	return info, controls, nil
}

func (l *Log) append(ctx context.Context, b []byte, leader bool, epoch int32) (AppendInfo, error) {
	if err := ctx.Err(); err != nil {
		return AppendInfo{}, err
	}
	info, controls, err := l.checkBatches(b)
	if err != nil {
		return info, err
	}
	now := l.clock()
	info.LogAppendTime = now.UnixMilli()

	l.mu.Lock()
	if err := l.writable(); err != nil {
		l.mu.Unlock()
		return AppendInfo{}, err
	}
	leo := l.leo.Load()
	first, newLEO := leo, leo // a follower's batches may start past leo, after a gap
	epochChanged := false
	if leader {
		if latest := l.epochs.latest(); epoch < latest {
			l.mu.Unlock()
			return AppendInfo{}, fmt.Errorf("%w: append with epoch %d, latest is %d", ErrStaleEpoch, epoch, latest)
		}
		if controls > 0 {
			if err := l.checkMarkersLocked(b); err != nil {
				l.mu.Unlock()
				return AppendInfo{}, err
			}
		}
		next := leo
		for rest := b; len(rest) > 0; {
			m, _ := peekBatch(rest) // checked by checkBatches
			recordbatch.SetBaseOffset(rest, next)
			recordbatch.SetPartitionLeaderEpoch(rest, epoch)
			next += m.records
			rest = rest[m.size:]
		}
		newLEO = next
		epochChanged = l.epochs.assign(epoch, leo)
	} else {
		next := leo
		for rest := b; len(rest) > 0; {
			m, _ := peekBatch(rest)
			if m.base < next {
				l.mu.Unlock()
				return AppendInfo{}, &NonContiguousError{Expected: next, Got: m.base}
			}
			if m.epoch > l.epochs.latest() {
				epochChanged = l.epochs.assign(m.epoch, m.base) || epochChanged
			}
			if len(rest) == len(b) {
				first = m.base
			}
			next = m.lastOff + 1
			rest = rest[m.size:]
		}
		newLEO = next
	}
	// The epoch history is durable before any batch of the new epoch, so a
	// crash can leave an entry past the log end (trimmed on open) but never
	// a batch with an unrecorded epoch.
	if epochChanged {
		if err := l.persistEpochsLocked(); err != nil {
			l.mu.Unlock()
			return AppendInfo{}, err
		}
	}
	if err := l.maybeRoll(len(b), newLEO-1, now); err != nil {
		l.mu.Unlock()
		return AppendInfo{}, err
	}
	s := l.active()
	pos := s.size.Load()
	if _, err := s.file.WriteAt(b, pos); err != nil {
		// The bytes were never published: no reader sees them, and the
		// next open cuts them off. The log refuses further writes.
		l.mu.Unlock()
		return AppendInfo{}, l.fail(fmt.Errorf("partlog: write segment %s at %d: %w", segmentName(s.base), pos, err))
	}
	for rest, p := b, pos; len(rest) > 0; {
		m, _ := peekBatch(rest)
		s.indexBatch(m, p, l.cfg.Load().IndexIntervalBytes)
		p += int64(m.size)
		rest = rest[m.size:]
	}
	// The producer state, and what readers see of open transactions,
	// change before the batches are published: a transaction opened or
	// ended here lies at or above the old log end, so above the high
	// watermark, until they are (see lso.go).
	if changes := l.producers.recordAll(b, info.LogAppendTime); changes.any() {
		l.txnsChangedLocked(changes.ended)
		if err := l.indexAbortsLocked(s, changes.ended); err != nil {
			l.mu.Unlock()
			return AppendInfo{}, l.fail(err)
		}
	}
	// Publish: size first, then the offsets. Readers check offsets against
	// leo and read bytes below size, so they only ever see whole batches.
	s.size.Store(pos + int64(len(b)))
	s.next.Store(newLEO)
	l.leo.Store(newLEO)
	l.mu.Unlock()

	info.FirstOffset, info.LastOffset = first, newLEO-1
	if l.cfg.Load().Flush.Mode == FlushSync {
		if err := l.waitSynced(ctx, newLEO); err != nil {
			return info, err
		}
	}
	return info, nil
}

// maybeRoll starts a new active segment when the append of n bytes ending
// at offset last would overfill the current one, when it is too old (its
// SegmentAge less its share of SegmentJitter), or
// when the relative offset would overflow the index. The caller holds mu.
func (l *Log) maybeRoll(n int, last int64, now time.Time) error {
	s := l.active()
	size := s.size.Load()
	if size == 0 {
		return nil
	}
	cfg := l.cfg.Load()
	if size+int64(n) <= cfg.SegmentBytes && now.Sub(s.created) < s.rollAge(cfg.SegmentAge, cfg.SegmentJitter) && last-s.base <= math.MaxUint32 {
		return nil
	}
	return l.roll()
}

// roll seals the active segment and starts a new one at the log end
// offset. The sealed segment's indexes are written (unsynced) and its
// fsync is left to the next flush: a background flush is kicked for
// FlushNone and FlushInterval, and the next group commit covers it for
// FlushSync. The caller holds mu.
func (l *Log) roll() error {
	old := l.active()
	ns, err := l.createSegment(l.leo.Load())
	if err != nil {
		return l.fail(err)
	}
	if err := old.writeIndexes(l.fs); err != nil {
		l.logger.Warn("partlog: write index on roll; it will be rebuilt on open", "segment", segmentName(old.base), "err", err)
	}
	l.unflushed = append(l.unflushed, old)
	l.segMu.Lock()
	l.segs = append(l.segs, ns)
	l.segMu.Unlock()
	l.writeSnapshotLocked(false)
	if l.cfg.Load().Flush.Mode != FlushSync {
		l.kickFlush()
	}
	return nil
}

// createSegment creates an empty segment file at base.
func (l *Log) createSegment(base int64) (*segment, error) {
	s := newSegment(l.dir, base, nil, l.clock())
	f, err := l.fs.Create(s.path(segmentSuffix))
	if err != nil {
		return nil, fmt.Errorf("partlog: create segment %s: %w", segmentName(base), err)
	}
	s.file = f
	s.removeIndexes(l.fs)
	// A segment of the same base that a truncation replaced may have left
	// one; the new segment has no aborted transaction.
	if err := l.fs.Remove(s.path(txnIndexSuffix)); err != nil && !isNotExist(err) {
		return nil, fmt.Errorf("partlog: create segment %s: remove old transaction index: %w", segmentName(base), err)
	}
	l.dirDirty = true
	return s, nil
}
