package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestTestEvent(t *testing.T) {
	for _, c := range []struct {
		line  string
		name  string
		start bool
		ok    bool
	}{
		{"=== RUN   TestA\n", "TestA", true, true},
		{"\x16=== RUN   TestA\n", "TestA", true, true},
		{"--- PASS: TestA (1.20s)\n", "TestA", false, true},
		{"\x16--- FAIL: TestB (0.00s)\n", "TestB", false, true},
		{"--- SKIP: TestC (0.00s)\n", "TestC", false, true},
		{"=== RUN   TestA/sub\n", "", false, false},
		{"    --- PASS: TestA/sub (0.1s)\n", "", false, false},
		{"=== PAUSE TestA\n", "", false, false},
		{"ok  \tpkg\t0.1s\n", "", false, false},
	} {
		name, start, ok := testEvent(c.line)
		if name != c.name || start != c.start || ok != c.ok {
			t.Errorf("testEvent(%q) = %q, %v, %v; want %q, %v, %v", c.line, name, start, ok, c.name, c.start, c.ok)
		}
	}
}

func TestReadEvents(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":6.5}`,
		`{"Action":"pass","Package":"p","Test":"TestA/sub","Elapsed":6}`,
		`{"Action":"fail","Package":"p","Test":"TestB","Elapsed":1}`,
		`{"Action":"fail","Package":"p","Elapsed":7.6}`,
		`{"Action":"skip","Package":"empty"}`,
		`# build output that is not JSON`,
	}, "\n")
	wall, result, tests, err := readEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if wall["p"] != 7.6 || result["p"] != "fail" {
		t.Errorf("package p: %v %q", wall["p"], result["p"])
	}
	if _, ok := wall["empty"]; ok {
		t.Errorf("a package without tests is listed")
	}
	if len(tests) != 2 || tests[0].name != "TestA" || tests[0].wall != 6.5 || tests[1].result != "fail" {
		t.Errorf("tests: %+v", tests)
	}
}

// TestTreeCPUCountsChildren checks that a child's CPU shows in its
// parent's tree while it runs.
func TestTreeCPUCountsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	before := treeCPU(os.Getpid())
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// After the wait the child's time is in our cutime.
	after := treeCPU(os.Getpid())
	if spent := stateCPU(cmd.ProcessState); after-before < spent/2 || spent == 0 {
		t.Errorf("tree CPU grew by %.2fs while the child spent %.2fs", after-before, spent)
	}
}
