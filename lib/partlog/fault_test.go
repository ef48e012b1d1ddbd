package partlog

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

func segPath(base int64, suffix string) string {
	return filepath.Join(testDir, segmentName(base)+suffix)
}

// batchAt returns the raw bytes of the batch starting at offset.
func batchAt(t testing.TB, l *Log, offset int64) []byte {
	t.Helper()
	res, err := l.Read(offset, 1, l.LogEndOffset())
	if err != nil {
		t.Fatalf("read %d: %v", offset, err)
	}
	return res.Batches
}

// A write torn by a crash leaves half a batch at the tail; recovery cuts
// it and keeps every earlier batch.
func TestRecoveryTornTail(t *testing.T) {
	mem := vfs.NewMem()
	inj := vfs.Inject(mem)
	l := mustOpen(t, inj, Config{})
	for i := range 10 {
		mustAppend(t, l, makeBatch(t, 2, int64(i), 50), 0)
	}
	inj.Add(vfs.Fault{Op: vfs.OpWrite, Path: ".log", Torn: -1})
	_, err := l.AppendAsLeader(ctx, makeBatch(t, 2, 0, 500), 0)
	wantErrIs(t, err, ErrFailed)
	wantErrIs(t, err, vfs.ErrInjected)
	// The failed bytes are never served; the log refuses further writes.
	if l.LogEndOffset() != 20 {
		t.Fatalf("LEO %d", l.LogEndOffset())
	}
	if hs := readAll(t, l, 0, 100); len(hs) != 10 {
		t.Fatalf("%d batches served", len(hs))
	}
	_, err = l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 5), 0)
	wantErrIs(t, err, ErrFailed)
	size, _ := mem.Stat(segPath(0, ".log"))
	// The process dies here (no Close); the torn half batch is on disk.
	l2 := mustOpen(t, mem, Config{})
	defer l2.Close()
	if hs := readAll(t, l2, 0, 100); len(hs) != 10 || l2.LogEndOffset() != 20 {
		t.Fatalf("recovered %d batches, LEO %d", len(hs), l2.LogEndOffset())
	}
	after, _ := mem.Stat(segPath(0, ".log"))
	if after.Size() >= size.Size() {
		t.Fatalf("torn tail not cut: %d -> %d bytes", size.Size(), after.Size())
	}
	// Appends work again after reopening.
	if info := mustAppend(t, l2, makeBatch(t, 1, 0, 5), 0); info.FirstOffset != 20 {
		t.Fatalf("first offset %d", info.FirstOffset)
	}
	l.Close()
}

// A flipped bit in the middle of the log: nothing from that batch on is
// ever served.
func TestRecoveryBitFlip(t *testing.T) {
	cfg := Config{SegmentBytes: 1000, IndexIntervalBytes: 100}
	// setup returns the FS, the base of the third segment and the offset
	// of the corrupted batch (its third).
	setup := func(t *testing.T) (*vfs.MemFS, int64, int64) {
		mem := vfs.NewMem()
		l := mustOpen(t, mem, cfg)
		for i := range 30 {
			mustAppend(t, l, makeBatch(t, 2, int64(i), 60), 0)
		}
		seg := l.segs[2].base
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		batch := len(makeBatch(t, 2, 0, 60))
		if err := vfs.FlipBit(mem, segPath(seg, ".log"), int64(2*batch+100), 3); err != nil {
			t.Fatal(err)
		}
		return mem, seg, seg + 4
	}
	t.Run("full scan after a crash", func(t *testing.T) {
		mem, seg, bad := setup(t)
		// Simulate a crash before any checkpoint was written.
		if err := mem.Remove(filepath.Join(testDir, logCheckpointFile)); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, mem, cfg)
		defer l.Close()
		if l.LogEndOffset() != bad {
			t.Fatalf("LEO %d, want %d", l.LogEndOffset(), bad)
		}
		if hs := readAll(t, l, 0, 1000); hs[len(hs)-1].NextOffset() != bad {
			t.Fatalf("served up to %d", hs[len(hs)-1].NextOffset())
		}
		names, _ := mem.ReadDir(testDir)
		for _, n := range names {
			if base, ok := parseSegmentName(n); ok && base > seg {
				t.Fatalf("later segment %s kept", n)
			}
		}
		// New appends continue from the cut.
		if info := mustAppend(t, l, makeBatch(t, 1, 0, 1), 1); info.FirstOffset != bad {
			t.Fatalf("append at %d", info.FirstOffset)
		}
		readAll(t, l, 0, 1000)
	})
	t.Run("below the recovery point reads refuse the batch", func(t *testing.T) {
		mem, seg, bad := setup(t)
		l := mustOpen(t, mem, cfg)
		defer l.Close()
		if _, err := l.Read(bad, 1<<20, 1000); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read of corrupt batch: %v", err)
		}
		res, err := l.Read(seg, 1<<20, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if res.NextOffset != bad {
			t.Fatalf("read stopped at %d, want %d", res.NextOffset, bad)
		}
	})
}

