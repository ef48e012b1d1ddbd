package partlog

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// keyedModel is what a keyed log was given: every record appended and not
// truncated away, by offset.
type keyedModel struct {
	recs    map[int64]string // offset -> "key:value"
	batches []int64          // base offsets of the appended batches, in order
	end     int64            // log end offset
	durable int64            // offsets below were fsynced
}

func (m *keyedModel) appended(info AppendInfo, kvs []string) {
	m.batches = append(m.batches, info.FirstOffset)
	for i, kv := range kvs {
		m.recs[info.FirstOffset+int64(i)] = kv
	}
	m.end = info.LastOffset + 1
}

func (m *keyedModel) truncate(off int64) {
	for o := range m.recs {
		if o >= off {
			delete(m.recs, o)
		}
	}
	for len(m.batches) > 0 && m.batches[len(m.batches)-1] >= off {
		m.batches = m.batches[:len(m.batches)-1]
	}
	m.end = min(m.end, off)
	m.durable = min(m.durable, off)
}

// check asserts what a cleaned log recovered from a crash must hold: no
// record it serves differs from what was appended at that offset; it ends
// at most at the appended end; and the newest record
// below the fsynced point of every key is there, or a newer one of the key
// is.
func (m *keyedModel) check(t testing.TB, what string, r *Log) {
	t.Helper()
	// The log end may fall back below the fsynced point only past the
	// last batch, where cleaning left nothing to serve.
	if r.LogEndOffset() > m.end {
		t.Fatalf("%s: recovered log end %d; %d durable, %d appended", what, r.LogEndOffset(), m.durable, m.end)
	}
	got := map[string]int64{} // key -> newest offset served
	for _, rec := range readRecords(t, r) {
		kv := rec.key + ":" + rec.value
		if m.recs[rec.offset] != kv {
			t.Fatalf("%s: offset %d holds %q, appended %q", what, rec.offset, kv, m.recs[rec.offset])
		}
		got[rec.key] = rec.offset
	}
	newest := map[string]int64{}
	for off, kv := range m.recs {
		k, _, _ := strings.Cut(kv, ":")
		if off < m.durable && off >= newest[k] {
			newest[k] = off
		}
	}
	for k, off := range newest {
		if g, ok := got[k]; !ok || g < off {
			t.Fatalf("%s: key %q lost: newest durable record at %d, log serves %v (%v)", what, k, off, g, ok)
		}
	}
}

// keyedAppend appends one batch of 1..4 records over a key space of keys
// keys.
func keyedAppend(t testing.TB, l *Log, m *keyedModel, rng *rand.Rand, keys, step int, epoch int32, codec recordbatch.Codec) error {
	var kvs []string
	for i := range 1 + rng.IntN(4) {
		kvs = append(kvs, fmt.Sprintf("k%d:v%d.%d", rng.IntN(keys), step, i))
	}
	info, err := l.AppendAsLeader(ctx, kvBatch(t, recordbatch.BuildOptions{Codec: codec}, int64(step), kvs...), epoch)
	if err == nil {
		m.appended(info, kvs)
	}
	return err
}

// cleanNow commits the log (high watermark at its end) and runs a pass
// over everything cleanable.
func cleanNow(l *Log) (CleanResult, error) {
	l.SetHighWatermark(l.LogEndOffset() - 5)
	cc := everything()
	cc.DeleteRetention = 1000 * time.Hour
	return l.Clean(ctx, cc)
}

