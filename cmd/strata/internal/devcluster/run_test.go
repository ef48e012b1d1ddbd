//go:build unix

package devcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testports"
	"github.com/strata-mq/strata/lib/testwait"
)

// syncBuffer is a bytes.Buffer safe to write from Main and read from the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeBasePort returns a base port whose whole range of cluster ports is
// free right now and held for this test alone (lib/testports: no other
// test process takes it meanwhile), below the kernel's ephemeral range
// (32768 and up on Linux; the range reaches base+215), where outgoing
// connections and listeners on port 0 take ports at random.
func freeBasePort(t *testing.T, controllers, storageNodes int) int {
	t.Helper()
	for range 5 { // a slot in use by something else stays held until the test ends
		p := testports.Reserve(t)
		pl := makePlan(t.TempDir(), p, controllers, storageNodes, 2, map[string]string{}, false)
		if checkPorts(pl) == nil {
			return p
		}
	}
	t.Fatal("no free base port found")
	return 0
}

// alive reports whether pid names a running process (not a zombie this
// process has yet to reap: strata dev reaps its children itself).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, d, what, func() error { return testwait.True(cond()) })
}

func readClusterFile(t *testing.T, dir string) (*clusterFile, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, clusterFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var f clusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("cluster.json: %v\n%s", err, b)
	}
	return &f, true
}

type devRun struct {
	dir            string
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	code           chan int
}

func startDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	return startDevIn(t, t.TempDir(), args...)
}

// startDevIn is startDev with --dir dir.
func startDevIn(t *testing.T, dir string, args ...string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{dir: dir, stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, code: make(chan int, 1)}
	go func() { r.code <- Main(ctx, append([]string{"--dir", r.dir}, args...), r.stdout, r.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.code:
		case <-time.After(30 * time.Second):
			t.Error("Main did not return after cancel")
		}
	})
	return r
}

// exited returns Main's exit code once it has returned, leaving it for
// wait and Cleanup.
func (r *devRun) exited() (int, bool) {
	select {
	case code := <-r.code:
		r.code <- code
		return code, true
	default:
		return 0, false
	}
}

// startDevOnFreePorts runs startDev with --base-port on a free base and
// waits until the cluster is ready or Main has returned. Should another
// process take one of the ports before a service binds it, strata dev
// exits saying a port is in use; then it starts again on another base.
func startDevOnFreePorts(t *testing.T, controllers, storageNodes int, args ...string) (*devRun, int) {
	t.Helper()
	return startDevOnFreePortsIn(t, "", controllers, storageNodes, args...)
}

// startDevOnFreePortsIn is startDevOnFreePorts with --dir dir; "" is a new
// temporary directory.
func startDevOnFreePortsIn(t *testing.T, dir string, controllers, storageNodes int, args ...string) (*devRun, int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		base := freeBasePort(t, controllers, storageNodes)
		d := dir
		if d == "" {
			d = t.TempDir()
		}
		r := startDevIn(t, d, append(args, "--base-port", strconv.Itoa(base))...)
		waitFor(t, 60*time.Second, "strata dev to be ready or to exit", func() bool {
			if _, done := r.exited(); done {
				return true
			}
			f, ok := readClusterFile(t, r.dir)
			return ok && f.Ready
		})
		if _, done := r.exited(); !done || !strings.Contains(r.stderr.String(), "in use") || attempt == 3 {
			return r, base
		}
		t.Logf("attempt %d: %s", attempt, strings.TrimSpace(r.stderr.String()))
	}
}

func (r *devRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.code:
		r.code <- code // for Cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("Main did not return\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		return -1
	}
}

