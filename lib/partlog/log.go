package partlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mq/strata/lib/vfs"
)

// Log is the log of one partition replica: a directory of segments with
// their indexes and checkpoints.
//
// Concurrency: all methods are safe for concurrent use. Appends,
// truncation and retention are serialised by one append lock; reads do
// not take it, so many readers run alongside one appender and see only
// whole batches that were completely written.
type Log struct {
	dir    string
	cfg    atomic.Pointer[Config] // validated, defaults applied; replaced whole by Reconfigure
	fs     vfs.FS                 // filesystem holding dir
	clock  func() time.Time
	logger *slog.Logger // carries the dir attribute

	// Lock order: cleanMu, then flushMu, then mu, then hwMu, then segMu;
	// txns.mu after mu, and no other lock after it.

	// flushMu serialises fsync rounds and checkpoint writes. Anything that
	// closes segment files (truncation, retention, Close) takes it too, so
	// a file is never closed under an fsync.
	flushMu sync.Mutex
	// written is the log-checkpoint this Log last wrote, valid when
	// wroteCkpt: an idle log's checkpoint ticks skip rewriting (and
	// fsyncing) the same values. Guarded by flushMu.
	written   logCheckpoint
	wroteCkpt bool
	// mu is the append lock: it serialises every change to the log.
	mu sync.Mutex
	// segMu guards the segs slice. Readers hold it shared for a whole read,
	// so truncation and deletion (which take it exclusively) never pull a
	// file or byte range from under a reader.
	segMu sync.RWMutex
	// hwMu orders high watermark updates against truncation.
	hwMu sync.Mutex

	segs      []*segment // ordered by base offset; the last is active; guarded by segMu (written under mu too)
	unflushed []*segment // sealed segments with bytes not yet fsynced; guarded by mu
	dirDirty  bool       // a file was created in dir since the last SyncDir; guarded by mu
	epochs    epochCache // leader epoch history; guarded by mu
	producers *producers // idempotent-producer state; guarded by mu
	txns      txnView    // open transactions for LastStableOffset (lso.go); has its own lock
	// cleanMu makes cleaning passes one at a time (cleaner.go). Taken
	// before any other lock.
	cleanMu sync.Mutex
	// cleanerCkpt is the first dirty offset: the cleaner has cleaned the
	// log below it (cleaner-checkpoint). Guarded by mu.
	cleanerCkpt int64
	// truncGen counts truncations, so that a cleaning pass can tell the
	// log changed under it. Guarded by mu.
	truncGen uint64
	// producersGapUntil, when not zero, is the Unix ms until which the
	// producer state may lack producers whose batches lie below the log
	// start: the log was restarted at an offset with no state to begin
	// with (TruncateFullyAndStartAt), or reopened with none saved. After
	// Config.ProducerExpiry such producers would be forgotten anyway.
	// Guarded by mu.
	producersGapUntil int64

	logStart      atomic.Int64 // first readable offset
	leo           atomic.Int64 // log end offset: offset after the last published batch
	hw            atomic.Int64 // high watermark, in [logStart, leo]
	recoveryPoint atomic.Int64 // offsets below are fsynced

	unclean   bool                  // the previous process did not close the log; set by recovery
	closed    atomic.Bool           // set by Close
	failErr   atomic.Pointer[error] // first write or fsync error; the log refuses writes after it
	onFailure func(error)           // Open's WithFailureHook; nil for none
	gc        groupCommit           // FlushSync waiters
	bg        background            // timers and deferred work (background.go)
	stop      chan struct{}         // closed by Close
	wg        sync.WaitGroup        // background work running (goBackground)
	closeMu   sync.Mutex            // makes Close idempotent
}

// groupCommit lets many FlushSync appenders wait for one fsync.
type groupCommit struct {
	mu     sync.Mutex
	synced int64         // offsets below are fsynced
	done   chan struct{} // closed (and replaced) at the end of every fsync round
	err    error         // set when an fsync round failed; waiters return it
}

// AppendInfo describes a successful append.
type AppendInfo struct {
	FirstOffset   int64 // base offset of the first batch
	LastOffset    int64 // last offset of the last batch
	MaxTimestamp  int64 // largest batch MaxTimestamp, Unix ms
	LogAppendTime int64 // the log's clock at append, Unix ms
	Batches       int   // number of batches
	Records       int64 // number of offsets used
	Bytes         int   // bytes appended
}

