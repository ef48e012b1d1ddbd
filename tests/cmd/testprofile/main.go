// Command testprofile measures where the test suite's time goes: the wall
// and CPU time of each package's test binary, of each top-level test, and
// of each non-Go step (the TypeScript and browser suites). `make
// test-profile` drives it; docs/design/testing.md keeps its table.
//
// It has three verbs:
//
//	testprofile exec -out DIR BINARY ARGS...
//	    Run as `go test -exec`: runs one package's test binary, passes its
//	    output through untouched, and writes DIR/<n>.json with the binary's
//	    wall time, its CPU time (its own and that of every process it
//	    started and reaped: a real-process test's cluster counts), and the
//	    CPU time of each top-level test.
//	testprofile run -out DIR -name NAME -- COMMAND ARGS...
//	    Runs a command (`make ts-test`) and records its wall and CPU time
//	    the same way, as a step named NAME.
//	testprofile report -json FILE -out DIR [-min 5s]
//	    Reads `go test -json` output and the records in DIR and prints a
//	    Markdown table of packages and steps, slowest first, then every
//	    test that took at least -min of wall time.
//
// A test's CPU time is the CPU the test binary's process tree spent
// between the test's "=== RUN" and its result line, read from /proc: the
// binary, its live descendants, and the children they reaped. Processes
// that leave the tree (a daemon that detaches) are not counted, and tests
// that run in parallel (t.Parallel) share the time they overlap, so a
// parallel test's figure includes its neighbours'.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "exec":
		err = execVerb(os.Args[2:])
	case "run":
		err = runVerb(os.Args[2:])
	case "report":
		err = reportVerb(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testprofile:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testprofile exec -out DIR BINARY ARGS... | run -out DIR -name NAME -- CMD ARGS... | report -json FILE -out DIR [-min 5s]")
	os.Exit(2)
}

// record is one measured binary or step, as written to DIR/<n>.json.
type record struct {
	// Package is the import path of the package under test; empty for a
	// step.
	Package string `json:"package,omitempty"`
	// Step names a non-Go step (run -name).
	Step string `json:"step,omitempty"`
	// WallSeconds and CPUSeconds are the whole binary's or command's.
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	// TestCPUSeconds is each top-level test's CPU time.
	TestCPUSeconds map[string]float64 `json:"test_cpu_seconds,omitempty"`
}

func execVerb(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	out := fs.String("out", "", "directory for the record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		usage()
	}
	pkg, err := importPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	rec := record{Package: pkg, TestCPUSeconds: map[string]float64{}}
	running := map[string]float64{} // top-level test -> tree CPU at its start
	r := bufio.NewReader(stdout)
	for {
		line, rerr := r.ReadString('\n')
		if line != "" {
			os.Stdout.WriteString(line)
			if name, startLine, ok := testEvent(line); ok {
				cpu := treeCPU(cmd.Process.Pid)
				if startLine {
					running[name] = cpu
				} else if at, ok := running[name]; ok {
					rec.TestCPUSeconds[name] += cpu - at
					delete(running, name)
				}
			}
		}
		if rerr != nil {
			break
		}
	}
	werr := cmd.Wait()
	rec.WallSeconds = time.Since(start).Seconds()
	rec.CPUSeconds = stateCPU(cmd.ProcessState)
	if err := writeRecord(*out, rec); err != nil {
		return err
	}
	return werr
}

func runVerb(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	out := fs.String("out", "", "directory for the record")
	name := fs.String("name", "", "the step's name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *name == "" || fs.NArg() == 0 {
		usage()
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	if cmd.ProcessState == nil {
		return err
	}
	rec := record{Step: *name, WallSeconds: time.Since(start).Seconds(), CPUSeconds: stateCPU(cmd.ProcessState)}
	if werr := writeRecord(*out, rec); werr != nil {
		return werr
	}
	return err
}

// testEvent reports whether line starts or ends a top-level test. The
// binary writes test2json's framing (a leading 0x16 byte) under go test
// -json and plain lines otherwise; both are accepted.
func testEvent(line string) (name string, start bool, ok bool) {
	line = strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "\x16")
	var rest string
	switch {
	case strings.HasPrefix(line, "=== RUN "):
		rest, start = line[len("=== RUN "):], true
	case strings.HasPrefix(line, "--- PASS: "), strings.HasPrefix(line, "--- FAIL: "), strings.HasPrefix(line, "--- SKIP: "):
		rest = line[len("--- PASS: "):]
	default:
		return "", false, false
	}
	name = strings.Fields(strings.TrimSpace(rest) + " ")[0]
	if name == "" || strings.Contains(name, "/") {
		return "", false, false
	}
	return name, start, true
}