func TestDevClusterRealProcesses(t *testing.T) {
	fakeBinDir(t)
	argvDir := t.TempDir()
	t.Setenv(fakeArgvDirEnv, argvDir)
	r, base := startDevOnFreePorts(t, 1, 2, "--storage-nodes", "2", "--controllers", "1", "--gateways", "2")

	var f *clusterFile
	waitFor(t, 60*time.Second, "cluster.json with ready true", func() bool {
		var ok bool
		f, ok = readClusterFile(t, r.dir)
		return ok && f.Ready
	})
	out := r.stdout.String()
	for _, want := range []string{
		"  controller-1  ready after ",
		"  storage-2     ready after ",
		"  gateway-1     ready after ",
		"  gateway-2     ready after ",
		"  coordinator-1 ready after ",
		"  tiering-1     ready after ",
		fmt.Sprintf("embedded s3 http://127.0.0.1:%d", base+4),
		"strata dev: ready after",
		fmt.Sprintf("export STRATA_GATEWAY=http://127.0.0.1:%d", base),
		fmt.Sprintf("  console       http://127.0.0.1:%d/console/\n", base),
		"strata topic create orders -p 12 -r 2",
		"seq 10 | strata produce orders",
		"strata consume orders -e",
		filepath.Join(r.dir, "logs", "storage-1.log"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}

	if f.Dir != r.dir || f.BasePort != base || f.Gateway != fmt.Sprintf("http://127.0.0.1:%d", base) || f.PID != os.Getpid() {
		t.Errorf("cluster.json top level = %+v", f)
	}
	if want := []string{fmt.Sprintf("http://127.0.0.1:%d", base), fmt.Sprintf("http://127.0.0.1:%d", base+32)}; !slices.Equal(f.Gateways, want) {
		t.Errorf("cluster.json gateways %q, want %q", f.Gateways, want)
	}
	var names []string
	for _, p := range f.Processes {
		names = append(names, fmt.Sprintf("%s-%d", p.Service, p.ID))
		if !p.Running || !alive(p.PID) {
			t.Errorf("%s-%d: running %v, pid %d alive %v", p.Service, p.ID, p.Running, p.PID, alive(p.PID))
		}
		if !filepath.IsAbs(p.Argv[0]) {
			t.Errorf("%s-%d: argv[0] %q is not absolute", p.Service, p.ID, p.Argv[0])
		}
		b, err := os.ReadFile(filepath.Join(argvDir, fmt.Sprintf("%d.json", p.PID)))
		if err != nil {
			t.Fatalf("%s-%d: no argv recorded for pid %d: %v", p.Service, p.ID, p.PID, err)
		}
		var got []string
		json.Unmarshal(b, &got)
		if !slices.Equal(got, p.Argv) {
			t.Errorf("%s-%d: process argv %q, cluster.json argv %q", p.Service, p.ID, got, p.Argv)
		}
		if resp, err := http.Get("http://" + p.AdminAddress + "/readyz"); err != nil || resp.StatusCode != 200 {
			t.Errorf("%s-%d: /readyz at %s: %v", p.Service, p.ID, p.AdminAddress, err)
		} else {
			resp.Body.Close()
		}
	}
	if want := []string{"controller-1", "storage-1", "storage-2", "gateway-1", "gateway-2", "coordinator-1", "tiering-1"}; !slices.Equal(names, want) {
		t.Fatalf("processes %q, want %q", names, want)
	}
	if s := f.Processes[2]; s.Address != fmt.Sprintf("127.0.0.1:%d", base+12) || s.AdminAddress != fmt.Sprintf("127.0.0.1:%d", base+112) {
		t.Errorf("storage-2 at %s admin %s", s.Address, s.AdminAddress)
	}

	// Kill storage-2: strata dev reports it, rewrites cluster.json and
	// keeps the others running.
	victim := f.Processes[2]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantLine := "strata dev: storage-2 exited (signal: killed); restart it with the argv in cluster.json\n"
	waitFor(t, 30*time.Second, "the exit line", func() bool { return strings.Contains(r.stderr.String(), wantLine) })
	if got := r.stderr.String(); got != wantLine {
		t.Errorf("stderr = %q, want just %q", got, wantLine)
	}
	waitFor(t, 30*time.Second, "cluster.json to show storage-2 stopped", func() bool {
		f, _ = readClusterFile(t, r.dir)
		return !f.Processes[2].Running
	})
	if p := f.Processes[2]; p.Exit != "signal: killed" || p.PID != victim.PID || !f.Ready {
		t.Errorf("after the kill: ready %v, storage-2 %+v", f.Ready, p)
	}
	for i, p := range f.Processes {
		if i != 2 && (!p.Running || !alive(p.PID)) {
			t.Errorf("%s-%d died with storage-2", p.Service, p.ID)
		}
	}

	// A test restarts it from cluster.json's argv alone, from another
	// working directory.
	restart := exec.Command(victim.Argv[0], victim.Argv[1:]...)
	restart.Dir = t.TempDir()
	if err := restart.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the restarted storage-2 to be ready", func() bool {
		resp, err := http.Get("http://" + victim.AdminAddress + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	restart.Process.Signal(syscall.SIGTERM)
	if err := restart.Wait(); err != nil {
		t.Errorf("restarted storage-2: %v", err)
	}

	// Canceling the context stops everything and exits 0.
	r.cancel()
	if code := r.wait(t); code != 0 {
		t.Errorf("exit code %d after cancel; stderr:\n%s", code, r.stderr)
	}
	for _, p := range f.Processes {
		if alive(p.PID) {
			t.Errorf("%s-%d (pid %d) still alive after stop", p.Service, p.ID, p.PID)
		}
	}
	f, _ = readClusterFile(t, r.dir)
	if f.Ready {
		t.Error("cluster.json says ready after stop")
	}
	for _, p := range f.Processes {
		if p.Running || p.Exit == "" {
			t.Errorf("after stop: %s-%d running %v exit %q", p.Service, p.ID, p.Running, p.Exit)
		}
	}
	if !strings.Contains(r.stdout.String(), "strata dev: stopped\n") {
		t.Errorf("stdout lacks the stop line:\n%s", r.stdout)
	}
	logb, err := os.ReadFile(filepath.Join(r.dir, "logs", "storage-1.log"))
	if err != nil || !strings.Contains(string(logb), "fake storage-1 stopped") {
		t.Errorf("storage-1 log does not show a graceful stop (%v):\n%s", err, logb)
	}
}

func TestDevClusterProcessFailsAtStart(t *testing.T) {
	fakeBinDir(t)
	t.Setenv(fakeFailEnv, "storage-1")
	r, _ := startDevOnFreePorts(t, 1, 1, "--storage-nodes", "1")
	if code := r.wait(t); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	log := filepath.Join(r.dir, "logs", "storage-1.log")
	want := fmt.Sprintf("strata dev: storage-1 exited (exit status 2) before it was ready: %s: bad config: --fake \"x\": made to fail; log: %s\n",
		filepath.Join(os.Getenv("PATH"), "strata-storage"), log)
	if got := r.stderr.String(); got != want {
		t.Errorf("stderr:\n%q\nwant\n%q", got, want)
	}
	f, _ := readClusterFile(t, r.dir)
	for _, p := range f.Processes {
		if alive(p.PID) {
			t.Errorf("%s-%d still alive", p.Service, p.ID)
		}
	}
}

func TestDevClusterReadyTimeout(t *testing.T) {
	fakeBinDir(t)
	t.Setenv(fakeNotReadyEnv, "controller-1")
	// The timeout is long enough for the fake to be up and answering 503
	// on a loaded machine, so that the message quotes that answer.
	r, base := startDevOnFreePorts(t, 1, 1, "--storage-nodes", "1", "--ready-timeout", "5s")
	if code := r.wait(t); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	want := fmt.Sprintf("strata dev: not ready after 5s: controller-1 (GET http://127.0.0.1:%d/readyz: 503 not ready / fake: never; log: %s)\n",
		base+101, filepath.Join(r.dir, "logs", "controller-1.log"))
	if got := r.stderr.String(); got != want {
		t.Errorf("stderr:\n%q\nwant\n%q", got, want)
	}
	if strings.Contains(r.stdout.String(), "storage-1") {
		t.Errorf("storage started although the controller was not ready:\n%s", r.stdout)
	}
}

func TestDevClusterPortInUse(t *testing.T) {
	fakeBinDir(t)
	base := freeBasePort(t, 1, 3)
	ln, err := netListen(base + 13)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := startDev(t, "--base-port", strconv.Itoa(base))
	if code := r.wait(t); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	want := fmt.Sprintf("strata dev: port %d (storage-3 API) is in use; stop what uses it or choose another --base-port\n", base+13)
	if got := r.stderr.String(); got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	if _, ok := readClusterFile(t, r.dir); ok {
		t.Error("cluster.json written although nothing started")
	}
	if r.stdout.String() != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}

// TestDevClusterPostgres: --postgres hands the coordinator, and only it,
// the DSN as STRATA_DSN; argv, cluster.json and stdout never show the
// password, and cluster.json says the offsets are in PostgreSQL.
func TestDevClusterPostgres(t *testing.T) {
	fakeBinDir(t)
	argvDir := t.TempDir()
	t.Setenv(fakeArgvDirEnv, argvDir)
	t.Setenv("STRATA_DSN", "")
	const dsn = "postgres://demo:s3cret@127.0.0.1:5432/strata_demo?sslmode=disable"
	r, _ := startDevOnFreePorts(t, 1, 1, "--storage-nodes", "1", "--postgres", dsn)
	var f *clusterFile
	waitFor(t, 60*time.Second, "cluster.json with ready true", func() bool {
		var ok bool
		f, ok = readClusterFile(t, r.dir)
		return ok && f.Ready
	})
	if !f.Postgres {
		t.Error("cluster.json does not say postgres")
	}
	raw, err := os.ReadFile(filepath.Join(r.dir, clusterFileName))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"cluster.json": string(raw), "stdout": r.stdout.String()} {
		if strings.Contains(text, "s3cret") {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}
	if want := "strata dev: the coordinator keeps group offsets in PostgreSQL at postgres://demo:xxxxx@127.0.0.1:5432/strata_demo?sslmode=disable\n"; !strings.Contains(r.stdout.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
	}
	for _, p := range f.Processes {
		got, err := os.ReadFile(filepath.Join(argvDir, fmt.Sprintf("%d.dsn", p.PID)))
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if p.Service == serviceCoordinator {
			want = dsn
		}
		if string(got) != want {
			t.Errorf("%s-%d: STRATA_DSN %q, want %q", p.Service, p.ID, got, want)
		}
	}
}
