package partlog

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Read returns whole batches starting with the one that holds offset, as
// stored. It returns at most maxBytes, except that the first batch is
// always returned whole even if it is larger; it returns only batches
// whose last offset is below maxOffset (pass the high watermark for
// consumers, LogEndOffset for replicas); and it reads from one segment
// only, so it may return less than maxBytes near a segment end. Every
// returned batch has passed its CRC check; a stored batch that fails it
// ends the result (or, if it is the first, gives ErrCorrupt).
//
// An offset below the log start or above the log end gives an
// *OffsetOutOfRangeError; at the log end, or at or past maxOffset, the
// result is empty.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	return l.ReadInto(nil, offset, maxBytes, maxOffset)
}

// ReadInto is Read into a caller-supplied buffer, for servers that pool
// read buffers: the result's Batches aliases buf when buf has the capacity
// for the read, and a new slice otherwise.
func (l *Log) ReadInto(buf []byte, offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	return l.readInto(buf, offset, maxBytes, maxOffset, true, false)
}

// ReadIntoWithin is ReadInto held to maxBytes for the first batch too: a
// first batch larger than maxBytes is not read, and the result holds no
// batches. It is how a fetch reads its partitions once an earlier one
// returned records, as Kafka's LogSegment.read with minOneMessage false
// (KIP-74).
func (l *Log) ReadIntoWithin(buf []byte, offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	return l.readInto(buf, offset, maxBytes, maxOffset, false, false)
}

// ReadCommittedInto is the read of a read_committed consumer: ReadInto
// (or, without minOne, ReadIntoWithin) held below the last stable offset
// instead of a caller's bound, whose result also lists in AbortedTxns
// the aborted transactions that overlap the batches returned
// (AbortedTxns of [offset, NextOffset)), as Kafka's
// UnifiedLog.read with FetchIsolation.TXN_COMMITTED answers them. The
// bound and the list are taken under the lock the batches are read
// under, so retention cannot delete, between the two, the index of a
// segment whose records the batches hold.
func (l *Log) ReadCommittedInto(buf []byte, offset int64, maxBytes int, minOne bool) (ReadResult, error) {
	return l.readInto(buf, offset, maxBytes, math.MaxInt64, minOne, true)
}

// readInto is ReadInto, whose first batch may exceed maxBytes only with
// minOne, and which reads below the last stable offset and collects the
// aborted transactions of what it read when committed.
func (l *Log) readInto(buf []byte, offset int64, maxBytes int, maxOffset int64, minOne, committed bool) (ReadResult, error) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if l.closed.Load() {
		return ReadResult{}, ErrClosed
	}
	res := ReadResult{
		NextOffset:     offset,
		LogStartOffset: l.logStart.Load(),
		LogEndOffset:   l.leo.Load(),
		HighWatermark:  l.hw.Load(),
	}
	res.LastStableOffset = l.LastStableOffset()
	if offset < res.LogStartOffset || offset > res.LogEndOffset {
		return res, &OffsetOutOfRangeError{Offset: offset, LogStart: res.LogStartOffset, LogEnd: res.LogEndOffset}
	}
	maxOffset = min(maxOffset, res.LogEndOffset)
	if committed {
		maxOffset = min(maxOffset, res.LastStableOffset)
	}
	if offset >= maxOffset {
		return res, nil
	}
	var hdr [recordbatch.HeaderSize]byte
	for i := l.segmentFor(offset); i < len(l.segs); i++ {
		s := l.segs[i]
		first, ok, err := s.find(offset, hdr[:])
		if err != nil {
			return res, err
		}
		if !ok {
			continue // offset is past this segment's batches
		}
		if first.base >= maxOffset || first.lastOff >= maxOffset {
			return res, nil
		}
		if !minOne && first.size > maxBytes {
			return res, nil
		}
		end := s.size.Load()
		n := min(int64(max(maxBytes, first.size)), end-first.position)
		if int64(cap(buf)) >= n {
			buf = buf[:n]
		} else {
			buf = make([]byte, n)
		}
		if _, err := s.file.ReadAt(buf, first.position); err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("partlog: read segment %s at %d: %w", segmentName(s.base), first.position, err)
		}
		cut, next := 0, offset
		for cut < len(buf) {
			h, err := recordbatch.Verify(buf[cut:])
			if err != nil {
				if errors.Is(err, recordbatch.ErrShortBatch) && cut > 0 {
					break // maxBytes ends inside this batch
				}
				if cut == 0 {
					return res, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(s.base), first.position, err)
				}
				break
			}
			if h.LastOffset() >= maxOffset {
				break
			}
			cut += h.Size()
			next = h.NextOffset()
		}
		res.Batches, res.NextOffset = buf[:cut], next
		if committed && cut > 0 {
			res.AbortedTxns = l.abortedTxnsLocked(offset, next)
		}
		return res, nil
	}
	return res, nil
}

// segmentFor returns the index of the segment that holds offset: the last
// whose base is <= offset. The caller holds segMu.
func (l *Log) segmentFor(offset int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset })
	return max(i-1, 0)
}

// OffsetForTimestamp returns the base offset of the first batch whose
// MaxTimestamp is >= ts, at batch granularity like Kafka's ListOffsets: the
// returned batch may hold earlier records too. found is false when no
// batch is that new.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, found bool, err error) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if l.closed.Load() {
		return 0, false, ErrClosed
	}
	logStart := l.logStart.Load()
	var hdr [recordbatch.HeaderSize]byte
	for _, s := range l.segs {
		if s.maxTS.Load() < ts || s.next.Load() <= logStart {
			continue
		}
		from := max(s.lookupTime(ts), logStart)
		m, ok, err := s.find(from, hdr[:])
		if err != nil {
			return 0, false, err
		}
		end := s.size.Load()
		for ok {
			if m.maxTS >= ts {
				return max(m.base, logStart), true, nil
			}
			pos := m.position + int64(m.size)
			if pos >= end {
				break
			}
			if m, err = s.readMeta(pos, hdr[:]); err != nil {
				return 0, false, fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
		}
	}
	return 0, false, nil
}
