package tests

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/tests/harness"
	"github.com/strata-mq/strata/tests/logcheck"
)

// TestLogSurvivesKill9 runs a real process that appends to a partition log
// and kills it with SIGKILL at random moments, several times over the same
// directory. After each kill the log must open, hold every batch the
// process acknowledged, and hold nothing but whole, correct batches: the
// recovered log is batches 0..n-1 with n at least the acknowledged count.
func TestLogSurvivesKill9(t *testing.T) {
	t.Parallel()
	bin := harness.Binary(t, "./cmd/logwriter")
	for _, flush := range []string{"sync", "none"} {
		t.Run("flush="+flush, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "orders-0")
			rng := rand.New(rand.NewSource(int64(len(flush))))
			p := harness.Start(t, "logwriter", []string{bin, "--dir", dir, "--flush", flush})
			var acked int64 // batches acknowledged over all runs
			for round := 0; round < 4; round++ {
				ctx := harness.Deadline(t, 60*time.Second)
				want := 20 + rng.Intn(200)
				p.WaitLines(ctx, want)
				p.Kill()
				for _, line := range p.Lines() {
					f := strings.Fields(line)
					if len(f) != 3 || f[0] != "ack" {
						t.Fatalf("unexpected writer output %q", line)
					}
					seq, err := strconv.ParseInt(f[1], 10, 64)
					if err != nil {
						t.Fatalf("unexpected writer output %q", line)
					}
					if seq+1 > acked {
						acked = seq + 1
					}
				}

				l, err := partlog.Open(dir, partlog.Config{SegmentBytes: 256 << 10})
				if err != nil {
					t.Fatalf("round %d: open after kill: %v", round, err)
				}
				n, err := logcheck.Verify(l)
				if cerr := l.Close(); cerr != nil {
					t.Fatalf("round %d: close: %v", round, cerr)
				}
				if err != nil {
					t.Fatalf("round %d: recovered log is wrong after %d good batches: %v", round, n, err)
				}
				if n < acked {
					t.Fatalf("round %d: lost acknowledged data: %d batches acknowledged, %d recovered", round, acked, n)
				}
				t.Logf("round %d: %d batches acknowledged, %d recovered", round, acked, n)
				acked = n // the next run continues from what is there
				p.Restart()
			}
			p.Kill()
			segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			if len(segs) < 2 {
				t.Errorf("wanted the kills to land across segment rolls; found %d segments", len(segs))
			}
			_ = os.RemoveAll(dir)
		})
	}
}
