package partlog

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// segment is one .log file with its in-memory indexes.
//
// Concurrency: the appender (holding Log.mu) is the only writer. Readers
// see bytes [0, size) and offsets [base, next); both are stored only after
// the bytes are written, so a reader never sees part of a batch. Index
// slices are guarded by idxMu.
type segment struct {
	base    int64     // offset of the first batch; names the files
	dir     string    // directory holding the files
	file    vfs.File  // the .log file, open read-write
	created time.Time // when this process created or opened it (roll by age); appender only
	// jitterSeed picks this segment's share of Config.SegmentJitter, as
	// Kafka draws one random jitter per segment; fixed at creation.
	jitterSeed uint64

	size  atomic.Int64 // published bytes
	next  atomic.Int64 // offset after the last published batch
	maxTS atomic.Int64 // largest published batch MaxTimestamp, -1 if none

	idxMu   sync.RWMutex  // guards offsets, times, aborted and recent
	offsets []OffsetEntry // sparse offset index
	times   []TimeEntry   // time index
	aborted []AbortedTxn  // aborted transaction index (txnindex.go), by marker offset
	// recent holds the last batches indexed, so that a read near the end
	// (a follower's fetch, a consumer's at the tail) finds its batch
	// without reading headers from the file (find).
	recent recentBatches

	// txnUnsynced says the .txnindex has entries no fsync covers yet.
	// Guarded by Log.mu.
	txnUnsynced bool

	sinceIndex int   // log bytes appended since the last offset index entry; appender only
	indexTS    int64 // MaxTimestamp of the last time index entry, -1 if none; appender only
}

// rollAge is how old the segment may grow before it rolls: age less its
// jitter, a share of jitter below min(jitter, age) (Kafka's
// randomSegmentJitter, drawn once per segment).
func (s *segment) rollAge(age, jitter time.Duration) time.Duration {
	if jitter <= 0 || age <= 0 {
		return age
	}
	return age - time.Duration(s.jitterSeed%uint64(min(jitter, age)))
}

func segmentName(base int64) string { return fmt.Sprintf("%020d", base) }

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentName(s.base)+suffix)
}

func newSegment(dir string, base int64, file vfs.File, now time.Time) *segment {
	s := &segment{base: base, dir: dir, file: file, created: now, indexTS: -1, jitterSeed: rand.Uint64()}
	s.next.Store(base)
	s.maxTS.Store(-1)
	return s
}

// batchMeta is what the log needs from a batch header.
type batchMeta struct {
	base     int64 // base offset
	size     int   // total bytes
	lastOff  int64 // last offset in the batch
	maxTS    int64 // MaxTimestamp
	epoch    int32 // partition leader epoch
	records  int64 // lastOffsetDelta + 1
	position int64 // file position, when read from a segment
}

// peekBatch decodes the header fields of the batch starting at b, which
// must hold at least recordbatch.HeaderSize bytes. It checks the length
// and magic, not the CRC.
func peekBatch(b []byte) (batchMeta, error) {
	h, err := recordbatch.PeekHeader(b)
	if err != nil {
		return batchMeta{}, err
	}
	return batchMeta{
		base:    h.BaseOffset,
		size:    h.Size(),
		lastOff: h.LastOffset(),
		maxTS:   h.MaxTimestamp,
		epoch:   h.PartitionLeaderEpoch,
		records: int64(h.LastOffsetDelta) + 1,
	}, nil
}

// indexBatch updates the in-memory indexes for a batch written at pos.
// Appender only; call before publishing the batch.
func (s *segment) indexBatch(m batchMeta, pos int64, interval int) {
	m.position = pos
	s.idxMu.Lock()
	s.recent.add(m)
	if s.sinceIndex >= interval {
		rel := uint32(m.base - s.base)
		s.offsets = append(s.offsets, OffsetEntry{Rel: rel, Pos: uint32(pos)})
		// Every batch before this one has MaxTimestamp <= maxTS.
		if ts := s.maxTS.Load(); ts > s.indexTS {
			s.times = append(s.times, TimeEntry{Timestamp: ts, Rel: rel})
			s.indexTS = ts
		}
		s.sinceIndex = 0
	}
	s.idxMu.Unlock()
	s.sinceIndex += m.size
	if m.maxTS > s.maxTS.Load() {
		s.maxTS.Store(m.maxTS)
	}
}

// resetIndex clears the in-memory indexes (before a rebuild or truncation).
func (s *segment) resetIndex() {
	s.idxMu.Lock()
	s.offsets, s.times = nil, nil
	s.recent = recentBatches{}
	s.idxMu.Unlock()
	s.sinceIndex, s.indexTS = 0, -1
	s.maxTS.Store(-1)
}

// lookup returns the file position to start scanning from for offset.
// An offset below the base (a read that passed an empty cleaned segment)
// starts at the first batch.
func (s *segment) lookup(offset int64) int64 {
	if offset <= s.base {
		return 0
	}
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	return LookupOffset(s.offsets, uint32(offset-s.base))
}

// lookupTime returns the offset to start scanning from for timestamp ts.
func (s *segment) lookupTime(ts int64) int64 {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	return s.base + int64(LookupTime(s.times, ts))
}