// Missing, corrupt and stale indexes are rebuilt from the log.
func TestIndexRebuild(t *testing.T) {
	cfg := Config{SegmentBytes: 2000, IndexIntervalBytes: 150}
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, mem *vfs.MemFS)
	}{
		{"missing index", func(t *testing.T, mem *vfs.MemFS) {
			if err := mem.Remove(segPath(0, ".index")); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing timeindex", func(t *testing.T, mem *vfs.MemFS) {
			if err := mem.Remove(segPath(0, ".timeindex")); err != nil {
				t.Fatal(err)
			}
		}},
		{"corrupt index", func(t *testing.T, mem *vfs.MemFS) {
			if err := vfs.FlipBit(mem, segPath(0, ".index"), indexHeaderSize+5, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated timeindex", func(t *testing.T, mem *vfs.MemFS) {
			f, _ := mem.OpenReadWrite(segPath(0, ".timeindex"))
			f.Truncate(20)
			f.Close()
		}},
		{"garbage index", func(t *testing.T, mem *vfs.MemFS) {
			f, _ := mem.Create(segPath(0, ".index"))
			f.Write(bytes.Repeat([]byte{0xAB}, 100))
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			l := mustOpen(t, mem, cfg)
			for i := range 40 {
				mustAppend(t, l, makeBatch(t, 2, int64(1000+i*10), 40), 0)
			}
			wantTS, _, _ := l.OffsetForTimestamp(1155)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			tc.break_(t, mem)
			l = mustOpen(t, mem, cfg)
			defer l.Close()
			if hs := readAll(t, l, 0, 1000); len(hs) != 40 {
				t.Fatalf("%d batches", len(hs))
			}
			if off, ok, _ := l.OffsetForTimestamp(1155); off != wantTS || !ok {
				t.Fatalf("OffsetForTimestamp %d %v, want %d", off, ok, wantTS)
			}
			for off := int64(0); off < 80; off += 3 {
				if h, err := recordbatch.Verify(batchAt(t, l, off)); err != nil || h.LastOffset() < off || h.BaseOffset > off {
					t.Fatalf("read %d: %+v %v", off, h, err)
				}
			}
			// The rebuilt index was written back.
			b, err := vfs.ReadFile(mem, segPath(0, ".index"))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := DecodeOffsetIndex(b); err != nil {
				t.Fatalf("index not rewritten: %v", err)
			}
		})
	}
}

