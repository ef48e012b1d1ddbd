package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// errNotFound is returned by findBinaries when a service binary is missing.
var errNotFound = errors.New("not found next to strata or on PATH; run 'make build'")

// exeDirs returns the directories to look in before $PATH: the directory of
// the running executable and, when it is a symlink (a strata linked into
// ~/bin from a checkout's bin/), the directory of its target. `make build`
// puts strata and every service binary together in bin/.
func exeDirs() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	dirs := []string{filepath.Dir(exe)}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil && filepath.Dir(resolved) != dirs[0] {
		dirs = append(dirs, filepath.Dir(resolved))
	}
	return dirs
}

// findBinary returns the absolute path of the program name: the first
// executable named name in dirs, else what lookPath (exec.LookPath) finds
// on $PATH. A $PATH hit relative to the working directory (exec.ErrDot)
// counts as not found, as it does for exec.
func findBinary(name string, dirs []string, lookPath func(string) (string, error)) (string, bool) {
	for _, d := range dirs {
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			if abs, err := filepath.Abs(p); err == nil {
				return abs, true
			}
		}
	}
	p, err := lookPath(name)
	if err != nil {
		return "", false
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", false
	}
	return abs, true
}

// findBinaries finds the binary of each service and returns service name to
// absolute path, or an error naming every missing binary in one line.
func findBinaries(services []string, dirs []string, lookPath func(string) (string, error)) (map[string]string, error) {
	bins := map[string]string{}
	var missing []string
	for _, s := range services {
		name := binaryName(s)
		p, ok := findBinary(name, dirs, lookPath)
		if !ok {
			missing = append(missing, name)
			continue
		}
		bins[s] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s %w", strings.Join(missing, ", "), errNotFound)
	}
	return bins, nil
}
