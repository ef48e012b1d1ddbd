package partlog

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/vfs"
)

// Close leaves a clean-shutdown marker; Open reports whether it found one
// and removes it at once, so that a crash of the new process is unclean.
// Without it the log is recovered from its last fsynced point: with every
// unsynced byte lost, exactly what the last fsync covered remains.
func TestCleanShutdownMarker(t *testing.T) {
	mem := vfs.NewMem()
	marker := filepath.Join(testDir, cleanShutdownFile)
	l := mustOpen(t, mem, Config{})
	if l.UncleanShutdown() {
		t.Fatal("a new log reports an unclean shutdown")
	}
	for range 3 {
		mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat(marker); err != nil {
		t.Fatalf("no clean-shutdown marker after Close: %v", err)
	}

	// Reopen after the clean close: clean, and the marker is gone (also
	// after a power cut right now).
	l = mustOpen(t, mem, Config{})
	if l.UncleanShutdown() || l.LogEndOffset() != 6 {
		t.Fatalf("after a clean close: unclean %v, log end %d, want false and 6", l.UncleanShutdown(), l.LogEndOffset())
	}
	if _, err := mem.Crash(vfs.CrashOptions{}).Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the marker survives Open: %v", err)
	}

	// Appends, one fsync, more appends, then power is lost: unclean, and
	// the log is what the fsync covered.
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	synced := l.RecoveryPoint()
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	crashed := mem.Crash(vfs.CrashOptions{})
	l.Close()
	l = mustOpen(t, crashed, Config{})
	defer l.Close()
	if !l.UncleanShutdown() {
		t.Error("a log recovered after a power cut reports a clean shutdown")
	}
	if synced != 8 || l.LogEndOffset() != synced {
		t.Fatalf("recovered log end %d, want the last fsynced point %d (8)", l.LogEndOffset(), synced)
	}
	readAll(t, l, 0, l.LogEndOffset())
}

// Reconfigure changes the flush policy, retention and limits of an open
// log, as a topic's configuration changes.
func TestReconfigure(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, mem, Config{SegmentBytes: 1024})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	if rp := l.RecoveryPoint(); rp != 0 {
		t.Fatalf("FlushNone fsynced: recovery point %d", rp)
	}

	// flush.messages=1: every append returns fsynced.
	if err := l.Reconfigure(Config{SegmentBytes: 1024, Flush: FlushPolicy{Mode: FlushSync}}); err != nil {
		t.Fatal(err)
	}
	info := mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	if rp := l.RecoveryPoint(); rp <= info.LastOffset {
		t.Fatalf("FlushSync append returned with recovery point %d, its last offset %d", rp, info.LastOffset)
	}

	// flush.ms: fsynced within the interval, without any call.
	if err := l.Reconfigure(Config{SegmentBytes: 1024, Flush: FlushPolicy{Mode: FlushInterval, Interval: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	info = mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	deadline := time.Now().Add(20 * time.Second)
	for l.RecoveryPoint() <= info.LastOffset {
		if time.Now().After(deadline) {
			t.Fatalf("FlushInterval never fsynced offset %d; recovery point %d", info.LastOffset, l.RecoveryPoint())
		}
		time.Sleep(time.Millisecond)
	}

	// Limits and retention.
	big := makeBatch(t, 1, 0, 900)
	if err := l.Reconfigure(Config{SegmentBytes: 1024, MaxBatchBytes: 500, RetentionBytes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendAsLeader(ctx, big, 0); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("append above the new max batch size: %v", err)
	}
	if c := l.Config(); c.MaxBatchBytes != 500 || c.RetentionBytes != 1 || c.Flush.Mode != FlushNone {
		t.Fatalf("config after Reconfigure: %+v", c)
	}
	if err := l.Reconfigure(Config{SegmentBytes: 10}); err == nil {
		t.Fatal("an invalid configuration was accepted")
	}
	if c := l.Config(); c.MaxBatchBytes != 500 {
		t.Fatalf("an invalid configuration changed the log: %+v", c)
	}
}
