// Package reader serves reads from the tier: it finds the manifest entry
// holding an offset, looks the offset up in the segment's uploaded offset
// index, and reads the batches with range GETs of fixed-size blocks kept in
// a bounded LRU cache. A small read fetches one or two blocks, never the
// whole object; a consumer reading on sequentially hits the cached blocks.
//
// Returned batches are exactly the bytes uploaded, each checked against its
// CRC before it leaves, like a local read. A read_committed read
// (ReadCommitted) also collects the aborted transactions of what it
// returns from the segments' .txnindex objects, as a local log does.
package reader

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/segment"
)

// Defaults.
const (
	DefaultBlockSize   = 1 << 20   // bytes per range GET and cache block
	DefaultCacheBytes  = 256 << 20 // block cache bound
	DefaultManifestTTL = time.Second
	maxIndexes         = 4096
)

// Errors.
var (
	// ErrOutOfRange: the offset is not in the tier; see OutOfRangeError.
	ErrOutOfRange = errors.New("reader: offset out of the tiered range")
	// ErrDataLoss: an object the manifest names is missing or corrupt.
	ErrDataLoss = errors.New("reader: tiered data lost")
)

// OutOfRangeError carries the tiered range.
type OutOfRangeError struct {
	Offset, LogStart, TieredEnd int64
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("reader: offset %d is outside the tiered range [%d, %d)", e.Offset, e.LogStart, e.TieredEnd)
}

// Is makes errors.Is(err, ErrOutOfRange) true.
func (e *OutOfRangeError) Is(target error) bool { return target == ErrOutOfRange }

// Config configures a Reader.
type Config struct {
	Store       *manifest.Store
	BlockSize   int64         // default DefaultBlockSize
	CacheBytes  int64         // default DefaultCacheBytes
	ManifestTTL time.Duration // how long a cached manifest is trusted; default DefaultManifestTTL
}

// Reader reads tiered batches. Safe for concurrent use.
type Reader struct {
	cfg    Config
	blocks *blockCache

	mu          sync.Mutex
	manifests   map[manifest.Partition]cachedManifest
	indexes     map[string]*segment.OffsetIndex
	timeIndexes map[string]*segment.TimeIndex
	txnIndexes  map[string]*segment.TxnIndex

	fetched atomic.Int64 // bytes fetched from the bucket
	gets    atomic.Int64 // range GETs
}

type cachedManifest struct {
	m  *tieringv1.Manifest
	at time.Time
}

// New returns a Reader.
func New(cfg Config) *Reader {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.ManifestTTL <= 0 {
		cfg.ManifestTTL = DefaultManifestTTL
	}
	return &Reader{cfg: cfg, blocks: newBlockCache(cfg.CacheBytes),
		manifests: map[manifest.Partition]cachedManifest{}, indexes: map[string]*segment.OffsetIndex{},
		timeIndexes: map[string]*segment.TimeIndex{}, txnIndexes: map[string]*segment.TxnIndex{}}
}

// Stats reports the bytes and range GETs fetched from the bucket, and the
// bytes cached now.
type Stats struct {
	FetchedBytes, RangeGets, CachedBytes int64
}

// Stats returns counters since New.
func (r *Reader) Stats() Stats {
	return Stats{FetchedBytes: r.fetched.Load(), RangeGets: r.gets.Load(), CachedBytes: r.blocks.bytes()}
}

// SetManifest installs a manifest this process just wrote, so reads see it
// at once.
func (r *Reader) SetManifest(p manifest.Partition, m *tieringv1.Manifest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.manifests[p]; ok && c.m.GetVersion() > m.GetVersion() {
		return
	}
	r.manifests[p] = cachedManifest{m: m, at: time.Now()}
}

// Manifest returns the partition's manifest, from the cache when fresh
// enough (or when fresh is false and one is cached).
func (r *Reader) Manifest(ctx context.Context, p manifest.Partition, fresh bool) (*tieringv1.Manifest, error) {
	r.mu.Lock()
	c, ok := r.manifests[p]
	r.mu.Unlock()
	if ok && (!fresh || time.Since(c.at) < r.cfg.ManifestTTL) {
		return c.m, nil
	}
	m, _, err := r.cfg.Store.Load(ctx, p)
	if err != nil {
		return nil, err
	}
	r.SetManifest(p, m)
	return m, nil
}

