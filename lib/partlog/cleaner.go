package partlog

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"math"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// The log cleaner (key compaction) follows Kafka's LogCleaner: Cleaner,
// OffsetMap and LogCleanerManager in the storage module, and
// MemoryRecords.filterTo for the batch rewrite. A pass over one log:
//
//  1. The dirty range runs from the first dirty offset (the
//     cleaner-checkpoint, at least the log start) to the first uncleanable
//     offset: the base of the active segment, the high watermark, the
//     recovery point, and the first segment whose newest batch is younger
//     than MinCompactionLag, whichever is lowest, rounded down to a segment
//     boundary. The dirty ratio is the bytes of the dirty segments over
//     those of every segment below the first uncleanable offset. The pass
//     runs when the ratio reaches MinCleanableDirtyRatio, or when the first
//     dirty batch is older than MaxCompactionLag.
//  2. The offset map holds the newest offset of every key in the dirty
//     range, up to MaxKeys keys; where it fills, the range ends (possibly
//     inside a segment).
//  3. Every sealed segment from the log start to the end of the mapped
//     range is rewritten, in groups of consecutive segments whose total
//     size fits SegmentBytes (Kafka's groupSegmentsBySize), so small cleaned
//     segments merge. A record is kept if it has a key, no newer record of
//     that key is in the map, and it is not a tombstone whose batch's
//     delete horizon has passed. A batch keeps its offsets; see
//     cleanBatch.
//  4. Each group's cleaned segment is written under a temporary name,
//     fsynced, and swapped in (cleanswap.go); the cleaner-checkpoint moves
//     to the end of the mapped range.
//
// Offsets never change: a cleaned segment keeps its base offset (its
// name), its batches keep theirs, and the gaps where records were removed
// are read across like Kafka's (a read returns the next batch that holds
// an offset at or after the one asked for).

// DefaultCleanerMaxKeys is the default offset map capacity: about 2M keys,
// at most ~130 MB while a pass runs (the map stores a 128-bit hash of each
// key and its offset, like Kafka's 24-byte dedupe buffer entries).
const DefaultCleanerMaxKeys = 1 << 21

// CleanConfig is what one cleaning pass needs besides the log's Config
// (whose SegmentBytes bounds merged segments). The fields take the values
// given, with no zero-value defaults: DefaultCleanConfig holds Kafka's.
type CleanConfig struct {
	// DeleteRetention keeps a tombstone this long after the cleaner first
	// kept it (Kafka's delete.retention.ms, default 24h): the batch is
	// stamped with that delete horizon (KIP-534) and a later pass after it
	// removes the tombstone.
	DeleteRetention time.Duration
	// MinCompactionLag leaves a segment uncleaned until its newest batch
	// is this old (min.compaction.lag.ms, default 0).
	MinCompactionLag time.Duration
	// MaxCompactionLag cleans the log, whatever its dirty ratio, once its
	// oldest dirty batch is this old (max.compaction.lag.ms); zero or
	// negative means no bound (Kafka's default, Long.MAX_VALUE).
	MaxCompactionLag time.Duration
	// MinCleanableDirtyRatio is the dirty ratio at which a pass runs
	// (min.cleanable.dirty.ratio, default 0.5).
	MinCleanableDirtyRatio float64
	// MaxKeys bounds the offset map; zero means DefaultCleanerMaxKeys.
	MaxKeys int
	// Throttle, when set, is called with the number of bytes about to be
	// read or written and blocks to keep the cleaner under an I/O rate
	// (log.cleaner.io.max.bytes.per.second); its error ends the pass.
	// Shared by every log a node cleans.
	Throttle func(ctx context.Context, n int) error
}

// DefaultCleanConfig returns Kafka's topic defaults.
func DefaultCleanConfig() CleanConfig {
	return CleanConfig{DeleteRetention: 24 * time.Hour, MinCleanableDirtyRatio: 0.5}
}

