package partlog

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// ProducerWindow is how many recent batches the log remembers per
// idempotent producer, as Kafka does: a producer has at most 5 requests in
// flight with idempotence, so a retry always finds its batch among them.
const ProducerWindow = 5

// ProducerBatch is one remembered batch of an idempotent producer.
type ProducerBatch struct {
	FirstSeq, LastSeq       int32 // sequence numbers of its first and last record
	FirstOffset, LastOffset int64 // offsets it was given
}

// ProducerState is what the log remembers of one producer id: the facts
// the batches in the log state. What a leader accepts next (the sequence
// and epoch rules) is decided by its caller.
type ProducerState struct {
	// Epoch is the latest producer epoch seen.
	Epoch int16
	// LastSeen is the log's clock when its last batch was appended (or
	// read back on open, which only makes it later). The state expires
	// Config.ProducerExpiry after it.
	LastSeen time.Time
	// Batches are its last ProducerWindow batches of Epoch, oldest first.
	Batches []ProducerBatch
}

// producerEntry is the in-memory form of a ProducerState.
type producerEntry struct {
	epoch    int16
	lastSeen int64           // Unix ms
	batches  []ProducerBatch // capacity ProducerWindow once used
}

// producers is the idempotent-producer state of the log, built from the
// batch headers as they are appended, saved in snapshot files and rebuilt
// from the newest snapshot and the batches after it on open and after
// truncation. Not safe for concurrent use: Log.mu guards it.
type producers struct {
	m map[int64]*producerEntry
}

func newProducers() *producers { return &producers{m: make(map[int64]*producerEntry)} }

// record remembers one batch whose base offset is stamped. Batches without
// a producer id and control batches change nothing; a batch of an older
// producer epoch than the one remembered is kept out of the window (only
// the leader refuses those, so a follower copies what its leader wrote).
func (p *producers) record(h recordbatch.Header, nowMs int64) {
	if h.ProducerID < 0 || h.Control() {
		return
	}
	e := p.m[h.ProducerID]
	if e == nil || h.ProducerEpoch > e.epoch {
		e = &producerEntry{epoch: h.ProducerEpoch, batches: make([]ProducerBatch, 0, ProducerWindow)}
		p.m[h.ProducerID] = e
	}
	e.lastSeen = max(e.lastSeen, nowMs)
	if h.ProducerEpoch < e.epoch {
		return
	}
	if len(e.batches) == ProducerWindow {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:ProducerWindow-1]
	}
	e.batches = append(e.batches, ProducerBatch{
		FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(),
		FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(),
	})
}

// recordAll remembers every batch of b, whole batches with stamped offsets
// (checked by the append path).
func (p *producers) recordAll(b []byte, nowMs int64) {
	for len(b) > 0 {
		h, err := recordbatch.PeekHeader(b)
		if err != nil {
			return
		}
		p.record(h, nowMs)
		b = b[h.Size():]
	}
}

// before returns a copy of p as of offset: each producer's remembered
// batches limited to those that end below offset. It is the state a log
// starting at offset begins with, so that after appending the batches from
// offset on it holds what p holds: a producer whose epoch changed above
// offset keeps its newer epoch (the older batches it then appends stay out
// of the window, as they do here), and one with more than ProducerWindow
// batches above offset pushes the older ones out either way.
func (p *producers) before(offset int64) *producers {
	out := newProducers()
	for id, e := range p.m {
		c := &producerEntry{epoch: e.epoch, lastSeen: e.lastSeen, batches: make([]ProducerBatch, 0, ProducerWindow)}
		for _, b := range e.batches {
			if b.LastOffset < offset {
				c.batches = append(c.batches, b)
			}
		}
		out.m[id] = c
	}
	return out
}

// expire forgets producers not seen for ttl (none when ttl < 0) and
// returns how many.
func (p *producers) expire(nowMs int64, ttl time.Duration) int {
	if ttl < 0 {
		return 0
	}
	n := 0
	for id, e := range p.m {
		if nowMs-e.lastSeen >= ttl.Milliseconds() {
			delete(p.m, id)
			n++
		}
	}
	return n
}

func (p *producers) sortedIDs() []int64 { return slices.Sorted(maps.Keys(p.m)) }

// Producer returns what the log remembers of producer id, or false when it
// remembers nothing (a new producer, or one whose state expired). The
// returned Batches are a copy.
func (l *Log) Producer(id int64) (ProducerState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.producers.m[id]
	if e == nil {
		return ProducerState{}, false
	}
	return ProducerState{Epoch: e.epoch, LastSeen: time.UnixMilli(e.lastSeen), Batches: slices.Clone(e.batches)}, true
}

// ActiveProducer is one producer id the log remembers, for
// DescribeProducers.
type ActiveProducer struct {
	ID int64
	ProducerState
}

