package partlog

import (
	"sync"
	"sync/atomic"
	"time"
)

// Background work without goroutines of its own.
//
// A log's timed and deferred work (the fsync of FlushInterval, the
// checkpoint and producer expiry of CheckpointInterval, the fsync of a
// segment sealed by a roll, FlushSync's group-commit rounds) runs on
// runtime timers (time.AfterFunc) and on goroutines started when there
// is work and gone when it is done. An idle log therefore holds no
// goroutine: a node of 10 000 replicas had 20 000 goroutines parked on
// their logs' tickers and channels, with their stacks. (Kafka's logs
// likewise run on one shared scheduler, background.threads.)
//
// Every such goroutine is counted in Log.wg, and none starts once Close
// has begun (bg.stopped): Close waits for the ones running before it
// closes the files.

// background is a log's timers and the state of its deferred work.
type background struct {
	mu      sync.Mutex
	stopped bool          // set by Close: nothing more starts
	gen     uint64        // bumped by every arm: older timers do nothing
	timers  []*time.Timer // the timers of the current gen

	kicked      atomic.Bool // a flush after a roll is started and has not begun
	syncPending atomic.Bool // an appender waits for a group-commit round
	syncRunning atomic.Bool // a goroutine runs group-commit rounds
}

// goBackground runs f on a goroutine that Close waits for. It reports
// false, and runs nothing, once Close has begun.
func (l *Log) goBackground(f func()) bool {
	l.bg.mu.Lock()
	defer l.bg.mu.Unlock()
	if l.bg.stopped {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// armTimers (re)starts the timers of the configuration in force: the
// flush interval under FlushInterval, and the checkpoint interval.
func (l *Log) armTimers() {
	l.bg.mu.Lock()
	defer l.bg.mu.Unlock()
	if l.bg.stopped {
		return
	}
	for _, t := range l.bg.timers {
		t.Stop()
	}
	l.bg.timers = l.bg.timers[:0]
	l.bg.gen++
	cfg := l.cfg.Load()
	if cfg.Flush.Mode == FlushInterval && cfg.Flush.Interval > 0 {
		l.everyLocked(cfg.Flush.Interval, l.flushAndCheckpoint)
	}
	if cfg.CheckpointInterval > 0 {
		l.everyLocked(cfg.CheckpointInterval, func() {
			l.expireProducers()
			l.flushAndCheckpoint()
		})
	}
}

// everyLocked runs f every d, d after the end of its last run (a run
// never overlaps the next), until the timers are armed again or Close.
// The caller holds bg.mu.
func (l *Log) everyLocked(d time.Duration, f func()) {
	gen := l.bg.gen
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		// t was set under bg.mu before this could run.
		l.bg.mu.Lock()
		if l.bg.stopped || l.bg.gen != gen {
			l.bg.mu.Unlock()
			return
		}
		l.wg.Add(1)
		l.bg.mu.Unlock()
		defer l.wg.Done()
		f()
		l.bg.mu.Lock()
		if !l.bg.stopped && l.bg.gen == gen {
			t.Reset(d)
		}
		l.bg.mu.Unlock()
	})
	l.bg.timers = append(l.bg.timers, t)
}

// stopBackground stops the timers and starts nothing more; Close then
// waits for what runs (Log.wg).
func (l *Log) stopBackground() {
	l.bg.mu.Lock()
	defer l.bg.mu.Unlock()
	l.bg.stopped = true
	for _, t := range l.bg.timers {
		t.Stop()
	}
	l.bg.timers = nil
}

// kickFlush fsyncs in the background soon: after a roll, the sealed
// segment under FlushNone and FlushInterval. Kicks before the flush
// begins share it.
func (l *Log) kickFlush() {
	if !l.bg.kicked.CompareAndSwap(false, true) {
		return
	}
	if !l.goBackground(func() {
		l.bg.kicked.Store(false)
		l.flushAndCheckpoint()
	}) {
		l.bg.kicked.Store(false)
	}
}

// flushAndCheckpoint fsyncs what is unflushed and writes the
// checkpoints, unless the log is closed or failed.
func (l *Log) flushAndCheckpoint() {
	if l.writable() != nil {
		return
	}
	l.flushMu.Lock()
	_, err := l.syncLocked()
	if err == nil {
		err = l.checkpointLocked()
	}
	l.flushMu.Unlock()
	if err != nil {
		l.logger.Error("partlog: background flush", "err", err)
	}
}

// requestSync asks for a group-commit round (FlushSync): one runs after
// this call, whichever goroutine runs it. Requests made while a round
// runs share the next one.
func (l *Log) requestSync() {
	l.bg.syncPending.Store(true)
	if l.bg.syncRunning.CompareAndSwap(false, true) && !l.goBackground(l.syncRounds) {
		l.bg.syncRunning.Store(false)
	}
}

// syncRounds runs group-commit rounds while any is asked for.
func (l *Log) syncRounds() {
	for {
		for l.bg.syncPending.Swap(false) {
			l.syncRound()
		}
		l.bg.syncRunning.Store(false)
		// A request between the last Swap and the Store found the flag
		// still set and started nothing: take it on.
		if !l.bg.syncPending.Load() || !l.bg.syncRunning.CompareAndSwap(false, true) {
			return
		}
	}
}
