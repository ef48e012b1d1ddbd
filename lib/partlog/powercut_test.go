package partlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// The log on the real filesystem through vfs.VolatileFS, as a storage
// process with fault injection runs it: after a power cut that drops every
// byte and name not made durable, the log reopened on the plain OS holds
// exactly what was fsynced (Flush, or every append under FlushSync).
func TestPowerCutOnTheOSKeepsTheFsyncedPrefix(t *testing.T) {
	for _, mode := range []FlushMode{FlushNone, FlushSync} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "orders-0")
			cfg := Config{SegmentBytes: 1 << 20, Flush: FlushPolicy{Mode: mode}, CheckpointInterval: -1}
			vol := vfs.NewVolatile(vfs.Default)
			l, err := Open(dir, cfg, WithFS(vol), WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			var appended [][]byte
			for i := range 20 {
				if i == 12 {
					if err := l.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				b := makeBatch(t, 2, int64(i), 100)
				mustAppend(t, l, b, 0)
				appended = append(appended, b)
			}
			durable := 12
			if mode == FlushSync {
				durable = len(appended)
			}
			want := 2 * int64(durable)
			if rp := l.RecoveryPoint(); rp != want {
				t.Fatalf("recovery point %d before the cut, want %d", rp, want)
			}
			if err := vol.PowerCut(vfs.CrashOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 10), 0); err == nil {
				t.Fatal("append after the power cut succeeded")
			}
			l.Close() // fails: the disk is gone; releases the descriptors

			r, err := Open(dir, cfg, WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if !r.UncleanShutdown() {
				t.Error("the log reports a clean shutdown after a power cut")
			}
			if r.LogEndOffset() != want {
				t.Fatalf("recovered log end %d, want the fsynced point %d", r.LogEndOffset(), want)
			}
			hs := readAll(t, r, 0, r.LogEndOffset())
			for i, h := range hs {
				if got := batchAt(t, r, h.BaseOffset); !bytes.Equal(got, appended[i]) {
					t.Fatalf("batch %d differs from what was appended", i)
				}
			}
		})
	}
}

// Seeded trials on the real filesystem: appends, flushes, epoch changes,
// truncations and rolls (which fsync in the background), then a power cut
// that keeps a random prefix of the unsynced bytes and name changes. The
// log reopened on the plain OS is a prefix of what was appended, at least
// as long as what was known to be fsynced, and never corrupt.
func TestPowerCutOnTheOSRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	modes := []FlushMode{FlushNone, FlushInterval, FlushSync}
	for trial := range 12 {
		mode := modes[trial%len(modes)]
		cfg := Config{
			SegmentBytes:       int64(1024 + rng.IntN(3000)),
			IndexIntervalBytes: rng.IntN(400),
			Flush:              FlushPolicy{Mode: mode},
			CheckpointInterval: -1,
		}
		dir := filepath.Join(t.TempDir(), "p")
		vol := vfs.NewVolatile(vfs.Default)
		l, err := Open(dir, cfg, WithFS(vol), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		var appended [][]byte
		durable, epoch := 0, int32(0)
		for step := range 20 + rng.IntN(40) {
			switch op := rng.IntN(20); {
			case op == 0 && len(appended) > 0:
				keep := rng.IntN(len(appended) + 1)
				var off int64
				for _, b := range appended[:keep] {
					h, _ := recordbatch.ParseHeader(b)
					off = h.NextOffset()
				}
				if err := l.TruncateTo(off); err != nil {
					t.Fatalf("trial %d: truncate: %v", trial, err)
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
		if err := vol.PowerCut(vfs.CrashOptions{Rand: rng}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		r, err := Open(dir, cfg, WithLogger(testLogger(t)))
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
		if len(hs) > 0 && r.LatestEpoch() != hs[len(hs)-1].PartitionLeaderEpoch {
			t.Fatalf("trial %d: latest epoch %d, last batch has %d", trial, r.LatestEpoch(), hs[len(hs)-1].PartitionLeaderEpoch)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