// stateCPU is the user and system time of a reaped process. On Linux
// wait4 reports a child's own time plus that of the children it reaped.
func stateCPU(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// clockTicks is the unit of /proc/PID/stat's times (sysconf(_SC_CLK_TCK),
// 100 on every Linux Go supports).
const clockTicks = 100

// treeCPU sums the CPU time of root and its live descendants, each with
// the time of the children it reaped, read from /proc.
func treeCPU(root int) float64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name sits in parentheses and may hold spaces:
		// the fields after it start at its last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// f[0] is field 3 (state); ppid is field 4, utime..cstime 14..17.
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, k := range f[11:15] {
			n, _ := strconv.ParseInt(k, 10, 64)
			ticks += n
		}
		procs[pid] = proc{ppid, ticks}
	}
	var total int64
	for pid, p := range procs {
		for q, hops := pid, 0; hops < 64; hops++ {
			if q == root {
				total += p.ticks
				break
			}
			parent, ok := procs[q]
			if !ok || parent.ppid == 0 {
				break
			}
			q = parent.ppid
		}
	}
	return float64(total) / clockTicks
}

// importPath is the import path of the package in the working directory,
// where go test runs a test binary: the module path from the nearest
// go.mod plus the directory below it.
func importPath() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
					rel, _ := filepath.Rel(dir, wd)
					if rel == "." {
						return f[1], nil
					}
					return f[1] + "/" + filepath.ToSlash(rel), nil
				}
			}
			return "", fmt.Errorf("%s/go.mod has no module line", dir)
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

func writeRecord(dir string, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "rec-*.json")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// event is the part of a `go test -json` event the report reads.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
}

// testRow is one line of the report: a top-level test of pkg, or (pkg
// empty) a package or step.
type testRow struct {
	pkg, name, result string
	wall, cpu         float64
	cpuKnown          bool
}

func reportVerb(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	jsonPath := fs.String("json", "", "go test -json output")
	dir := fs.String("out", "", "directory of records from exec and run")
	min := fs.Duration("min", 5*time.Second, "list tests with at least this wall time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jsonPath == "" || *dir == "" {
		usage()
	}
	recs, err := readRecords(*dir)
	if err != nil {
		return err
	}
	f, err := os.Open(*jsonPath)
	if err != nil {
		return err
	}
	defer f.Close()
	pkgWall, pkgResult, tests, err := readEvents(f)
	if err != nil {
		return err
	}

	byPkg := map[string]record{}
	var steps []record
	for _, r := range recs {
		if r.Step != "" {
			steps = append(steps, r)
		} else {
			byPkg[r.Package] = r
		}
	}

	var rows []testRow // pkg unused: name says what the row is
	var totalWall, totalCPU float64
	for pkg, wall := range pkgWall {
		r, ok := byPkg[pkg]
		rows = append(rows, testRow{name: shortPkg(pkg), result: pkgResult[pkg], wall: wall, cpu: r.CPUSeconds, cpuKnown: ok})
	}
	for _, s := range steps {
		rows = append(rows, testRow{name: "step: " + s.Step, wall: s.WallSeconds, cpu: s.CPUSeconds, cpuKnown: true})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].wall > rows[j].wall })
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintln(w, "| package or step | result | wall s | CPU s | CPU/wall |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, r := range rows {
		totalWall += r.wall
		cpu, ratio := "?", "?"
		if r.cpuKnown {
			totalCPU += r.cpu
			cpu = fmt.Sprintf("%.1f", r.cpu)
			if r.wall > 0 {
				ratio = fmt.Sprintf("%.2f", r.cpu/r.wall)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s |\n", r.name, r.result, r.wall, cpu, ratio)
	}
	fmt.Fprintf(w, "| **sum** | | %.1f | %.1f | |\n\n", totalWall, totalCPU)

	var slow []testRow
	for _, t := range tests {
		if t.wall < min.Seconds() {
			continue
		}
		if r, ok := byPkg[t.pkg]; ok {
			t.cpu, t.cpuKnown = r.TestCPUSeconds[t.name]
		}
		slow = append(slow, t)
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].wall > slow[j].wall })
	fmt.Fprintf(w, "| test (wall ≥ %s) | package | result | wall s | CPU s |\n", *min)
	fmt.Fprintln(w, "|---|---|---|---:|---:|")
	for _, t := range slow {
		cpu := "?"
		if t.cpuKnown {
			cpu = fmt.Sprintf("%.1f", t.cpu)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s |\n", t.name, shortPkg(t.pkg), t.result, t.wall, cpu)
	}
	return nil
}

// readEvents collects each package's elapsed time and result and each
// top-level test's, from `go test -json` output. Lines that are not JSON
// events (a build failure's text) are skipped.
func readEvents(r io.Reader) (pkgWall map[string]float64, pkgResult map[string]string, tests []testRow, err error) {
	pkgWall, pkgResult = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Package == "" {
			continue
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		if e.Test == "" {
			pkgWall[e.Package], pkgResult[e.Package] = e.Elapsed, e.Action
			continue
		}
		if !strings.Contains(e.Test, "/") {
			tests = append(tests, testRow{pkg: e.Package, name: e.Test, result: e.Action, wall: e.Elapsed})
		}
	}
	// A package with no test files has only a "skip" with no time: leave
	// it out of the table.
	for p, res := range pkgResult {
		if res == "skip" && pkgWall[p] == 0 {
			delete(pkgWall, p)
			delete(pkgResult, p)
		}
	}
	return pkgWall, pkgResult, tests, sc.Err()
}

func readRecords(dir string) ([]record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []record
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// shortPkg drops the module prefix the whole repository shares.
func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/strata-mq/strata/")
}