// Result is one tiered read.
type Result struct {
	Records   []byte // whole batches, as uploaded
	LogStart  int64  // first tiered offset, -1 when nothing is tiered
	TieredEnd int64  // one past the last tiered offset, -1 when nothing is tiered
	// Next is the offset after the last batch returned; the read's offset
	// when none is.
	Next int64

	// The fields below are set by ReadCommitted only.

	// Aborted lists the aborted transactions overlapping [offset, Next),
	// in the order of their markers (see ReadCommitted).
	Aborted []partlog.AbortedTxn
	// AbortedComplete is true when the walk for Aborted stopped at an entry
	// whose last stable offset reaches Next, so no later marker can add to
	// it; false when it ran off the tier's end.
	AbortedComplete bool
	// TxnIndexKnown is true when every segment walked carries its
	// transaction index; false when the walk met a segment uploaded before
	// tiered segments carried it (the walk stops there, and Aborted may
	// miss transactions).
	TxnIndexKnown bool

	manifest *tieringv1.Manifest // the manifest the read was served from
}

// Read returns whole batches starting with the one holding offset, up to
// maxBytes except that the first batch is returned whole, from one object
// only (so it may return less near an object's end).
//
// An object that is missing while the manifest names it is looked for again
// in a fresh manifest: compaction replaces entries and retires their
// objects, so a reader holding an older manifest retries once with the
// current one before reporting data loss.
func (r *Reader) Read(ctx context.Context, p manifest.Partition, offset int64, maxBytes int) (Result, error) {
	return withManifest(ctx, r, p, func(m *tieringv1.Manifest) (Result, error) {
		return r.read(ctx, p, m, offset, maxBytes)
	})
}

// ReadCommitted is Read for a read_committed fetch: it also collects, in
// the same manifest, the aborted transactions overlapping the batches it
// returns, as partlog's AbortedTxns does on a local log (Kafka's
// collectAbortedTransactions, which KIP-405's RemoteLogManager runs over
// remote segments' transaction indexes): from the segment holding offset
// onwards, the entries whose marker is at or after offset and whose first
// offset is below Next, stopping at the first entry whose last stable
// offset reaches Next (no transaction listed after it can start below
// Next). Index objects are cached like the offset indexes.
func (r *Reader) ReadCommitted(ctx context.Context, p manifest.Partition, offset int64, maxBytes int) (Result, error) {
	return withManifest(ctx, r, p, func(m *tieringv1.Manifest) (Result, error) {
		res, err := r.read(ctx, p, m, offset, maxBytes)
		if err != nil || len(res.Records) == 0 {
			res.AbortedComplete, res.TxnIndexKnown = true, true
			return res, err
		}
		res.Aborted, res.AbortedComplete, res.TxnIndexKnown, err = r.abortedTxns(ctx, res.manifest, offset, res.Next)
		return res, err
	})
}

// abortedTxns walks the active entries of m from the one holding from (see
// ReadCommitted).
func (r *Reader) abortedTxns(ctx context.Context, m *tieringv1.Manifest, from, to int64) (out []partlog.AbortedTxn, complete, known bool, _ error) {
	active := manifest.Active(m)
	i := sort.Search(len(active), func(i int) bool { return active[i].GetLastOffset() >= from })
	for ; i < len(active); i++ {
		e := active[i]
		if !e.GetTxnIndexKnown() {
			return out, false, false, nil
		}
		x, err := r.txnIndex(ctx, e)
		if err != nil {
			return nil, false, false, err
		}
		if x == nil {
			continue // no abort marker in the segment
		}
		for _, t := range x.Entries {
			if t.LastOffset >= from && t.FirstOffset < to {
				out = append(out, t)
			}
			if t.LastStableOffset >= to {
				return out, true, true, nil
			}
		}
	}
	return out, false, true, nil
}

// withManifest runs fn with the partition's manifest, and once more with a
// freshly loaded one when fn finds an object the manifest names missing
// and the manifest has changed since (compaction or retention replaced it).
func withManifest[T any](ctx context.Context, r *Reader, p manifest.Partition, fn func(*tieringv1.Manifest) (T, error)) (T, error) {
	m, err := r.Manifest(ctx, p, true)
	if err != nil {
		var zero T
		return zero, err
	}
	res, err := fn(m)
	if !errors.Is(err, errMissing) {
		return res, err
	}
	m2, _, lerr := r.cfg.Store.Load(ctx, p)
	if lerr != nil || m2.GetVersion() == m.GetVersion() {
		return res, err
	}
	r.SetManifest(p, m2)
	return fn(m2)
}

// errMissing marks an object or index the manifest names that is missing.
var errMissing = fmt.Errorf("%w: object is missing", ErrDataLoss)

