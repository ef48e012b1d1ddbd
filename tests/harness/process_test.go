package harness

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStartWithSetupEveryRun checks that StartWith's setup shapes the
// first run and every Restart: each run reports the working directory
// setup chose for it.
func TestStartWithSetupEveryRun(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	runs := 0
	setup := func(cmd *exec.Cmd) {
		cmd.Dir = dirs[runs]
		runs++
	}
	p := StartWith(t, "pwd", []string{"/bin/sh", "-c", "pwd -P"}, setup)
	for i, want := range dirs {
		if i > 0 {
			p.Restart()
		}
		ctx := Deadline(t, 30*time.Second)
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if got := p.Lines(); len(got) != 1 || got[0] != want {
			t.Fatalf("run %d printed %q, want [%q]", i+1, got, want)
		}
	}
	if runs != len(dirs) {
		t.Fatalf("setup ran %d times for %d runs", runs, len(dirs))
	}
}

// recordTB is a testing.TB that keeps what Errorf reports and drops logs.
type recordTB struct {
	testing.TB
	errs []string
}

func (r *recordTB) Log(...any) {}

func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestRaceReportFailsTheTest: a race detector report in a process's
// stderr fails the test once, however many reports follow.
func TestRaceReportFailsTheTest(t *testing.T) {
	rec := &recordTB{TB: t}
	w := &testWriter{t: rec, prefix: "storage-2: "}
	fmt.Fprint(w, "started\n==================\nWARNING: DATA RACE\nWrite at 0x00c000123 by goroutine 7:\n")
	fmt.Fprint(w, "==================\nWARNING: DATA RACE\nRead at 0x00c000456 by goroutine 9:\n")
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "storage-2: the race detector found a data race") {
		t.Fatalf("errors %q; want one naming storage-2", rec.errs)
	}
	clean := &recordTB{TB: t}
	fmt.Fprint(&testWriter{t: clean, prefix: "x: "}, "a log line mentioning a DATA RACE test\n")
	if len(clean.errs) != 0 {
		t.Fatalf("a line that is not a report failed the test: %q", clean.errs)
	}
}
