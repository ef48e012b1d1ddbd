package partlog

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/vfs"
)

// logGoroutines counts the goroutines running a Log method.
func logGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "partlog.(*Log)") {
			n++
		}
	}
	return n
}

// waitNoLogGoroutines waits until no goroutine runs in a log: one that
// has finished its work (Log.wg is done) may still be on its way out.
func waitNoLogGoroutines(t *testing.T, what string) {
	t.Helper()
	testwait.Until(t, time.Minute, what, func() error {
		if n := logGoroutines(); n != 0 {
			return fmt.Errorf("%d goroutines in the log", n)
		}
		return nil
	})
}

// An open log holds no goroutine while it has nothing to do: a node of
// 10 000 replicas parked 20 000 goroutines on its logs' tickers. Its
// timed and deferred work still runs (TestBackgroundWorkRuns).
func TestIdleLogsHoldNoGoroutine(t *testing.T) {
	mem := vfs.NewMem()
	var logs []*Log
	defer func() {
		for _, l := range logs {
			l.Close()
		}
	}()
	for i := range 50 {
		l, err := Open(fmt.Sprintf("/data/p%d", i), Config{SegmentBytes: 300,
			Flush: FlushPolicy{Mode: FlushInterval, Interval: time.Hour}}, WithFS(mem))
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	// Waited for rather than read once: a log another test left open may
	// be running a timer's work at this moment. Each of these 50 logs ran
	// two goroutines for as long as it was open.
	waitNoLogGoroutines(t, "50 idle logs to run no goroutine")
	// A roll's flush runs on a goroutine of its own, which ends.
	for _, l := range logs {
		for range 3 {
			mustAppend(t, l, makeBatch(t, 2, 0, 100), 0)
		}
	}
	waitNoLogGoroutines(t, "the rolls' flushes to end")
}

// The timers fire again and again, follow Reconfigure, and a roll's
// sealed segment is fsynced without any call.
func TestBackgroundWorkRuns(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, mem, Config{Flush: FlushPolicy{Mode: FlushInterval, Interval: 5 * time.Millisecond},
		CheckpointInterval: -1})
	defer l.Close()
	for i := range 3 { // the timer runs more than once
		info := mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
		testwait.Until(t, time.Minute, fmt.Sprintf("flush.ms to fsync append %d", i), func() error {
			if rp := l.RecoveryPoint(); rp <= info.LastOffset {
				return fmt.Errorf("recovery point %d, last offset %d", rp, info.LastOffset)
			}
			return nil
		})
	}

	// The checkpoint interval, armed by Reconfigure, writes the high
	// watermark; FlushNone leaves the unsealed tail unsynced.
	if err := l.Reconfigure(Config{CheckpointInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	info := mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	l.SetHighWatermark(info.LastOffset + 1)
	testwait.Until(t, time.Minute, "the checkpoint interval to write the high watermark", func() error {
		c, err := readLogCheckpoint(mem, testDir)
		if err != nil {
			return err
		}
		if c.highWatermark != info.LastOffset+1 {
			return fmt.Errorf("checkpoint high watermark %d, want %d", c.highWatermark, info.LastOffset+1)
		}
		return nil
	})

	// A roll under FlushNone: the sealed segment is fsynced in the
	// background.
	if err := l.Reconfigure(Config{SegmentBytes: 300, CheckpointInterval: -1}); err != nil {
		t.Fatal(err)
	}
	var last AppendInfo
	for range 3 {
		last = mustAppend(t, l, makeBatch(t, 2, 0, 100), 0)
	}
	testwait.Until(t, time.Minute, "the roll's flush", func() error {
		if rp := l.RecoveryPoint(); rp < last.FirstOffset {
			return fmt.Errorf("recovery point %d, want the sealed segments' end %d", rp, last.FirstOffset)
		}
		return nil
	})
}

// Close waits for background work that is running and lets none start
// after it: the race detector checks it, with the timers firing every
// millisecond and rolls kicking flushes, and the log's goroutines end (a
// goroutine whose work is done may take a moment to exit after Close
// returns: waitNoLogGoroutines).
func TestCloseStopsBackgroundWork(t *testing.T) {
	mem := vfs.NewMem()
	for i := range 20 {
		dir := fmt.Sprintf("/data/c%d", i)
		l, err := Open(dir, Config{SegmentBytes: 300, CheckpointInterval: time.Millisecond,
			Flush: FlushPolicy{Mode: FlushInterval, Interval: time.Millisecond}}, WithFS(mem))
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			mustAppend(t, l, makeBatch(t, 2, 0, 100), 0)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		waitNoLogGoroutines(t, "the log's goroutines to end after Close")
		if err := l.Reconfigure(Config{}); err == nil {
			t.Fatal("Reconfigure of a closed log succeeded")
		}
	}
}

// TestDiscardWritesNothing: Discard closes a log as Close does (its
// background work stops, later calls fail with ErrClosed) but writes no
// checkpoint, snapshot or clean-shutdown marker, as its directory is
// removed next; one not removed reopens as after a crash, with every
// record appended.
func TestDiscardWritesNothing(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, mem, Config{CheckpointInterval: time.Hour}) // one segment: no roll, no background flush
	for range 5 {
		mustAppend(t, l, makeBatch(t, 2, 0, 100), 0)
	}
	l.SetHighWatermark(10)
	before := dirFiles(t, mem)
	if err := l.Discard(); err != nil {
		t.Fatal(err)
	}
	waitNoLogGoroutines(t, "the log's goroutines to end after Discard")
	if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 10), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Discard: %v, want ErrClosed", err)
	}
	if after := dirFiles(t, mem); !maps.Equal(after, before) {
		t.Fatalf("Discard changed the directory: %v, was %v", after, before)
	}
	l2 := mustOpen(t, mem, Config{})
	defer l2.Close()
	if end := l2.LogEndOffset(); end != 10 {
		t.Fatalf("reopened after Discard: log end %d, want 10", end)
	}
	// Close, by contrast, writes the checkpoints and the marker.
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := dirFiles(t, mem)[cleanShutdownFile]; !ok {
		t.Fatal("Close wrote no clean-shutdown marker")
	}
}

// dirFiles is the log directory's files and their contents.
func dirFiles(t *testing.T, fs vfs.FS) map[string]string {
	t.Helper()
	names, err := fs.ReadDir(testDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range names {
		b, err := vfs.ReadFile(fs, filepath.Join(testDir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}
