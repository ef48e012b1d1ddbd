package harness

import (
	"os"
	"sync"
	"testing"
)

// builds is the one cache of compiled binaries for a test binary run: all
// in one temporary directory, so `strata dev` finds the services next to
// `strata`, and each package compiled at most once.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string // package -> executable path
}

// Binary returns the executable of the main package pkg (an import path, or
// a path relative to the tests module like "./cmd/logwriter"), compiling it
// on first use into the shared build directory that RemoveBuilds deletes.
// A build failure fails the test with the compiler output.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.bins[pkg]; ok {
		return p
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "strata-bin-")
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		builds.dir, builds.bins = dir, map[string]string{}
	}
	p := Build(t, builds.dir, pkg)
	builds.bins[pkg] = p
	return p
}

// RemoveBuilds deletes everything Binary built. Call it from TestMain after
// m.Run.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir, builds.bins = "", nil
	}
}
