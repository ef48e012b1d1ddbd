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
	// TxnFirstOffset is the first offset of its open transaction: the
	// base offset of its first transactional batch since its last
	// marker. -1 when it has no open transaction.
	TxnFirstOffset int64
	// CoordinatorEpoch is the coordinator epoch of its last transaction
	// marker, -1 before any.
	CoordinatorEpoch int32
}

// producerEntry is the in-memory form of a ProducerState.
type producerEntry struct {
	epoch    int16
	lastSeen int64           // Unix ms
	batches  []ProducerBatch // capacity ProducerWindow once used
	// txnOpen says it has an open transaction, which began at txnFirst
	// (Kafka's currentTxnFirstOffset). Kept in producers.ongoing too.
	txnOpen  bool
	txnFirst int64
	// coordEpoch is the coordinator epoch of its last marker, -1 before
	// any (Kafka's coordinatorEpoch).
	coordEpoch int32
}

func newProducerEntry(epoch int16) *producerEntry {
	return &producerEntry{epoch: epoch, batches: make([]ProducerBatch, 0, ProducerWindow), coordEpoch: -1}
}

// state is the exported form of e; its Batches are a copy.
func (e *producerEntry) state() ProducerState {
	first := int64(-1)
	if e.txnOpen {
		first = e.txnFirst
	}
	return ProducerState{Epoch: e.epoch, LastSeen: time.UnixMilli(e.lastSeen), Batches: slices.Clone(e.batches),
		TxnFirstOffset: first, CoordinatorEpoch: e.coordEpoch}
}

// producers is the idempotent-producer state of the log, built from the
// batch headers as they are appended, saved in snapshot files and rebuilt
// from the newest snapshot and the batches after it on open and after
// truncation. Not safe for concurrent use: Log.mu guards it.
type producers struct {
	m map[int64]*producerEntry
	// ongoing maps each producer with an open transaction to its first
	// offset (Kafka's ongoingTxns): the entries of m with txnOpen.
	ongoing map[int64]int64
}

func newProducers() *producers {
	return &producers{m: make(map[int64]*producerEntry), ongoing: make(map[int64]int64)}
}

// completedTxn is a transaction a marker ended (Kafka's CompletedTxn).
type completedTxn struct {
	pid     int64
	first   int64 // offset of its first batch
	last    int64 // offset of its marker
	aborted bool
	// lso is the last stable offset as of the marker, as Kafka's
	// ProducerStateManager.lastStableOffset(completedTxn) computes it for
	// the aborted transaction index: the first offset of the earliest
	// transaction still open, or the marker's offset + 1 when none is.
	lso int64
}

// record remembers one batch whose base offset is stamped, as Kafka's
// ProducerAppendInfo does. Batches without a producer id change nothing.
// A data batch of an older producer epoch than the one remembered is kept
// out of the window (only the leader refuses those, so a follower copies
// what its leader wrote); a transactional one opens the producer's
// transaction when none is open, whatever its epoch. A control batch
// counts only as the transaction marker m (nil: it is not one, and
// changes nothing): it raises the epoch, takes its coordinator epoch and
// ends the open transaction, which it returns. It reports whether the
// batch opened a transaction.
func (p *producers) record(h recordbatch.Header, m *recordbatch.Marker, nowMs int64) (opened bool, done *completedTxn) {
	if h.ProducerID < 0 || (h.Control() && m == nil) {
		return false, nil
	}
	e := p.m[h.ProducerID]
	if e == nil {
		e = newProducerEntry(h.ProducerEpoch)
		p.m[h.ProducerID] = e
	} else if h.ProducerEpoch > e.epoch {
		// Kafka's maybeUpdateProducerEpoch: a new epoch starts a new
		// window, and keeps the transaction state.
		e.epoch, e.batches = h.ProducerEpoch, e.batches[:0]
	}
	e.lastSeen = max(e.lastSeen, nowMs)
	if h.Control() {
		e.coordEpoch = m.CoordinatorEpoch
		if !e.txnOpen {
			// A marker of a transaction that wrote nothing here: no
			// effect on the LSO, nothing to index (as Kafka).
			return false, nil
		}
		e.txnOpen = false
		delete(p.ongoing, h.ProducerID)
		done = &completedTxn{pid: h.ProducerID, first: e.txnFirst, last: h.BaseOffset,
			aborted: m.Type == recordbatch.ControlAbort, lso: h.BaseOffset + 1}
		for _, first := range p.ongoing {
			done.lso = min(done.lso, first)
		}
		return false, done
	}
	if h.Transactional() && !e.txnOpen {
		e.txnOpen, e.txnFirst = true, h.BaseOffset
		p.ongoing[h.ProducerID] = h.BaseOffset
		opened = true
	}
	if h.ProducerEpoch < e.epoch {
		return opened, nil
	}
	if len(e.batches) == ProducerWindow {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:ProducerWindow-1]
	}
	e.batches = append(e.batches, ProducerBatch{
		FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(),
		FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(),
	})
	return opened, nil
}