// CleanResult describes one pass.
type CleanResult struct {
	// DirtyRatio is the dirty ratio when the pass started (0 with no
	// cleanable bytes).
	DirtyRatio float64
	// Cleaned reports whether the pass ran (the ratio or the lag asked for
	// it); when false the other counts are zero.
	Cleaned bool
	// FirstDirty and CleanedTo bound the dirty range the pass mapped.
	FirstDirty, CleanedTo int64
	// BytesRead and BytesWritten are the segment bytes read (to map and to
	// rewrite) and the cleaned segment bytes written.
	BytesRead, BytesWritten int64
	// SegmentsIn and SegmentsOut count replaced and replacing segments.
	SegmentsIn, SegmentsOut int
	// RecordsRemoved counts records dropped; BatchesRemoved whole batches.
	RecordsRemoved, BatchesRemoved int64
}

// errCleanAborted means the log changed under the pass (truncation, or
// retention deleting the segments it rewrote); the pass stops quietly.
var errCleanAborted = errors.New("partlog: cleaning aborted: the log changed")

// cleanPlan is the part of the log one pass works on, taken under mu.
type cleanPlan struct {
	segs             []*segment // sealed segments from the one holding the log start, below firstUncleanable
	ends             []int64    // ends[i]: the offset after segs[i]'s range (the next segment's base)
	firstDirty       int64
	firstUncleanable int64
	ratio            float64
	truncGen         uint64
	segmentBytes     int64
	indexInterval    int
}

// DirtyRatio returns the log's dirty ratio as the next pass would see it
// (see the notes at the top of cleaner.go), for metrics. It holds the
// append lock briefly and reads no file.
func (l *Log) DirtyRatio(cc CleanConfig) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.planLocked(l.clock(), cc).ratio
}

// planLocked finds the dirty range and its ratio; dueLocked tells whether
// it asks for a pass. The caller holds mu.
func (l *Log) planLocked(now time.Time, cc CleanConfig) cleanPlan {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	cfg := l.cfg.Load()
	p := cleanPlan{truncGen: l.truncGen, segmentBytes: cfg.SegmentBytes, indexInterval: cfg.IndexIntervalBytes}
	logStart := l.logStart.Load()
	p.firstDirty = max(l.cleanerCkpt, logStart)
	limit := min(segs[len(segs)-1].base, l.hw.Load(), l.recoveryPoint.Load())
	nowMs := now.UnixMilli()
	var clean, dirty int64
	for i, s := range segs[:len(segs)-1] {
		end := segs[i+1].base
		if end <= logStart {
			continue
		}
		if end > limit {
			break
		}
		if end > p.firstDirty && cc.MinCompactionLag > 0 && s.maxTS.Load() > nowMs-cc.MinCompactionLag.Milliseconds() {
			break
		}
		if len(p.segs) == 0 && s.base > p.firstDirty {
			p.firstDirty = s.base
		}
		p.segs = append(p.segs, s)
		p.ends = append(p.ends, end)
		if end <= p.firstDirty {
			clean += s.size.Load()
		} else {
			dirty += s.size.Load()
		}
	}
	p.firstUncleanable = p.firstDirty
	if n := len(p.ends); n > 0 {
		p.firstUncleanable = max(p.ends[n-1], p.firstDirty)
	}
	if dirty == 0 {
		return p
	}
	p.ratio = float64(dirty) / float64(clean+dirty)
	return p
}

// dueLocked reports whether plan p asks for a pass: its dirty ratio
// reaches MinCleanableDirtyRatio, or its first dirty batch is older than
// MaxCompactionLag (Kafka's needCompactionNow), which reads that batch's
// header. The caller holds mu.
func (p *cleanPlan) dueLocked(nowMs int64, cc CleanConfig) bool {
	if p.ratio == 0 {
		return false // nothing dirty
	}
	if p.ratio >= cc.MinCleanableDirtyRatio {
		return true
	}
	if cc.MaxCompactionLag <= 0 {
		return false
	}
	for i, s := range p.segs {
		if p.ends[i] > p.firstDirty {
			var hdr [recordbatch.HeaderSize]byte
			m, ok, err := s.find(p.firstDirty, hdr[:])
			return err == nil && ok && m.maxTS >= 0 && nowMs-m.maxTS > cc.MaxCompactionLag.Milliseconds()
		}
	}
	return false
}

// lastBatchesLocked maps each producer id to the last offset of its newest
// batch (see cleanBatch). The caller holds mu.
func (l *Log) lastBatchesLocked() map[int64]int64 {
	out := make(map[int64]int64, len(l.producers.m))
	for id, e := range l.producers.m {
		if n := len(e.batches); n > 0 {
			out[id] = e.batches[n-1].LastOffset
		}
	}
	return out
}