// ReadResult is the answer to Read.
type ReadResult struct {
	// Batches holds zero or more whole batches, exactly as stored. It is
	// owned by the caller.
	Batches []byte
	// NextOffset is the offset to read from next: after the last returned
	// batch, or the requested offset when nothing was returned.
	NextOffset int64
	// LogStartOffset, LogEndOffset, HighWatermark and LastStableOffset
	// are the log's state at the time of the read.
	LogStartOffset   int64
	LogEndOffset     int64
	HighWatermark    int64
	LastStableOffset int64
	// AbortedTxns is, for ReadCommittedInto, the aborted transactions
	// that overlap the batches returned, in the order of their markers;
	// nil for other reads and when no batch was returned.
	AbortedTxns []AbortedTxn
}

// Stats is a snapshot for metrics.
type Stats struct {
	Segments      int   // number of segments, the active one included
	Bytes         int64 // bytes in all segments
	LogStart      int64 // log start offset
	LogEnd        int64 // log end offset
	HighWatermark int64 // high watermark
	RecoveryPoint int64 // offsets below are fsynced
}

// Open opens the log in dir, creating the directory if needed, and runs
// recovery (see the package documentation). The returned Log must be
// closed.
func Open(dir string, cfg Config, opts ...Option) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	l := &Log{
		dir:       filepath.Clean(dir),
		fs:        o.fs,
		clock:     o.clock,
		logger:    o.logger.With("dir", dir),
		onFailure: o.onFailure,
		stop:      make(chan struct{}),
	}
	c := cfg.withDefaults()
	l.cfg.Store(&c)
	l.gc.done = make(chan struct{})
	if err := l.fs.MkdirAll(l.dir, 0o755); err != nil {
		return nil, fmt.Errorf("partlog: open %s: %w", dir, err)
	}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	l.loadProducersGap()
	l.gc.synced = l.leo.Load()
	l.armTimers()
	return l, nil
}

// Config returns the configuration in force, defaults applied.
func (l *Log) Config() Config { return *l.cfg.Load() }

// Reconfigure replaces the configuration of the open log, as a topic's
// configuration changes: the flush policy applies from the next append
// (and a new flush interval at once), retention from the next
// ApplyRetention, segment limits from the next roll decision, the batch
// size limit from the next append. Appends already waiting for an fsync
// under FlushSync still get it. An invalid cfg changes nothing.
func (l *Log) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	c := cfg.withDefaults()
	l.cfg.Store(&c)
	l.armTimers()
	return nil
}

// UncleanShutdown reports whether Open found a log that the previous
// process did not Close (no clean-shutdown marker: a crash, kill -9 or
// power loss) and therefore recovered it from its last fsynced point,
// scanning and keeping whatever valid batches followed. A new log, or one
// closed cleanly, reports false.
func (l *Log) UncleanShutdown() bool { return l.unclean }

// Dir is the directory the log lives in.
func (l *Log) Dir() string { return l.dir }

// LogStartOffset is the first offset that can be read.
func (l *Log) LogStartOffset() int64 { return l.logStart.Load() }

// LogEndOffset is the offset the next appended batch gets.
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// HighWatermark is the offset below which records are committed.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// RecoveryPoint is the offset below which the log is known to be fsynced.
func (l *Log) RecoveryPoint() int64 { return l.recoveryPoint.Load() }

// SetHighWatermark raises the high watermark to off, clamped to the log
// end offset. It never lowers it (only truncation does). The value is
// persisted at the next checkpoint.
func (l *Log) SetHighWatermark(off int64) {
	l.hwMu.Lock()
	defer l.hwMu.Unlock()
	off = min(off, l.leo.Load())
	if off > l.hw.Load() {
		l.hw.Store(off)
	}
}

// LatestEpoch is the newest leader epoch in the log, or UndefinedEpoch.
func (l *Log) LatestEpoch() int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs.latest()
}