func (r *Reader) read(ctx context.Context, p manifest.Partition, m *tieringv1.Manifest, offset int64, maxBytes int) (Result, error) {
	if end := manifest.TieredEnd(m); end < 0 || offset < manifest.LogStart(m) || offset >= end {
		// The cached copy may be behind a writer elsewhere: look again.
		m2, _, err := r.cfg.Store.Load(ctx, p)
		if err != nil {
			return Result{}, err
		}
		r.SetManifest(p, m2)
		m = m2
	}
	end := manifest.TieredEnd(m)
	res := Result{LogStart: manifest.LogStart(m), TieredEnd: end, Next: offset, manifest: m}
	if end < 0 || offset < res.LogStart || offset >= end {
		return res, &OutOfRangeError{Offset: offset, LogStart: res.LogStart, TieredEnd: end}
	}
	e := manifest.Find(m, offset)
	if e == nil {
		return res, &OutOfRangeError{Offset: offset, LogStart: res.LogStart, TieredEnd: end}
	}
	idx, err := r.index(ctx, e)
	if err != nil {
		return res, err
	}
	obj := object{r: r, key: e.GetObjectKey(), size: e.GetSizeBytes()}
	pos := idx.Lookup(offset)
	var hdr [recordbatch.HeaderSize]byte
	// Find the batch holding offset.
	for {
		if pos >= obj.size {
			return res, nil // offset falls in a gap at the object's end (compacted)
		}
		if err := obj.readAt(ctx, hdr[:], pos); err != nil {
			return res, err
		}
		h, err := recordbatch.PeekHeader(hdr[:])
		if err != nil {
			return res, fmt.Errorf("%w: %s at %d: %w", ErrDataLoss, obj.key, pos, err)
		}
		if h.LastOffset() >= offset {
			break
		}
		pos += int64(h.Size())
	}
	start, stop := pos, pos
	for stop < obj.size {
		if err := obj.readAt(ctx, hdr[:], stop); err != nil {
			return res, err
		}
		h, err := recordbatch.PeekHeader(hdr[:])
		if err != nil {
			return res, fmt.Errorf("%w: %s at %d: %w", ErrDataLoss, obj.key, stop, err)
		}
		if stop > start && stop-start+int64(h.Size()) > int64(maxBytes) {
			break
		}
		stop += int64(h.Size())
		res.Next = h.NextOffset()
	}
	out := make([]byte, stop-start)
	if err := obj.readAt(ctx, out, start); err != nil {
		return res, err
	}
	it := recordbatch.NewIter(out, true)
	for {
		if _, _, ok := it.Next(); !ok {
			break
		}
	}
	if it.Err() != nil {
		return res, fmt.Errorf("%w: %s: %w", ErrDataLoss, obj.key, it.Err())
	}
	res.Records = out
	return res, nil
}

func (r *Reader) index(ctx context.Context, e *tieringv1.SegmentEntry) (*segment.OffsetIndex, error) {
	return cachedIndex(ctx, r, r.indexes, e.GetOffsetIndexKey(), segment.DecodeOffsetIndex)
}

func (r *Reader) timeIndex(ctx context.Context, e *tieringv1.SegmentEntry) (*segment.TimeIndex, error) {
	return cachedIndex(ctx, r, r.timeIndexes, e.GetTimeIndexKey(), segment.DecodeTimeIndex)
}

// txnIndex returns the entry's aborted transaction index; nil when the
// entry names none (its index is unknown, or it has no abort marker).
func (r *Reader) txnIndex(ctx context.Context, e *tieringv1.SegmentEntry) (*segment.TxnIndex, error) {
	return cachedIndex(ctx, r, r.txnIndexes, e.GetTxnIndexKey(), func(b []byte) (*segment.TxnIndex, error) {
		return segment.DecodeTxnIndex(b, e.GetBaseOffset(), e.GetLastOffset()+1)
	})
}

// cachedIndex returns the decoded index object at key from cache, reading
// and decoding it on a miss; nil (a scan from the object's start) when the
// entry names none. The cache holds at most maxIndexes of each kind.
func cachedIndex[X any](ctx context.Context, r *Reader, cache map[string]*X, key string, decode func([]byte) (*X, error)) (*X, error) {
	if key == "" {
		return nil, nil
	}
	r.mu.Lock()
	idx := cache[key]
	r.mu.Unlock()
	if idx != nil {
		return idx, nil
	}
	data, err := objstore.ReadAll(ctx, r.cfg.Store.Bucket, key, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: index %s", errMissing, key)
	}
	if err != nil {
		return nil, err
	}
	r.fetched.Add(int64(len(data)))
	r.gets.Add(1)
	idx, err = decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDataLoss, key, err)
	}
	r.mu.Lock()
	if len(cache) >= maxIndexes {
		for k := range cache { // drop an arbitrary one
			delete(cache, k)
			break
		}
	}
	cache[key] = idx
	r.mu.Unlock()
	return idx, nil
}

