package devcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeExecutable(t *testing.T, path string) {
	t.Helper()
	writeFile(t, path, "#!/bin/sh\n")
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestFindBinaries(t *testing.T) {
	beside := t.TempDir() // where strata runs from
	onPath := t.TempDir()
	writeExecutable(t, filepath.Join(beside, "strata-controller"))
	writeExecutable(t, filepath.Join(onPath, "strata-controller"))
	writeExecutable(t, filepath.Join(onPath, "strata-storage"))
	writeFile(t, filepath.Join(beside, "strata-storage"), "not executable")
	writeExecutable(t, filepath.Join(onPath, "strata-gateway"))
	writeExecutable(t, filepath.Join(onPath, "strata-coordinator"))
	writeExecutable(t, filepath.Join(onPath, "strata-tiering"))
	t.Setenv("PATH", onPath)

	bins, err := findBinaries(services, []string{beside}, exec.LookPath)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		serviceController:  filepath.Join(beside, "strata-controller"), // beside strata wins over PATH
		serviceStorage:     filepath.Join(onPath, "strata-storage"),    // a non-executable file is skipped
		serviceGateway:     filepath.Join(onPath, "strata-gateway"),
		serviceCoordinator: filepath.Join(onPath, "strata-coordinator"),
		serviceTiering:     filepath.Join(onPath, "strata-tiering"),
	}
	for s, p := range want {
		if bins[s] != p {
			t.Errorf("%s: %q, want %q", s, bins[s], p)
		}
	}
}

func TestFindBinariesMissing(t *testing.T) {
	beside := t.TempDir()
	writeExecutable(t, filepath.Join(beside, "strata-controller"))
	writeExecutable(t, filepath.Join(beside, "strata-gateway"))
	writeExecutable(t, filepath.Join(beside, "strata-coordinator"))
	writeExecutable(t, filepath.Join(beside, "strata-tiering"))
	notFound := func(string) (string, error) { return "", exec.ErrNotFound }
	_, err := findBinaries(services, []string{beside}, notFound)
	if err == nil || err.Error() != "strata-storage not found next to strata or on PATH; run 'make build'" {
		t.Errorf("err = %v", err)
	}
	if !errors.Is(err, errNotFound) {
		t.Errorf("err does not wrap errNotFound")
	}
}

func TestFindBinaryAbsolute(t *testing.T) {
	// A PATH entry that is relative still yields an absolute argv[0], so a
	// test can restart the process from any directory.
	rel := func(name string) (string, error) { return filepath.Join("bin", name), nil }
	p, ok := findBinary("strata-gateway", nil, rel)
	if !ok || !filepath.IsAbs(p) {
		t.Errorf("findBinary = %q, %v; want an absolute path", p, ok)
	}
	if _, ok := findBinary("strata-gateway", []string{t.TempDir()}, func(string) (string, error) { return "", exec.ErrDot }); ok {
		t.Error("exec.ErrDot counted as found")
	}
}