// Producers returns every producer id the log remembers and has not
// expired, by id (Kafka's DescribeProducers lists the same: the state
// ProducerStateManager keeps). The Batches are copies.
func (l *Log) Producers() []ActiveProducer {
	l.mu.Lock()
	defer l.mu.Unlock()
	ttl := l.cfg.Load().ProducerExpiry
	now := l.clock().UnixMilli()
	var out []ActiveProducer
	for _, id := range l.producers.sortedIDs() {
		e := l.producers.m[id]
		if ttl >= 0 && now-e.lastSeen >= ttl.Milliseconds() {
			continue // expired; the next expiry round forgets it
		}
		out = append(out, ActiveProducer{ID: id, ProducerState: ProducerState{Epoch: e.epoch, LastSeen: time.UnixMilli(e.lastSeen), Batches: slices.Clone(e.batches)}})
	}
	return out
}

// ProducerStateAt returns the idempotent-producer state as of offset, in
// the producer snapshot format (producersnapshot.go), for a replica that
// starts its log at offset (a follower whose log lies below ours; see
// ResetWithProducers): without it, that replica would not know producers
// whose batches are all below offset, and once it led, a retry of one of
// those batches would be appended again. offset must lie within the log.
func (l *Log) ProducerStateAt(offset int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if start, end := l.logStart.Load(), l.leo.Load(); offset < start || offset > end {
		return nil, &OffsetOutOfRangeError{Offset: offset, LogStart: start, LogEnd: end}
	}
	return encodeSnapshot(offset, l.producers.before(offset)), nil
}

// ProducersComplete reports whether the producer state knows every
// producer the log's history holds: false for a while
// (Config.ProducerExpiry) after the log was restarted at an offset with no
// state to begin with. A leader then cannot tell a retry of a batch it
// holds from a new producer, and refuses unknown producers that do not
// start at sequence 0.
func (l *Log) ProducersComplete() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.producersGapUntil == 0 || l.clock().UnixMilli() >= l.producersGapUntil
}

// markProducersGapLocked records, in memory and in the producer-gap file,
// that the producer state may lack producers below the log start. A
// failed write is logged: the gap then lasts until the log is reopened.
// The caller holds mu.
func (l *Log) markProducersGapLocked() {
	l.producersGapUntil = l.clock().Add(l.cfg.Load().ProducerExpiry).UnixMilli()
	if err := producerGapCheckpoint.write(l.fs, l.dir, l.producersGapUntil); err != nil {
		l.logger.Warn("partlog: producer state incomplete, and not saved so", "err", err)
	}
}

// clearProducersGapLocked forgets a producer gap. The caller holds mu.
func (l *Log) clearProducersGapLocked() {
	l.producersGapUntil = 0
	if err := l.fs.Remove(l.join(producerGapFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("partlog: remove producer-gap", "err", err)
	}
}

// loadProducersGap reads the producer-gap file at open; an expired one is
// removed. The caller is Open.
func (l *Log) loadProducersGap() {
	until, err := producerGapCheckpoint.read(l.fs, l.dir)
	switch {
	case errors.Is(err, errNoCheckpoint):
	case err != nil:
		// Unreadable: assume the gap, from now (the file said there was one).
		l.logger.Warn("partlog: producer-gap unreadable; assuming the producer state incomplete", "err", err)
		l.markProducersGapLocked()
	case l.clock().UnixMilli() >= until:
		l.clearProducersGapLocked()
	default:
		l.producersGapUntil = until
	}
}

// snapshotOffsets lists the offsets of the snapshot files, ascending.
func (l *Log) snapshotOffsets() []int64 {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		l.logger.Warn("partlog: list producer snapshots", "err", err)
		return nil
	}
	var offs []int64
	for _, name := range names {
		if off, ok := parseSnapshotName(name); ok {
			offs = append(offs, off)
		}
	}
	slices.Sort(offs)
	return offs
}

// removeSnapshots deletes the snapshots whose offset drop selects and
// reports whether it deleted any. The removal is durable only once the
// directory is fsynced.
func (l *Log) removeSnapshots(drop func(off int64) bool) bool {
	removed := false
	for _, off := range l.snapshotOffsets() {
		if drop(off) {
			if err := l.fs.Remove(l.join(snapshotName(off))); err != nil {
				l.logger.Warn("partlog: remove producer snapshot", "snapshot", snapshotName(off), "err", err)
			}
			removed = true
		}
	}
	return removed
}