// TimestampResult is the answer of OffsetForTimestamp.
type TimestampResult struct {
	Offset      int64 // base offset of the batch found (at least LogStart), -1 when none
	Timestamp   int64 // its MaxTimestamp, -1 when none
	LeaderEpoch int32 // its leader epoch, -1 when none
	LogStart    int64 // first tiered offset, -1 when nothing is tiered
	TieredEnd   int64 // one past the last tiered offset, -1 when nothing is tiered
}

// OffsetForTimestamp finds the first tiered batch whose MaxTimestamp is at
// or after ts, as a local log answers ListOffsets by timestamp: entries
// whose max_timestamp_ms is older are skipped, the first other entry's time
// index gives where to start, and batch headers are read from there
// through the block cache. Offset is -1 when no tiered batch is that late.
// Like Read, it retries once with a fresh manifest when an object it names
// is missing.
func (r *Reader) OffsetForTimestamp(ctx context.Context, p manifest.Partition, ts int64) (TimestampResult, error) {
	return withManifest(ctx, r, p, func(m *tieringv1.Manifest) (TimestampResult, error) {
		return r.offsetForTimestamp(ctx, m, ts)
	})
}

func (r *Reader) offsetForTimestamp(ctx context.Context, m *tieringv1.Manifest, ts int64) (TimestampResult, error) {
	res := TimestampResult{Offset: -1, Timestamp: -1, LeaderEpoch: -1, LogStart: manifest.LogStart(m), TieredEnd: manifest.TieredEnd(m)}
	if res.TieredEnd < 0 {
		res.LogStart = -1
	}
	var hdr [recordbatch.HeaderSize]byte
	for _, e := range manifest.Active(m) {
		if e.GetMaxTimestampMs() < ts {
			continue
		}
		from := e.GetBaseOffset()
		tix, err := r.timeIndex(ctx, e)
		if err != nil {
			return res, err
		}
		if tix != nil {
			from = max(from, tix.Lookup(ts))
		}
		idx, err := r.index(ctx, e)
		if err != nil {
			return res, err
		}
		obj := object{r: r, key: e.GetObjectKey(), size: e.GetSizeBytes()}
		for pos := idx.Lookup(from); pos < obj.size; {
			if err := obj.readAt(ctx, hdr[:], pos); err != nil {
				return res, err
			}
			h, err := recordbatch.PeekHeader(hdr[:])
			if err != nil {
				return res, fmt.Errorf("%w: %s at %d: %w", ErrDataLoss, obj.key, pos, err)
			}
			if h.LastOffset() >= from && h.MaxTimestamp >= ts {
				res.Offset, res.Timestamp, res.LeaderEpoch = max(h.BaseOffset, res.LogStart), h.MaxTimestamp, h.PartitionLeaderEpoch
				return res, nil
			}
			pos += int64(h.Size())
		}
	}
	return res, nil
}

// object reads one object through the block cache.
type object struct {
	r    *Reader
	key  string
	size int64
}

func (o object) readAt(ctx context.Context, p []byte, off int64) error {
	if off+int64(len(p)) > o.size {
		return fmt.Errorf("%w: %s: read %d bytes at %d past its size %d", ErrDataLoss, o.key, len(p), off, o.size)
	}
	bs := o.r.cfg.BlockSize
	for len(p) > 0 {
		i := off / bs
		blk, err := o.block(ctx, i)
		if err != nil {
			return err
		}
		n := copy(p, blk[off-i*bs:])
		if n == 0 {
			return fmt.Errorf("%w: %s: short block %d", ErrDataLoss, o.key, i)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (o object) block(ctx context.Context, i int64) ([]byte, error) {
	k := blockKey{o.key, i}
	if b, ok := o.r.blocks.get(k); ok {
		return b, nil
	}
	bs := o.r.cfg.BlockSize
	n := min(bs, o.size-i*bs)
	b, err := objstore.ReadAll(ctx, o.r.cfg.Store.Bucket, o.key, i*bs, n)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", errMissing, o.key)
	}
	if err != nil {
		return nil, err
	}
	o.r.fetched.Add(int64(len(b)))
	o.r.gets.Add(1)
	if int64(len(b)) != n {
		return nil, fmt.Errorf("%w: %s block %d: got %d bytes, want %d", ErrDataLoss, o.key, i, len(b), n)
	}
	o.r.blocks.put(k, b)
	return b, nil
}
