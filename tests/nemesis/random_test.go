//go:build nemesis

package nemesis

import (
	"flag"
	"testing"
	"time"
)

var durationFlag = flag.Duration("nemesis.duration", 30*time.Minute, "how long the random schedule runs")

// TestNemesisRandom runs a random schedule of faults, drawn from a seed it
// prints, for -nemesis.duration: make test-nemesis DURATION=30m.
func TestNemesisRandom(t *testing.T) {
	execute(t, runConfig{seed: seedOrClock(), duration: *durationFlag, out: *outFlag})
}
