package harness

import (
	"os/exec"
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
