package check

import (
	"os"
	"path/filepath"
)

// readFile reads a file under deploy/.
func readFile(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", rel))
	return string(b), err
}

// readRepoFile reads a file relative to the repository root.
func readRepoFile(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	return string(b), err
}