// Clean runs one cleaning pass (see cleaner.go's notes) and reports it.
// Passes on one log run one at a time; appends, reads, flushes and
// retention go on meanwhile, except for the moment each cleaned segment is
// swapped in. A pass that finds the log truncated, or its segments deleted
// by retention, stops without error. A read or write error of the cleaned
// files ends the pass with it; an error while swapping fails the log (its
// recovery completes or undoes the swap). Safe for concurrent use.
func (l *Log) Clean(ctx context.Context, cc CleanConfig) (CleanResult, error) {
	var res CleanResult
	if err := l.writable(); err != nil {
		return res, err
	}
	if cc.MaxKeys <= 0 {
		cc.MaxKeys = DefaultCleanerMaxKeys
	}
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	if err := l.passGoesOn(ctx); err != nil {
		return res, err // Close may have run while this pass waited
	}
	now := l.clock()
	l.mu.Lock()
	p := l.planLocked(now, cc)
	due := p.dueLocked(now.UnixMilli(), cc)
	var lastBatch map[int64]int64
	if due {
		lastBatch = l.lastBatchesLocked()
	}
	l.mu.Unlock()
	res.DirtyRatio, res.FirstDirty = p.ratio, p.firstDirty
	if !due {
		return res, nil
	}
	res.Cleaned = true
	om := newOffsetMap(cc.MaxKeys)
	mapEnd, err := l.buildOffsetMap(ctx, &p, om, cc, &res)
	if err != nil {
		return res, l.cleanError(err)
	}
	res.CleanedTo = mapEnd
	horizon := satAdd(now.UnixMilli(), cc.DeleteRetention.Milliseconds())
	pass := &cleanPass{om: om, nowMs: now.UnixMilli(), horizon: horizon, lastBatch: lastBatch}
	for _, g := range groupBySize(&p, mapEnd) {
		cs, changed, err := l.cleanGroup(ctx, &p, g, pass, cc, &res)
		if err != nil {
			return res, l.cleanError(err)
		}
		if !changed {
			l.discardCleaned(cs)
			continue
		}
		if err := l.swapIn(&p, g, cs, mapEnd); err != nil {
			l.discardCleaned(cs)
			return res, l.cleanError(err)
		}
		res.SegmentsIn += len(g.segs)
		res.SegmentsOut++
		res.BytesWritten += cs.size.Load()
	}
	// The whole mapped range is clean now, swapped or already so.
	if err := l.advanceCleanerCheckpoint(&p, mapEnd); err != nil {
		return res, l.cleanError(err)
	}
	l.logger.Debug("partlog: cleaned", "first_dirty", res.FirstDirty, "cleaned_to", mapEnd,
		"dirty_ratio", res.DirtyRatio, "segments_in", res.SegmentsIn, "segments_out", res.SegmentsOut,
		"records_removed", res.RecordsRemoved, "bytes_read", res.BytesRead, "bytes_written", res.BytesWritten)
	return res, nil
}

// cleanError turns an aborted pass into no error.
func (l *Log) cleanError(err error) error {
	if errors.Is(err, errCleanAborted) {
		l.logger.Debug("partlog: cleaning pass aborted", "err", err)
		return nil
	}
	return err
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// offsetMap maps a 128-bit hash of each key to the offset of its newest
// record, as Kafka's SkimpyOffsetMap maps an MD5 of it: the memory per key
// does not depend on the key's size. Two keys whose 128-bit hashes collide
// would be taken for one; at 2^21 keys the chance is about 2^-87 a pass.
type offsetMap struct {
	seeds [2]maphash.Seed
	m     map[[2]uint64]int64
	max   int
}

func newOffsetMap(maxKeys int) *offsetMap {
	return &offsetMap{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, m: make(map[[2]uint64]int64), max: maxKeys}
}

func (o *offsetMap) hash(key []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(o.seeds[0], key), maphash.Bytes(o.seeds[1], key)}
}

// put records offset for key unless the map is full (a new key at
// capacity); it reports whether it did.
func (o *offsetMap) put(key []byte, offset int64) bool {
	h := o.hash(key)
	if _, ok := o.m[h]; !ok && len(o.m) >= o.max {
		return false
	}
	o.m[h] = offset
	return true
}