// writeSnapshotLocked saves the producer state, as of the log end offset,
// to the snapshot file of that offset. durable fsyncs it and the directory
// (Close, and before retention deletes segments); otherwise it is written
// like an index, unsynced, and a torn one fails its CRC on open, where the
// next older snapshot is used instead. Expired producers are dropped
// first. Other snapshots inside the active segment, below this one, are
// removed: the snapshots at segment bases are what truncation falls back
// to. A failure is logged, not returned: snapshots save reading the log,
// and the state in memory stays right. The caller holds mu.
func (l *Log) writeSnapshotLocked(durable bool) {
	leo := l.leo.Load()
	l.producers.expire(l.clock().UnixMilli(), l.cfg.Load().ProducerExpiry)
	b := encodeSnapshot(leo, l.producers)
	path := l.join(snapshotName(leo))
	var err error
	if durable {
		err = vfs.WriteFileAtomic(l.fs, path, b)
	} else {
		err = writeUnsynced(l.fs, path, b)
		l.dirDirty = true
	}
	if err != nil {
		l.logger.Warn("partlog: write producer snapshot", "snapshot", snapshotName(leo), "err", err)
		return
	}
	base := l.active().base
	l.removeSnapshots(func(off int64) bool { return off > base && off < leo })
}

// writeUnsynced replaces a file through a temporary name without fsync.
func writeUnsynced(fsys vfs.FS, path string, b []byte) error {
	tmp := path + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
	}
	return err
}

// loadProducersLocked rebuilds the producer state after open or
// truncation: it removes snapshots past the log end (their batches are
// gone), loads the newest snapshot that decodes, removing those that do
// not, and reads the batch headers from its offset (or from the first
// segment when there is none) to the log end. A batch header that cannot
// be read ends the scan with a warning: the state then lacks what follows
// (those producers look new), and reads of that batch fail on their own.
// The caller holds mu, or is Open.
func (l *Log) loadProducersLocked() {
	leo := l.leo.Load()
	// Snapshots past the log end must stay gone: once the log grows past
	// their offset again, one brought back by a crash would be taken for
	// the state of batches it never saw.
	removed := l.removeSnapshots(func(off int64) bool { return off > leo })
	l.producers = newProducers()
	from := l.segs[0].base
	offs := l.snapshotOffsets()
	for i := len(offs) - 1; i >= 0; i-- {
		name := snapshotName(offs[i])
		b, err := vfs.ReadFile(l.fs, l.join(name))
		var ps *producers
		var at int64
		if err == nil {
			at, ps, err = decodeSnapshot(b)
			if err == nil && at != offs[i] {
				err = fmt.Errorf("%w: holds offset %d", errSnapshot, at)
			}
		}
		if err != nil {
			l.logger.Warn("partlog: producer snapshot unusable; removing it and reading more of the log", "snapshot", name, "err", err)
			_ = l.fs.Remove(l.join(name))
			removed = true
			continue
		}
		l.producers, from = ps, max(at, from)
		break
	}
	if removed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			l.logger.Warn("partlog: fsync dir after removing producer snapshots", "err", err)
		}
	}
	if err := l.scanProducersLocked(from, leo); err != nil {
		l.logger.Warn("partlog: producer state may be incomplete", "from", from, "err", err)
	}
	l.producers.expire(l.clock().UnixMilli(), l.cfg.Load().ProducerExpiry)
}

// scanProducersLocked records the batches in [from, end) from their
// headers, reading each segment in chunks. The caller holds mu, or is
// Open.
func (l *Log) scanProducersLocked(from, end int64) error {
	now := l.clock().UnixMilli()
	var buf []byte
	for _, s := range l.segs {
		if s.next.Load() <= from {
			continue
		}
		if s.base >= end {
			break
		}
		if buf == nil {
			buf = make([]byte, scanChunk)
		}
		pos, size := int64(0), s.size.Load()
		if from > s.base {
			pos = s.lookup(from)
		}
		var bufPos, bufLen int64 // buf[:bufLen] holds the file from bufPos
		for pos < size {
			if pos < bufPos || pos+recordbatch.HeaderSize > bufPos+bufLen {
				want := min(int64(len(buf)), size-pos)
				n, err := s.file.ReadAt(buf[:want], pos)
				if err != nil && !(errors.Is(err, io.EOF) && int64(n) == want) {
					return fmt.Errorf("partlog: read %s at %d for producer state: %w", segmentName(s.base), pos, err)
				}
				bufPos, bufLen = pos, int64(n)
			}
			h, err := recordbatch.PeekHeader(buf[pos-bufPos : bufLen])
			if err != nil {
				return fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(s.base), pos, err)
			}
			if h.BaseOffset >= end {
				return nil
			}
			if h.LastOffset() >= from {
				l.producers.record(h, now)
			}
			pos += int64(h.Size())
		}
	}
	return nil
}

// expireProducers forgets producers not seen for Config.ProducerExpiry.
func (l *Log) expireProducers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.producers.expire(l.clock().UnixMilli(), l.cfg.Load().ProducerExpiry); n > 0 {
		l.logger.Info("partlog: expired idle producers", "producers", n, "expiry", l.cfg.Load().ProducerExpiry)
	}
}