// Randomized crash trials with cleaning: appends over a small key space,
// flushes, truncations, epoch changes and cleaning passes, under all three
// flush modes, then a power loss (torn unsynced tails, a random prefix of
// the directory operations). The recovered log serves only records as
// appended at their offsets, and keeps the newest fsynced record of every
// key.
func TestRandomizedCrashesWithCleaning(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	modes := []FlushMode{FlushNone, FlushInterval, FlushSync}
	codecs := []recordbatch.Codec{recordbatch.CodecNone, recordbatch.CodecNone, recordbatch.CodecLZ4}
	cleaned := 0
	for trial := range *crashTrials {
		mode := modes[trial%len(modes)]
		cfg := Config{
			SegmentBytes:       int64(300 + rng.IntN(1500)),
			IndexIntervalBytes: rng.IntN(300),
			Flush:              FlushPolicy{Mode: mode},
			CheckpointInterval: -1,
		}
		mem := vfs.NewMem()
		l := mustOpen(t, mem, cfg)
		m := &keyedModel{recs: map[int64]string{}}
		epoch := int32(0)
		for step := range 30 + rng.IntN(120) {
			switch op := rng.IntN(20); {
			case op == 0 && len(m.batches) > 0 && m.batches[len(m.batches)-1] >= l.HighWatermark():
				// A follower truncates above the high watermark, where
				// the cleaner never goes.
				var above []int64
				for _, b := range m.batches {
					if b >= l.HighWatermark() {
						above = append(above, b)
					}
				}
				off := above[rng.IntN(len(above))]
				if err := l.TruncateTo(off); err != nil {
					t.Fatalf("trial %d: truncate: %v", trial, err)
				}
				trace(t, "trial %d: truncate to %d", trial, off)
				m.truncate(off)
			case op <= 2:
				if err := l.Flush(ctx); err != nil {
					t.Fatalf("trial %d: flush: %v", trial, err)
				}
				m.durable = m.end
				trace(t, "trial %d: flush at %d", trial, m.end)
			case op <= 5:
				if *traceCrashes {
					trace(t, "trial %d: before the pass: %v", trial, readRecords(t, l))
				}
				res, err := cleanNow(l)
				if err != nil {
					t.Fatalf("trial %d: clean: %v", trial, err)
				}
				if res.SegmentsIn > 0 {
					cleaned++
				}
				trace(t, "trial %d: clean %+v segs %+v", trial, res, l.Segments())
				live := *m
				live.durable = m.end
				if *traceCrashes {
					trace(t, "trial %d: after the pass: %v", trial, readRecords(t, l))
				}
				live.check(t, fmt.Sprintf("trial %d: live log after a pass", trial), l)
			case op == 6:
				epoch++
				fallthrough
			default:
				if err := keyedAppend(t, l, m, rng, 8, step, epoch, codecs[rng.IntN(len(codecs))]); err != nil {
					t.Fatalf("trial %d: append: %v", trial, err)
				}
				if mode == FlushSync {
					m.durable = m.end
				}
			}
		}
		trace(t, "trial %d: crash; model %v", trial, m.recs)
		crashed := mem.Crash(vfs.CrashOptions{Rand: rng})
		l.Close()
		r, err := Open(testDir, cfg, WithFS(crashed), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("trial %d: reopen: %v", trial, err)
		}
		m.check(t, fmt.Sprintf("trial %d (%v)", trial, mode), r)
		// And it cleans on: a pass after recovery keeps the same keys.
		if _, err := cleanNow(r); err != nil {
			t.Fatalf("trial %d: clean after recovery: %v", trial, err)
		}
		m.end, m.durable = r.LogEndOffset(), r.LogEndOffset()
		m.check(t, fmt.Sprintf("trial %d after recovery and a pass", trial), r)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if cleaned < *crashTrials/2 {
		t.Fatalf("only %d trials swapped a cleaned segment in", cleaned)
	}
}

// The disk fails at every step of a cleaning pass in turn (the Nth create,
// write, sync, rename, remove or directory sync of the pass, and every one
// after it), then the power goes: recovery finds either the original
// segments or the cleaned one, never a half-written file, and loses no
// key.
func TestCleaningCrashAtEveryStep(t *testing.T) {
	ops := []vfs.Op{vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpRename, vfs.OpRemove, vfs.OpSyncDir}
	failedPasses, merged := 0, 0
	defer func() {
		if merged == 0 {
			t.Error("no pass merged segments")
		}
		t.Logf("%d passes failed on an injected fault", failedPasses)
		// Most steps must have been reached, or this tests little.
		if failedPasses < len(ops)*3 {
			t.Errorf("only %d passes failed on an injected fault", failedPasses)
		}
	}()
	for _, op := range ops {
		for after := range 6 {
			for _, torn := range []bool{false, true} {
				name := fmt.Sprintf("%v after %d torn %v", op, after, torn)
				t.Run(name, func(t *testing.T) {
					mem := vfs.NewMem()
					inj := vfs.Inject(mem)
					cfg := Config{SegmentBytes: 400, CheckpointInterval: -1}
					l := mustOpen(t, inj, cfg)
					rng := rand.New(rand.NewPCG(uint64(after), uint64(op)+uint64(len(name))))
					m := &keyedModel{recs: map[int64]string{}}
					for step := range 60 {
						if err := keyedAppend(t, l, m, rng, 60, step, 0, recordbatch.CodecNone); err != nil {
							t.Fatal(err)
						}
					}
					// A first pass leaves small segments that the next one
					// merges, so the faulted pass replaces groups.
					if err := l.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					if res, err := cleanNow(l); err != nil || res.SegmentsIn == 0 {
						t.Fatalf("first pass: %+v %v", res, err)
					}
					for step := range 30 {
						if err := keyedAppend(t, l, m, rng, 60, 100+step, 0, recordbatch.CodecNone); err != nil {
							t.Fatal(err)
						}
					}
					if err := l.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					m.durable = m.end
					inj.Add(vfs.Fault{Op: op, After: after, Sticky: true, Torn: -1})
					res, err := cleanNow(l)
					if err != nil {
						failedPasses++
					}
					if res.SegmentsIn > res.SegmentsOut {
						merged++
					}
					var crashed *vfs.MemFS
					if torn {
						crashed = mem.Crash(vfs.CrashOptions{Rand: rng})
					} else {
						crashed = mem.Crash(vfs.CrashOptions{})
					}
					l.Close()
					r, err := Open(testDir, cfg, WithFS(crashed), WithLogger(testLogger(t)))
					if err != nil {
						t.Fatalf("reopen: %v", err)
					}
					defer r.Close()
					m.check(t, name, r)
					names, _ := crashed.ReadDir(testDir)
					for _, n := range names {
						if strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, swapSuffix) {
							t.Fatalf("%s left after recovery", n)
						}
					}
					if _, err := cleanNow(r); err != nil && !errors.Is(err, ErrFailed) {
						t.Fatalf("clean after recovery: %v", err)
					}
					m.check(t, name+", cleaned after recovery", r)
				})
			}
		}
	}
}

var traceCrashes = flag.Bool("crash-trace", false, "log every step of TestRandomizedCrashesWithCleaning")

func trace(t testing.TB, format string, args ...any) {
	if *traceCrashes {
		t.Logf(format, args...)
	}
}