// readMeta reads the header of the batch at pos.
func (s *segment) readMeta(pos int64, hdr []byte) (batchMeta, error) {
	if _, err := s.file.ReadAt(hdr[:recordbatch.HeaderSize], pos); err != nil {
		return batchMeta{}, fmt.Errorf("partlog: read %s at %d: %w", segmentName(s.base), pos, err)
	}
	m, err := peekBatch(hdr)
	m.position = pos
	return m, err
}

// find returns the header of the first published batch whose last offset
// is >= offset, scanning from the index position; ok is false when the
// segment has no such batch.
func (s *segment) find(offset int64, hdr []byte) (m batchMeta, ok bool, err error) {
	end := s.size.Load()
	s.idxMu.RLock()
	m, ok, from := s.recent.find(offset, end)
	s.idxMu.RUnlock()
	if ok {
		return m, true, nil
	}
	for pos := max(s.lookup(offset), from); pos < end; pos += int64(m.size) {
		if m, err = s.readMeta(pos, hdr); err != nil {
			return m, false, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(s.base), pos, err)
		}
		if m.lastOff >= offset {
			return m, true, nil
		}
	}
	return batchMeta{}, false, nil
}

// writeIndexes writes the .index and .timeindex files describing the
// published part of the segment. They are not synced: a torn or lost index
// fails its CRC or size check on open and is rebuilt from the log.
func (s *segment) writeIndexes(fsys vfs.FS) error {
	s.idxMu.RLock()
	m := IndexMeta{BaseOffset: s.base, NextOffset: s.next.Load(), LogSize: s.size.Load(), MaxTimestamp: s.maxTS.Load()}
	ob := EncodeOffsetIndex(m, s.offsets)
	tb := EncodeTimeIndex(m, s.times)
	s.idxMu.RUnlock()
	for _, f := range []struct {
		suffix string
		b      []byte
	}{{offsetIndexSuffix, ob}, {timeIndexSuffix, tb}} {
		file, err := fsys.Create(s.path(f.suffix))
		if err != nil {
			return err
		}
		_, err = file.Write(f.b)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removeIndexes deletes the index files (the segment is about to change).
func (s *segment) removeIndexes(fsys vfs.FS) {
	_ = fsys.Remove(s.path(offsetIndexSuffix))
	_ = fsys.Remove(s.path(timeIndexSuffix))
}

// loadIndexes reads the index files and returns what they describe, or an
// error if either is missing, corrupt, or not about this segment.
func (s *segment) loadIndexes(fsys vfs.FS) (IndexMeta, []OffsetEntry, []TimeEntry, error) {
	ob, err := vfs.ReadFile(fsys, s.path(offsetIndexSuffix))
	if err != nil {
		return IndexMeta{}, nil, nil, err
	}
	tb, err := vfs.ReadFile(fsys, s.path(timeIndexSuffix))
	if err != nil {
		return IndexMeta{}, nil, nil, err
	}
	om, offs, err := DecodeOffsetIndex(ob)
	if err != nil {
		return om, nil, nil, err
	}
	tm, times, err := DecodeTimeIndex(tb)
	if err != nil {
		return om, nil, nil, err
	}
	if om != tm || om.BaseOffset != s.base || om.NextOffset < s.base {
		return om, nil, nil, fmt.Errorf("partlog: index: headers disagree (%+v, %+v) for segment %d", om, tm, s.base)
	}
	return om, offs, times, nil
}

// install sets the segment's state from loaded index files.
func (s *segment) install(m IndexMeta, offs []OffsetEntry, times []TimeEntry) {
	s.idxMu.Lock()
	s.offsets, s.times = offs, times
	s.idxMu.Unlock()
	s.size.Store(m.LogSize)
	s.next.Store(m.NextOffset)
	s.maxTS.Store(m.MaxTimestamp)
	s.indexTS = -1
	if len(times) > 0 {
		s.indexTS = times[len(times)-1].Timestamp
	}
	// The bytes after the last entry are unknown; index the next batch.
	s.sinceIndex = 1 << 30
}

// recentBatches is a ring of the last batches a segment indexed, oldest
// first.
type recentBatches struct {
	m        [16]batchMeta
	start, n int
}

func (r *recentBatches) add(m batchMeta) {
	if r.n < len(r.m) {
		r.m[(r.start+r.n)%len(r.m)] = m
		r.n++
		return
	}
	r.m[r.start] = m
	r.start = (r.start + 1) % len(r.m)
}

// find returns the first batch of the ring published below end whose last
// offset is >= offset, when the ring reaches back to offset. Otherwise,
// from is where a scan for it may start: the end of the ring's last batch
// below offset, 0 when the ring does not reach back to offset.
func (r *recentBatches) find(offset, end int64) (m batchMeta, ok bool, from int64) {
	if r.n == 0 || offset < r.m[r.start].base {
		return batchMeta{}, false, 0
	}
	for i := range r.n {
		m := r.m[(r.start+i)%len(r.m)]
		if m.position+int64(m.size) > end {
			break // not published yet
		}
		if m.lastOff >= offset {
			return m, true, 0
		}
		from = m.position + int64(m.size)
	}
	return batchMeta{}, false, from
}

// dropFrom forgets the batches at or after file position pos (a
// truncation).
func (r *recentBatches) dropFrom(pos int64) {
	for r.n > 0 && r.m[(r.start+r.n-1)%len(r.m)].position >= pos {
		r.n--
	}
}
