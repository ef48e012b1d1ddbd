package partlog

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

func runtimeGosched() { runtime.Gosched() }

// One appender, several readers, and retention deleting segments under
// them: readers only ever see whole, CRC-valid batches with contiguous
// offsets.
func TestConcurrentAppendRead(t *testing.T) {
	for _, fs := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), testDir }},
		{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }},
	} {
		t.Run(fs.name, func(t *testing.T) {
			fsys, dir := fs.fs(t)
			clock := newClock()
			l, err := Open(dir, Config{SegmentBytes: 8000, IndexIntervalBytes: 300, RetentionBytes: 40000, RetentionAge: -1},
				WithFS(fsys), WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var done atomic.Bool
			var wg sync.WaitGroup
			var reads atomic.Int64
			for r := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next := int64(0)
					for !done.Load() || next < l.LogEndOffset() {
						res, err := l.Read(next, 100+r*3000, l.LogEndOffset())
						if errors.Is(err, ErrOffsetOutOfRange) {
							next = l.LogStartOffset()
							continue
						}
						if err != nil {
							t.Error(err)
							return
						}
						reads.Add(1)
						expect := int64(-1)
						it := recordbatch.NewIter(res.Batches, true)
						for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
							if expect >= 0 && h.BaseOffset != expect {
								t.Errorf("offsets not contiguous: %d after %d", h.BaseOffset, expect)
								return
							}
							if expect < 0 && (h.BaseOffset > next || h.LastOffset() < next) {
								t.Errorf("read at %d got batch [%d, %d]", next, h.BaseOffset, h.LastOffset())
								return
							}
							expect = h.NextOffset()
						}
						if it.Err() != nil || len(it.Rest()) > 0 {
							t.Errorf("partial or corrupt batch: %v", it.Err())
							return
						}
						if len(res.Batches) > 0 {
							next = res.NextOffset
						} else {
							runtime.Gosched()
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !done.Load() {
					l.SetHighWatermark(l.LogEndOffset())
					if _, err := l.ApplyRetention(ctx); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			for i := range 2000 {
				if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1+i%5, int64(i), 10+i%200), 0); err != nil {
					t.Fatal(err)
				}
			}
			done.Store(true)
			wg.Wait()
			if reads.Load() == 0 {
				t.Fatal("no reads")
			}
		})
	}
}

// Many FlushSync appenders share fsyncs.
func TestGroupCommitSharesFsyncs(t *testing.T) {
	mem := vfs.NewMem()
	inj := vfs.Inject(mem)
	// Count syncs of the segment with a fault that never fires.
	l := mustOpen(t, inj, Config{Flush: FlushPolicy{Mode: FlushSync}})
	defer l.Close()
	inj.Add(vfs.Fault{Op: vfs.OpSync, Path: ".log", After: 1 << 30})
	var wg sync.WaitGroup
	const appenders, each = 32, 20
	for range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 10), 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if l.RecoveryPoint() != appenders*each {
		t.Fatalf("recovery point %d", l.RecoveryPoint())
	}
}
