package harness

import (
	"os"
	"path/filepath"
	"slices"
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
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	if p := prebuilt(pkg); p != "" {
		builds.bins[pkg] = p
		return p
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "strata-bin-")
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		builds.dir = dir
	}
	p := Build(t, builds.dir, pkg)
	builds.bins[pkg] = p
	return p
}

// RaceBinary is Binary for pkg built with the race detector: the file of
// that name in $STRATA_RACE_BIN when it holds one (make test builds
// bin/race/ once and sets it), else a build of its own, once per test
// binary run.
func RaceBinary(t testing.TB, pkg string) string {
	t.Helper()
	if dir := os.Getenv("STRATA_RACE_BIN"); dir != "" {
		p := filepath.Join(dir, filepath.Base(pkg))
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	key := "race:" + pkg
	if p, ok := builds.bins[key]; ok {
		return p
	}
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "strata-bin-")
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		builds.dir = dir
	}
	dir := filepath.Join(builds.dir, "race")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	p := build(t, dir, pkg, "-race")
	builds.bins[key] = p
	return p
}

// RemoveBuilds deletes everything Binary built. Call it from TestMain after
// m.Run.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir = ""
	}
	builds.bins = nil
}

// prebuilt returns the binary of pkg in $STRATA_BIN when pkg is the strata
// CLI or a service `strata dev` runs and the directory holds all of them,
// else "". make test builds bin/ once (make build) and sets STRATA_BIN, so
// every test package runs those binaries instead of linking copies of its
// own; the CLI there finds the services beside it, as strata dev expects.
// Set it by hand only to a bin/ built from the code under test.
func prebuilt(pkg string) string {
	dir := os.Getenv("STRATA_BIN")
	if dir == "" || (pkg != StrataPkg && !slices.Contains(devPkgs, pkg)) {
		return ""
	}
	for _, q := range append([]string{StrataPkg}, devPkgs...) {
		if fi, err := os.Stat(filepath.Join(dir, filepath.Base(q))); err != nil || !fi.Mode().IsRegular() {
			return ""
		}
	}
	return filepath.Join(dir, filepath.Base(pkg))
}