// txnChanges is what a run of batches did to transactions.
type txnChanges struct {
	opened int            // transactions opened
	ended  []completedTxn // transactions ended, in log order
}

func (c *txnChanges) any() bool { return c.opened > 0 || len(c.ended) > 0 }

// recordAll remembers every batch of b, whole batches with stamped offsets
// (checked by the append path), and returns what they did to
// transactions. A control batch that is not a transaction marker changes
// nothing (the leader refuses those; see checkMarkersLocked).
func (p *producers) recordAll(b []byte, nowMs int64) txnChanges {
	var c txnChanges
	for len(b) > 0 {
		h, err := recordbatch.PeekHeader(b)
		if err != nil || len(b) < h.Size() {
			return c
		}
		p.recordBatch(h, b[:h.Size()], nowMs, &c)
		b = b[h.Size():]
	}
	return c
}

// recordBatch is record for the whole batch b with header h, adding what
// it did to c. A control batch is parsed as a marker.
func (p *producers) recordBatch(h recordbatch.Header, b []byte, nowMs int64, c *txnChanges) {
	var m *recordbatch.Marker
	if h.Control() {
		if _, mk, err := recordbatch.ParseMarker(b); err == nil {
			m = &mk
		}
	}
	opened, done := p.record(h, m, nowMs)
	if opened {
		c.opened++
	}
	if done != nil {
		c.ended = append(c.ended, *done)
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
		c := newProducerEntry(e.epoch)
		c.lastSeen, c.coordEpoch = e.lastSeen, e.coordEpoch
		for _, b := range e.batches {
			if b.LastOffset < offset {
				c.batches = append(c.batches, b)
			}
		}
		// A transaction open since below offset is open there too; one
		// that began above it opens again when its first batch comes.
		// (One that began below offset and ended above it is closed here:
		// the log starting at offset meets its marker without it, which
		// only leaves out what lies below offset.)
		if e.txnOpen && e.txnFirst < offset {
			c.txnOpen, c.txnFirst = true, e.txnFirst
			out.ongoing[id] = e.txnFirst
		}
		out.m[id] = c
	}
	return out
}

