package partlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

const testDir = "/data/p0"

var ctx = context.Background()

// makeBatch builds a batch of n records of valSize bytes with timestamps
// ts, ts+1, ...
func makeBatch(t testing.TB, n int, ts int64, valSize int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: bytes.Repeat([]byte{byte(i + 1)}, valSize), Timestamp: ts + int64(i)}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func mustOpen(t testing.TB, fs vfs.FS, cfg Config, opts ...Option) *Log {
	t.Helper()
	opts = append([]Option{WithFS(fs), WithLogger(testLogger(t))}, opts...)
	l, err := Open(testDir, cfg, opts...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, b []byte, epoch int32) AppendInfo {
	t.Helper()
	info, err := l.AppendAsLeader(ctx, b, epoch)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info
}

// readAll reads [from, maxOffset) batch by batch with a small maxBytes,
// verifying every batch and that offsets are contiguous, and returns the
// headers.
func readAll(t testing.TB, l *Log, from, maxOffset int64) []recordbatch.Header {
	t.Helper()
	var hs []recordbatch.Header
	next := from
	for {
		res, err := l.Read(next, 1, maxOffset)
		if err != nil {
			t.Fatalf("read at %d: %v", next, err)
		}
		if len(res.Batches) == 0 {
			if next < min(maxOffset, l.LogEndOffset()) {
				t.Fatalf("empty read at %d below %d", next, min(maxOffset, l.LogEndOffset()))
			}
			return hs
		}
		it := recordbatch.NewIter(res.Batches, true)
		for {
			h, _, ok := it.Next()
			if !ok {
				break
			}
			if len(hs) == 0 && (h.BaseOffset > next || h.LastOffset() < next) {
				t.Fatalf("read at %d returned batch [%d,%d]", next, h.BaseOffset, h.LastOffset())
			}
			if len(hs) > 0 && h.BaseOffset != hs[len(hs)-1].NextOffset() {
				t.Fatalf("non-contiguous: %d after %d", h.BaseOffset, hs[len(hs)-1].NextOffset())
			}
			hs = append(hs, h)
		}
		if err := it.Err(); err != nil {
			t.Fatalf("read at %d returned a bad batch: %v", next, err)
		}
		if res.NextOffset != hs[len(hs)-1].NextOffset() {
			t.Fatalf("NextOffset %d, last batch ends at %d", res.NextOffset, hs[len(hs)-1].NextOffset())
		}
		next = res.NextOffset
	}
}

func wantErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}