// EndOffsetForEpoch answers a follower's OffsetForLeaderEpoch request as
// Kafka does: for the latest epoch, the log end offset; for an older
// epoch, the start offset of the next higher epoch in the history, paired
// with the largest epoch <= the requested one (the requested epoch itself
// if it is older than all). For an epoch newer than all, or an empty
// history, (UndefinedEpoch, UndefinedOffset).
func (l *Log) EndOffsetForEpoch(epoch int32) (epochFound int32, endOffset int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs.endOffsetFor(epoch, l.leo.Load())
}

// Stats returns a snapshot for metrics.
func (l *Log) Stats() Stats {
	l.segMu.RLock()
	st := Stats{Segments: len(l.segs)}
	for _, s := range l.segs {
		st.Bytes += s.size.Load()
	}
	l.segMu.RUnlock()
	st.LogStart, st.LogEnd = l.logStart.Load(), l.leo.Load()
	st.HighWatermark, st.RecoveryPoint = l.hw.Load(), l.recoveryPoint.Load()
	return st
}

// writable reports why the log cannot take writes, or nil.
func (l *Log) writable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	if p := l.failErr.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// fail puts the log in the failed state (first error wins) and returns
// the error to give the caller.
func (l *Log) fail(err error) error {
	if l.failErr.CompareAndSwap(nil, &err) {
		l.logger.Error("partlog: log failed; refusing writes until reopened", "err", err)
		if l.onFailure != nil {
			l.onFailure(err)
		}
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// Flush fsyncs every appended byte and writes the checkpoints. ctx is
// checked before starting; an fsync in progress is not interrupted.
func (l *Log) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.writable(); err != nil {
		return err
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if _, err := l.syncLocked(); err != nil {
		return err
	}
	return l.checkpointLocked()
}

// syncLocked fsyncs every segment with unsynced bytes and, if needed, the
// directory, then advances the recovery point. It returns the offset the
// fsync covers. The caller holds flushMu, not mu.
func (l *Log) syncLocked() (int64, error) {
	l.mu.Lock()
	if err := l.writable(); err != nil && !l.closed.Load() {
		l.mu.Unlock()
		return 0, err
	}
	target := l.leo.Load()
	toSync := append(l.unflushed, l.active())
	l.unflushed = nil
	// A segment's transaction index is durable before the recovery point
	// passes the segment (txnindex.go).
	var txnSync []*segment
	for _, s := range toSync {
		if s.txnUnsynced {
			txnSync = append(txnSync, s)
			s.txnUnsynced = false
		}
	}
	dirDirty := l.dirDirty
	l.dirDirty = false
	l.mu.Unlock()
	if target == l.recoveryPoint.Load() && len(toSync) == 1 && len(txnSync) == 0 && !dirDirty {
		return target, nil
	}
	for _, s := range toSync {
		if err := timedSync(s.file); err != nil { // telemetry.go
			return 0, l.fail(fmt.Errorf("partlog: fsync segment %s: %w", segmentName(s.base), err))
		}
	}
	for _, s := range txnSync {
		if err := s.syncAbortedTxns(l.fs); err != nil {
			return 0, l.fail(fmt.Errorf("partlog: fsync %s: %w", segmentName(s.base)+txnIndexSuffix, err))
		}
	}
	if dirDirty {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return 0, l.fail(fmt.Errorf("partlog: fsync dir: %w", err))
		}
	}
	if target > l.recoveryPoint.Load() {
		l.recoveryPoint.Store(target)
	}
	return target, nil
}

// checkpointLocked writes log-checkpoint, unless it holds these values
// already: a partition with nothing new would otherwise replace and fsync
// the file on every checkpoint tick (a node with thousands of idle
// replicas spent a sixth of its CPU on it). The caller holds flushMu.
func (l *Log) checkpointLocked() error {
	c := logCheckpoint{
		recoveryPoint: l.recoveryPoint.Load(),
		highWatermark: l.hw.Load(),
		logStart:      l.logStart.Load(),
	}
	if l.wroteCkpt && c == l.written {
		return nil
	}
	if err := writeLogCheckpoint(l.fs, l.dir, c); err != nil {
		l.wroteCkpt = false
		return l.fail(err)
	}
	l.written, l.wroteCkpt = c, true
	return nil
}

// persistEpochsLocked writes leader-epoch-checkpoint. The caller holds mu.
func (l *Log) persistEpochsLocked() error {
	if err := writeEpochCheckpoint(l.fs, l.dir, l.epochs.entries); err != nil {
		return l.fail(err)
	}
	return nil
}

// syncRound runs one fsync and wakes every waiter.
func (l *Log) syncRound() {
	l.flushMu.Lock()
	target, err := l.syncLocked()
	l.flushMu.Unlock()
	l.gc.mu.Lock()
	if err != nil {
		l.gc.err = err
	} else if target > l.gc.synced {
		l.gc.synced = target
	}
	close(l.gc.done)
	l.gc.done = make(chan struct{})
	l.gc.mu.Unlock()
}

// waitSynced blocks until offsets below target are fsynced.
func (l *Log) waitSynced(ctx context.Context, target int64) error {
	for {
		l.gc.mu.Lock()
		synced, done, err := l.gc.synced, l.gc.done, l.gc.err
		l.gc.mu.Unlock()
		if synced >= target {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
		l.requestSync()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("partlog: waiting for fsync: %w", ctx.Err())
		case <-l.stop:
			// Close runs a final fsync round; wait for it.
			<-done
		}
	}
}

// Close flushes, writes the indexes of the active segment and the
// checkpoints, stops the background goroutines and closes the files. It
// is safe to call more than once; later calls return nil. Every other
// method returns ErrClosed afterwards. A failed log is closed without
// writing anything.
func (l *Log) Close() error { return l.close(true) }

// Discard closes a log whose directory is removed next (its partition
// was deleted or moved away), as Close but writing nothing: no fsync,
// index, producer snapshot or checkpoint, which would cost several
// fsyncs per replica only to be deleted (Kafka closes a deleted log's
// handles without flushing it). FlushSync waiters get ErrClosed. A crash
// before the removal leaves a directory that opens as after a crash.
func (l *Log) Discard() error { return l.close(false) }

func (l *Log) close(write bool) error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed.Load() {
		return nil
	}
	l.flushMu.Lock()
	l.mu.Lock()
	l.closed.Store(true)
	l.mu.Unlock()
	var err error
	if write && l.failErr.Load() == nil {
		if _, err = l.syncLocked(); err == nil {
			if ierr := l.active().writeIndexes(l.fs); ierr != nil {
				l.logger.Warn("partlog: write index on close", "err", ierr)
			}
			// Open then starts from the log end, reading no batch.
			l.mu.Lock()
			l.writeSnapshotLocked(true)
			l.mu.Unlock()
			err = l.checkpointLocked()
		}
		if err == nil {
			// Last: everything above is on disk, so the next Open may
			// know this was a clean shutdown.
			if err = cleanShutdownCheckpoint.write(l.fs, l.dir, l.leo.Load()); err != nil {
				err = l.fail(err)
			}
		}
	}
	l.flushMu.Unlock()
	// Wake FlushSync waiters: everything is synced now, or failed, or
	// discarded unsynced (ErrClosed).
	l.gc.mu.Lock()
	if err != nil || l.failErr.Load() != nil || !write {
		l.gc.err = errors.Join(err, ErrClosed)
	} else {
		l.gc.synced = l.leo.Load()
	}
	close(l.gc.done)
	l.gc.done = make(chan struct{})
	l.gc.mu.Unlock()
	close(l.stop)
	l.stopBackground()
	l.wg.Wait()
	// A cleaning pass sees the log closed at its next batch and removes
	// its temporary file; wait for it, so that nothing writes in the
	// directory once Close returns (the replica's directory may be
	// deleted next).
	l.cleanMu.Lock()
	l.cleanMu.Unlock() //nolint:staticcheck // an empty critical section: waiting is the point
	l.segMu.Lock()
	l.closeFiles()
	l.segMu.Unlock()
	return err
}

func (l *Log) closeFiles() {
	for _, s := range l.segs {
		_ = s.file.Close()
	}
}

// parseSegmentName returns the base offset named by a .log file name.
func parseSegmentName(name string) (int64, bool) { return parseOffsetName(name, segmentSuffix) }

// parseOffsetName returns the offset a file named by an offset (20 digits,
// as segmentName writes it) and suffix carries.
func parseOffsetName(name, suffix string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || len(digits) != segmentNameDigits {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil && n >= 0
}