// newest returns the newest mapped offset of key.
func (o *offsetMap) newest(key []byte) (int64, bool) {
	off, ok := o.m[o.hash(key)]
	return off, ok
}

// batchReader reads the batches of a sealed segment in order, through a
// window of scanChunk bytes, from its own handle on the file: retention,
// truncation or Close may close the log's handle meanwhile, and an open
// file stays readable after it is removed.
type batchReader struct {
	s        *segment
	f        vfs.File
	pos, end int64
	buf      []byte
	bufPos   int64
	bufLen   int64
}

// newBatchReader opens s for reading. A segment whose file is gone was
// deleted under the pass: errCleanAborted.
func (l *Log) newBatchReader(s *segment, buf []byte) (*batchReader, error) {
	f, err := l.fs.Open(s.path(segmentSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: segment %s deleted", errCleanAborted, segmentName(s.base))
	}
	if err != nil {
		return nil, fmt.Errorf("partlog: clean: open %s: %w", segmentName(s.base), err)
	}
	return &batchReader{s: s, f: f, end: s.size.Load(), buf: buf}, nil
}

func (r *batchReader) close() { _ = r.f.Close() }

// next returns the next batch, CRC-checked, or nil at the end. The bytes
// are valid until the next call.
func (r *batchReader) next() ([]byte, recordbatch.Header, error) {
	if r.pos >= r.end {
		return nil, recordbatch.Header{}, nil
	}
	window := func(n int64) ([]byte, error) {
		if r.pos >= r.bufPos && r.pos+n <= r.bufPos+r.bufLen {
			return r.buf[r.pos-r.bufPos : r.pos-r.bufPos+n], nil
		}
		if n > int64(len(r.buf)) {
			r.buf = make([]byte, n)
		}
		want := min(int64(len(r.buf)), r.end-r.pos)
		got, err := r.f.ReadAt(r.buf[:want], r.pos)
		if err != nil && !(errors.Is(err, io.EOF) && int64(got) == want) {
			return nil, fmt.Errorf("partlog: clean: read %s at %d: %w", segmentName(r.s.base), r.pos, err)
		}
		r.bufPos, r.bufLen = r.pos, int64(got)
		if r.bufLen < n {
			return nil, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(r.s.base), r.pos, io.ErrUnexpectedEOF)
		}
		return r.buf[:n], nil
	}
	b, err := window(recordbatch.LengthPrefixSize)
	if err != nil {
		return nil, recordbatch.Header{}, err
	}
	size, err := recordbatch.PeekSize(b)
	if err == nil {
		b, err = window(int64(size))
	}
	if err != nil {
		return nil, recordbatch.Header{}, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(r.s.base), r.pos, err)
	}
	h, err := recordbatch.Verify(b)
	if err != nil {
		return nil, recordbatch.Header{}, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(r.s.base), r.pos, err)
	}
	r.pos += int64(size)
	return b, h, nil
}

// compactable reports whether the cleaner looks into a batch. Control and
// transactional batches are kept whole and shadow nothing: an aborted
// transaction's record must not remove an older committed one, and the
// segment's aborted transaction index stays true (cleanswap.go carries
// it). Kafka's cleaner removes aborted records and, later, markers;
// Strata keeps them.
func compactable(h recordbatch.Header) bool { return !h.Control() && !h.Transactional() }