// A corrupt checkpoint is detected and recovery scans every segment.
func TestCorruptCheckpoint(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 1000}
	l := mustOpen(t, mem, cfg)
	for i := range 20 {
		mustAppend(t, l, makeBatch(t, 1, int64(i), 100), 0)
	}
	l.SetHighWatermark(15)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(testDir, logCheckpointFile)
	if _, err := readLogCheckpoint(mem, testDir); err != nil {
		t.Fatal(err)
	}
	if err := vfs.FlipBit(mem, ck, 30, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := readLogCheckpoint(mem, testDir); err == nil {
		t.Fatal("corrupt checkpoint not detected")
	}
	// A bad batch in the first segment is only found by a full scan.
	if err := vfs.FlipBit(mem, segPath(0, ".log"), 300, 0); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, mem, cfg)
	defer l.Close()
	if l.LogEndOffset() >= 20 || l.Stats().Segments != 1 {
		t.Fatalf("full scan did not run: %+v", l.Stats())
	}
	if l.HighWatermark() > l.LogEndOffset() {
		t.Fatalf("HW %d past LEO %d", l.HighWatermark(), l.LogEndOffset())
	}
	readAll(t, l, 0, 100)
	// The epoch checkpoint too.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.FlipBit(mem, filepath.Join(testDir, epochCheckpointFile), 5, 0); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, mem, cfg)
	defer l.Close()
	if l.LatestEpoch() != 0 {
		t.Fatalf("epoch history not rebuilt: %d", l.LatestEpoch())
	}
}

// A failed fsync fails FlushSync appends and the log.
func TestSyncError(t *testing.T) {
	mem := vfs.NewMem()
	inj := vfs.Inject(mem)
	l := mustOpen(t, inj, Config{Flush: FlushPolicy{Mode: FlushSync}})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 1, 0, 10), 0)
	inj.Add(vfs.Fault{Op: vfs.OpSync, Path: ".log"})
	_, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 10), 0)
	wantErrIs(t, err, ErrFailed)
	_, err = l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 10), 0)
	wantErrIs(t, err, ErrFailed)
	if inj.Fired() != 1 {
		t.Fatalf("fired %d", inj.Fired())
	}
}

// With FlushSync, every acknowledged batch survives a power loss that
// happens while many appenders are in flight.
func TestCrashFlushSyncConcurrent(t *testing.T) {
	for trial := range 10 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(trial), 7))
			mem := vfs.NewMem()
			l := mustOpen(t, mem, Config{SegmentBytes: 4000, Flush: FlushPolicy{Mode: FlushSync}})
			var mu sync.Mutex
			acked := map[int64][]byte{}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						b := makeBatch(t, 1+i%3, int64(w*1000+i), 20+w)
						info, err := l.AppendAsLeader(ctx, b, 0)
						if err != nil {
							return
						}
						mu.Lock()
						acked[info.FirstOffset] = b
						mu.Unlock()
					}
				}()
			}
			for l.LogEndOffset() < int64(50+rng.IntN(200)) {
				runtimeGosched()
			}
			mu.Lock()
			snapshot := make(map[int64][]byte, len(acked))
			for k, v := range acked {
				snapshot[k] = v
			}
			mu.Unlock()
			crashed := mem.Crash(vfs.CrashOptions{Rand: rng})
			close(stop)
			wg.Wait()
			l.Close()

			r := mustOpen(t, crashed, Config{SegmentBytes: 4000})
			defer r.Close()
			readAll(t, r, 0, r.LogEndOffset())
			for off, b := range snapshot {
				if off >= r.LogEndOffset() {
					t.Fatalf("acknowledged batch at %d lost (LEO %d)", off, r.LogEndOffset())
				}
				if got := batchAt(t, r, off); !bytes.Equal(got, b) {
					t.Fatalf("acknowledged batch at %d differs", off)
				}
			}
		})
	}
}

var (
	crashSeed   = flag.Uint64("crash-seed", 42, "seed for TestRandomizedCrashes; 0 picks one from the clock")
	crashTrials = flag.Int("crash-trials", 50, "trials in TestRandomizedCrashes")
)

