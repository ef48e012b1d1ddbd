package nemesis

import (
	"flag"
	"strings"
	"testing"
	"time"
)

var (
	seedFlag = flag.Uint64("nemesis.seed", 0, "seed of the random schedule (0: from the clock); the run prints the one it used")
	outFlag  = flag.String("nemesis.out", "", "directory for the run's history (default: $TMPDIR/strata-nemesis)")
	onlyFlag = flag.String("nemesis.faults", "", "comma-separated fault names: run just these, in order, instead of the short schedule (faults.go lists the names); a+b runs b alongside a")
)

// TestNemesisShort runs every fault once, in a fixed order and with a
// fixed seed, under the workload, and checks the history: make test's
// part of the fault suite, a few minutes long. make test-nemesis runs
// random schedules for longer (random_test.go).
func TestNemesisShort(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = 20261202
	}
	schedule := shortSchedule()
	if *onlyFlag != "" {
		schedule = nil
		for _, name := range strings.Split(*onlyFlag, ",") {
			first, with, _ := strings.Cut(strings.TrimSpace(name), "+")
			s := step{fault: faultNamed(first), hold: 4 * time.Second, gap: 2 * time.Second}
			if with != "" {
				w := faultNamed(with)
				s.with = &w
			}
			schedule = append(schedule, s)
		}
	}
	execute(t, runConfig{seed: seed, schedule: schedule, out: *outFlag})
}

// seedOrClock is the -nemesis.seed flag, or a seed from the clock.
func seedOrClock() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return uint64(time.Now().UnixNano())
}