// buildOffsetMap maps the keys of the dirty range and returns where the
// mapped range ends: the first uncleanable offset, or, when the map fills,
// the offset after the last mapped record (Kafka's buildOffsetMap).
func (l *Log) buildOffsetMap(ctx context.Context, p *cleanPlan, om *offsetMap, cc CleanConfig, res *CleanResult) (int64, error) {
	first := 0 // the first segment holding dirty offsets
	for first < len(p.segs) && p.ends[first] <= p.firstDirty {
		first++
	}
	mapEnd := p.firstUncleanable
	err := l.eachBatch(ctx, p.segs[first:], cc, res, func(s *segment, h recordbatch.Header, b []byte) error {
		if h.LastOffset() < p.firstDirty || !compactable(h) {
			return nil
		}
		batch, err := recordbatch.Decode(b)
		if err != nil {
			return fmt.Errorf("%w: segment %s offset %d: %w", ErrCorrupt, segmentName(s.base), h.BaseOffset, err)
		}
		for _, rec := range batch.Records {
			if rec.Offset < p.firstDirty || rec.Key == nil {
				continue
			}
			if !om.put(rec.Key, rec.Offset) {
				if rec.Offset == p.firstDirty {
					return fmt.Errorf("partlog: clean: offset map of %d keys cannot hold one record", om.max)
				}
				mapEnd = rec.Offset
				return errStopBatches
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return mapEnd, nil
}

// errStopBatches, returned by eachBatch's fn, ends the walk early and
// without error.
var errStopBatches = errors.New("partlog: clean: stop reading batches")

// eachBatch calls fn with every batch of segs in order, CRC-checked, as
// long as the pass goes on (passGoesOn), counting the bytes read in res
// and throttling them. b is valid until fn returns. An error of fn ends
// the walk and is returned, except errStopBatches, which ends it with nil.
func (l *Log) eachBatch(ctx context.Context, segs []*segment, cc CleanConfig, res *CleanResult,
	fn func(s *segment, h recordbatch.Header, b []byte) error) error {
	buf := make([]byte, scanChunk)
	for _, s := range segs {
		r, err := l.newBatchReader(s, buf)
		if err != nil {
			return err
		}
		err = l.eachBatchOf(ctx, r, cc, res, fn)
		r.close()
		if errors.Is(err, errStopBatches) {
			return nil
		}
		if err != nil {
			return err
		}
		buf = r.buf // keep a window grown for a large batch
	}
	return nil
}

// eachBatchOf is eachBatch over the batches of one segment's reader.
func (l *Log) eachBatchOf(ctx context.Context, r *batchReader, cc CleanConfig, res *CleanResult,
	fn func(s *segment, h recordbatch.Header, b []byte) error) error {
	for {
		if err := l.passGoesOn(ctx); err != nil {
			return err
		}
		b, h, err := r.next()
		if err != nil || b == nil {
			return err
		}
		res.BytesRead += int64(len(b))
		if err := throttle(ctx, cc, len(b)); err != nil {
			return err
		}
		if err := fn(r.s, h, b); err != nil {
			return err
		}
	}
}

// passGoesOn returns why a pass must stop: its context ended, or the log
// was closed (the pass's temporary file is removed on the next open).
func (l *Log) passGoesOn(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

func throttle(ctx context.Context, cc CleanConfig, n int) error {
	if cc.Throttle == nil {
		return nil
	}
	return cc.Throttle(ctx, n)
}

// cleanGroup is a run of consecutive segments rewritten into one.
type cleanGroup struct {
	segs []*segment
	end  int64 // the offset after the group's range
}

// groupBySize splits the segments below mapEnd into runs whose total size
// fits SegmentBytes and whose offsets fit the index's relative offsets, as
// Kafka's groupSegmentsBySize does. Every run has at least one segment.
func groupBySize(p *cleanPlan, mapEnd int64) []cleanGroup {
	var out []cleanGroup
	for i := 0; i < len(p.segs) && p.segs[i].base < mapEnd; {
		g := cleanGroup{segs: p.segs[i : i+1], end: p.ends[i]}
		size := p.segs[i].size.Load()
		j := i + 1
		for ; j < len(p.segs) && p.segs[j].base < mapEnd; j++ {
			size += p.segs[j].size.Load()
			if size > p.segmentBytes || p.ends[j]-g.segs[0].base > math.MaxUint32 {
				break
			}
			g.segs, g.end = p.segs[i:j+1], p.ends[j]
		}
		out = append(out, g)
		i = j
	}
	return out
}

// cleanPass is what filtering a batch needs.
type cleanPass struct {
	om        *offsetMap
	nowMs     int64
	horizon   int64           // delete horizon stamped on batches whose tombstones are kept for the first time
	lastBatch map[int64]int64 // producer id -> last offset of its newest batch
}

// cleanBatch returns what the cleaned segment keeps of one batch: b itself
// when nothing changes, a rewritten batch, or nil to drop it. As Kafka's
// MemoryRecords.filterTo and Cleaner.shouldRetainRecord:
//   - a record is kept when it has a key, no newer record of the key is
//     mapped, and it is not a tombstone of a batch whose delete horizon has
//     passed (keyless records are removed, as Kafka's cleaner does);
//   - a batch that keeps a tombstone and has no delete horizon yet gets
//     one, now + DeleteRetention;
//   - a rewritten batch keeps its offsets, producer fields and codec
//     (recordbatch.Retain);
//   - a batch left with no records is dropped, unless it is the newest
//     batch of its idempotent producer: it is then kept empty, so its last
//     sequence survives for the producer state rebuilt from the log
//     (BatchRetention.RETAIN_EMPTY).
func (c *cleanPass) cleanBatch(h recordbatch.Header, b []byte) (out []byte, removed int64, err error) {
	if !compactable(h) {
		return b, 0, nil
	}
	batch, err := recordbatch.Decode(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: offset %d: %w", ErrCorrupt, h.BaseOffset, err)
	}
	hz, hasHorizon := h.DeleteHorizon()
	horizonPassed := hasHorizon && c.nowMs >= hz
	kept := batch.Records[:0]
	tombstone := false
	for _, r := range batch.Records {
		if r.Key == nil {
			continue
		}
		if newest, ok := c.om.newest(r.Key); ok && newest > r.Offset {
			continue
		}
		if r.Value == nil {
			if horizonPassed {
				continue
			}
			tombstone = true
		}
		kept = append(kept, r)
	}
	removed = int64(len(batch.Records) - len(kept))
	stamp := tombstone && !hasHorizon
	switch {
	case removed == 0 && !stamp:
		return b, 0, nil
	case len(kept) == 0:
		if last, ok := c.lastBatch[h.ProducerID]; h.ProducerID >= 0 && ok && last == h.LastOffset() {
			out, err = recordbatch.Retain(h, nil, -1)
			return out, removed, err
		}
		return nil, removed, nil
	}
	horizon := int64(-1)
	if stamp {
		horizon = c.horizon
	}
	out, err = recordbatch.Retain(h, kept, horizon)
	return out, removed, err
}

// cleanGroup writes the cleaned form of g to its temporary file, fsynced,
// and returns it as a segment ready to swap in (its file open), and
// whether anything changed.
func (l *Log) cleanGroup(ctx context.Context, p *cleanPlan, g cleanGroup, pass *cleanPass, cc CleanConfig, res *CleanResult) (*segment, bool, error) {
	base := g.segs[0].base
	f, err := l.fs.Create(l.join(cleanedName(base)))
	if err != nil {
		return nil, false, fmt.Errorf("partlog: clean: create %s: %w", cleanedName(base), err)
	}
	cs := newSegment(l.dir, base, f, l.clock())
	changed := len(g.segs) > 1
	fail := func(err error) (*segment, bool, error) {
		l.discardCleaned(cs)
		return nil, false, err
	}
	var out []byte
	var pos int64
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		if err := throttle(ctx, cc, len(out)); err != nil {
			return err
		}
		if _, err := f.WriteAt(out, pos); err != nil {
			return fmt.Errorf("partlog: clean: write %s: %w", cleanedName(base), err)
		}
		pos += int64(len(out))
		out = out[:0]
		return nil
	}
	written := int64(0)
	err = l.eachBatch(ctx, g.segs, cc, res, func(s *segment, h recordbatch.Header, b []byte) error {
		kept, removed, err := pass.cleanBatch(h, b)
		if err != nil {
			return fmt.Errorf("%w (segment %s)", err, segmentName(s.base))
		}
		res.RecordsRemoved += removed
		if kept == nil {
			res.BatchesRemoved++
			changed = true
			return nil
		}
		if len(kept) != len(b) || &kept[0] != &b[0] {
			changed = true
		}
		m, _ := peekBatch(kept)
		cs.indexBatch(m, written, p.indexInterval)
		written += int64(m.size)
		out = append(out, kept...)
		if len(out) >= scanChunk {
			return flush()
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if !changed {
		return cs, false, nil
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("partlog: clean: fsync %s: %w", cleanedName(base), err))
	}
	cs.size.Store(written)
	cs.next.Store(g.end)
	return cs, true, nil
}

// discardCleaned closes and removes a cleaned segment that will not be
// swapped in.
func (l *Log) discardCleaned(cs *segment) {
	if cs == nil {
		return
	}
	_ = cs.file.Close()
	if err := l.fs.Remove(l.join(cleanedName(cs.base))); err != nil {
		l.logger.Debug("partlog: remove cleaned file; open removes it", "file", cleanedName(cs.base), "err", err)
	}
}