// Randomized crash trials: after a power loss at a random point, the
// recovered log is a prefix of what was appended and holds at least every
// batch that an fsync covered before the crash.
func TestRandomizedCrashes(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	modes := []FlushMode{FlushNone, FlushInterval, FlushSync}
	for trial := range *crashTrials {
		mode := modes[trial%len(modes)]
		cfg := Config{
			SegmentBytes:       int64(500 + rng.IntN(3000)),
			IndexIntervalBytes: rng.IntN(400),
			Flush:              FlushPolicy{Mode: mode},
			CheckpointInterval: -1,
		}
		mem := vfs.NewMem()
		fs := vfs.FS(mem)
		var appended [][]byte // every batch the log accepted, in offset order
		durable := 0          // batches an fsync covered before the crash
		epoch := int32(0)
		l := mustOpen(t, fs, cfg)
		steps := 20 + rng.IntN(80)
		for step := range steps {
			switch op := rng.IntN(20); {
			case op == 0 && len(appended) > 0:
				// Follower truncation to a batch boundary, then the log is
				// fsynced as TruncateTo does.
				keep := rng.IntN(len(appended) + 1)
				var off int64
				for _, b := range appended[:keep] {
					h, _ := recordbatch.ParseHeader(b)
					off = h.NextOffset()
				}
				if err := l.TruncateTo(off); err != nil {
					t.Fatalf("trial %d: truncate: %v", trial, err)
				}
				if keep == 0 && off == 0 {
					keep = 0
				}
				appended = appended[:keep]
				durable = min(durable, keep)
			case op == 1:
				if err := l.Flush(ctx); err != nil {
					t.Fatalf("trial %d: flush: %v", trial, err)
				}
				durable = len(appended)
			case op == 2:
				epoch++
				fallthrough
			default:
				b := makeBatch(t, 1+rng.IntN(4), int64(step), rng.IntN(200))
				if _, err := l.AppendAsLeader(ctx, b, epoch); err != nil {
					t.Fatalf("trial %d: append: %v", trial, err)
				}
				appended = append(appended, b)
				if mode == FlushSync {
					durable = len(appended)
				}
			}
		}
		crashed := mem.Crash(vfs.CrashOptions{Rand: rng})
		l.Close()
		r, err := Open(testDir, cfg, WithFS(crashed), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("trial %d: reopen: %v", trial, err)
		}
		hs := readAll(t, r, 0, r.LogEndOffset())
		if len(hs) < durable || len(hs) > len(appended) {
			t.Fatalf("trial %d (%v): recovered %d batches; %d durable, %d appended", trial, mode, len(hs), durable, len(appended))
		}
		for i := range hs {
			if got := batchAt(t, r, hs[i].BaseOffset); !bytes.Equal(got, appended[i]) {
				t.Fatalf("trial %d: batch %d differs from what was appended", trial, i)
			}
		}
		// The epoch history agrees with the batches that survived.
		if len(hs) > 0 && r.LatestEpoch() != hs[len(hs)-1].PartitionLeaderEpoch {
			t.Fatalf("trial %d: latest epoch %d, last batch has %d", trial, r.LatestEpoch(), hs[len(hs)-1].PartitionLeaderEpoch)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The failure hook runs once, when the first write fails; later writes
// fail with ErrFailed without calling it again.
func TestFailureHookRunsOnce(t *testing.T) {
	fs := vfs.Inject(vfs.NewMem())
	var calls []error
	l := mustOpen(t, fs, Config{}, WithFailureHook(func(err error) { calls = append(calls, err) }))
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 1, 1_700_000_000_000, 10), 0)
	fs.Add(vfs.Fault{Op: vfs.OpWrite})
	for range 2 {
		if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 1_700_000_000_000, 10), 0); err == nil {
			t.Fatal("append on a failing disk succeeded")
		}
	}
	if len(calls) != 1 || !errors.Is(calls[0], vfs.ErrInjected) {
		t.Fatalf("failure hook calls %v, want one with the injected error", calls)
	}
}