// expire forgets producers not seen for ttl (none when ttl < 0) and
// returns how many. A producer with an open transaction is kept, as
// Kafka's isProducerExpired keeps it: its transaction holds the last
// stable offset until a marker ends it.
func (p *producers) expire(nowMs int64, ttl time.Duration) int {
	if ttl < 0 {
		return 0
	}
	n := 0
	for id, e := range p.m {
		if !e.txnOpen && nowMs-e.lastSeen >= ttl.Milliseconds() {
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
	return e.state(), true
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
		if !e.txnOpen && ttl >= 0 && now-e.lastSeen >= ttl.Milliseconds() {
			continue // expired; the next expiry round forgets it
		}
		out = append(out, ActiveProducer{ID: id, ProducerState: e.state()})
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
// not, and reads the batches from its offset (or from the first segment
// when there is none) to the log end: their headers, and the whole of
// each control batch. A batch that cannot be read ends the scan with a
// warning: the state then lacks what follows (those producers look new),
// and reads of that batch fail on their own. What readers see of open
// transactions is replaced with the result. The caller holds mu, or is
// Open.
func (l *Log) loadProducersLocked() {
	leo := l.leo.Load()
	// Snapshots past the log end must stay gone: once the log grows past
	// their offset again, one brought back by a crash would be taken for
	// the state of batches it never saw.
	removed := l.removeSnapshots(func(off int64) bool { return off > leo })
	at, ps, rm := l.newestSnapshotLocked(leo)
	from := l.segs[0].base
	if ps == nil {
		ps = newProducers()
	} else {
		from = max(at, from)
	}
	if removed || rm {
		if err := l.fs.SyncDir(l.dir); err != nil {
			l.logger.Warn("partlog: fsync dir after removing producer snapshots", "err", err)
		}
	}
	l.producers = ps
	ended, err := l.scanProducersLocked(ps, from, leo, nil)
	if err != nil {
		l.logger.Warn("partlog: producer state may be incomplete", "from", from, "err", err)
	}
	l.producers.expire(l.clock().UnixMilli(), l.cfg.Load().ProducerExpiry)
	l.resetTxnsLocked(ended)
}

// newestSnapshotLocked loads the newest snapshot at or below limit that
// decodes, removing the unusable ones it meets; ps is nil when there is
// none. removed reports whether it removed any (the directory is not
// fsynced). The caller holds mu, or is Open.
func (l *Log) newestSnapshotLocked(limit int64) (at int64, ps *producers, removed bool) {
	offs := l.snapshotOffsets()
	for i := len(offs) - 1; i >= 0; i-- {
		if offs[i] > limit {
			continue
		}
		name := snapshotName(offs[i])
		b, err := vfs.ReadFile(l.fs, l.join(name))
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
		return at, ps, removed
	}
	return 0, nil, removed
}

// reindexTxnsLocked rebuilds the transaction indexes of segs (ascending),
// in memory and on disk (fsynced, with the directory), from their
// batches: each needs the open transactions as of its start, so the
// batches are read with the producer state from the newest snapshot at or
// below the first one's base (or from the first segment with none). A
// read error fails: an index missing an aborted transaction would serve
// its records as committed. The caller is Open, before the offset indexes
// that let a later Open trust these segments are written.
func (l *Log) reindexTxnsLocked(segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	set := make(map[*segment]bool, len(segs))
	for _, s := range segs {
		s.idxMu.Lock()
		s.aborted = nil
		s.idxMu.Unlock()
		set[s] = true
	}
	at, ps, _ := l.newestSnapshotLocked(segs[0].base)
	from := l.segs[0].base
	if ps == nil {
		ps = newProducers()
	} else {
		from = max(at, from)
	}
	if _, err := l.scanProducersLocked(ps, from, l.leo.Load(), set); err != nil {
		return fmt.Errorf("partlog: recovery: rebuild transaction index: %w", err)
	}
	for _, s := range segs {
		if err := s.writeAbortedTxns(l.fs); err != nil {
			return fmt.Errorf("partlog: recovery: write %s: %w", segmentName(s.base)+txnIndexSuffix, err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("partlog: recovery: fsync dir: %w", err)
	}
	return nil
}

// scanProducersLocked records the batches in [from, end) in ps, reading
// each segment in chunks: the header of each batch and the whole of each
// control batch. It returns the transactions their markers ended, in log
// order; those aborted by a marker in a segment of reindex are added to
// its in-memory transaction index. The caller holds mu, or is Open.
func (l *Log) scanProducersLocked(ps *producers, from, end int64, reindex map[*segment]bool) ([]completedTxn, error) {
	now := l.clock().UnixMilli()
	var ended []completedTxn
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
		fill := func(need int64) error {
			if pos >= bufPos && pos+need <= bufPos+bufLen {
				return nil
			}
			want := min(int64(len(buf)), size-pos)
			n, err := s.file.ReadAt(buf[:want], pos)
			if err != nil && !(errors.Is(err, io.EOF) && int64(n) == want) {
				return fmt.Errorf("partlog: read %s at %d for producer state: %w", segmentName(s.base), pos, err)
			}
			bufPos, bufLen = pos, int64(n)
			return nil
		}
		for pos < size {
			if err := fill(recordbatch.HeaderSize); err != nil {
				return ended, err
			}
			h, err := recordbatch.PeekHeader(buf[pos-bufPos : bufLen])
			if err != nil {
				return ended, fmt.Errorf("%w: segment %s position %d: %w", ErrCorrupt, segmentName(s.base), pos, err)
			}
			if h.BaseOffset >= end {
				return ended, nil
			}
			var batch []byte
			if h.Control() {
				if err := fill(int64(h.Size())); err != nil {
					return ended, err
				}
				if pos+int64(h.Size()) > bufPos+bufLen {
					return ended, fmt.Errorf("%w: segment %s position %d: control batch of %d bytes", ErrCorrupt, segmentName(s.base), pos, h.Size())
				}
				batch = buf[pos-bufPos : pos-bufPos+int64(h.Size())]
			}
			if h.LastOffset() >= from {
				var c txnChanges
				ps.recordBatch(h, batch, now, &c)
				if reindex[s] {
					if ab := abortedOf(c.ended); len(ab) > 0 {
						s.idxMu.Lock()
						s.aborted = append(s.aborted, ab...)
						s.idxMu.Unlock()
					}
				}
				ended = append(ended, c.ended...)
			}
			pos += int64(h.Size())
		}
	}
	return ended, nil
}

// expireProducers forgets producers not seen for Config.ProducerExpiry.
func (l *Log) expireProducers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.producers.expire(l.clock().UnixMilli(), l.cfg.Load().ProducerExpiry); n > 0 {
		l.logger.Info("partlog: expired idle producers", "producers", n, "expiry", l.cfg.Load().ProducerExpiry)
	}
}
