package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/vfs"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// faultServer serves d's endpoints as the admin listener would.
func faultServer(t *testing.T, d *diskFaults) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range d.routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func decodeList(t *testing.T, body string) faultList {
	t.Helper()
	var l faultList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return l
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The endpoints arm, list and clear faults that the node's filesystem then
// applies, and refuse a bad request with 400 and one line.
func TestFaultEndpoints(t *testing.T) {
	d := newDiskFaults(quietLogger(), func() { t.Error("killed without a power cut") })
	url := faultServer(t, d).URL + "/debug/faults"
	dir := t.TempDir()

	if code, body := call(t, "GET", url, ""); code != 200 || body != "{\"faults\":[],\"fired\":0}\n" {
		t.Fatalf("GET with nothing armed: %d %q", code, body)
	}
	code, body := call(t, "POST", url, `{"op":"sync","path":"`+filepath.Join(dir, "p-0")+`/","err":"EIO","count":1}`)
	if code != 200 {
		t.Fatalf("arm: %d %q", code, body)
	}
	if code, body := call(t, "POST", url, `{"op":"write","path":"other","err":"ENOSPC"}`); code != 200 {
		t.Fatalf("arm: %d %q", code, body)
	}

	// The node's filesystem applies them: the first fsync of a file under
	// p-0 fails with EIO, once; files elsewhere are untouched.
	fsys := d.FS()
	if err := fsys.MkdirAll(filepath.Join(dir, "p-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Create(filepath.Join(dir, "p-0", "00.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first fsync: %v, want EIO", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("second fsync of a count-1 fault: %v", err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatalf("write outside the write fault's path: %v", err)
	}

	_, body = call(t, "GET", url, "")
	want := faultList{Fired: 1, Faults: []faultView{
		{Op: "sync", Path: filepath.Join(dir, "p-0") + "/", Err: "EIO", Count: 1, Fired: 1, Spent: true},
		{Op: "write", Path: "other", Err: "ENOSPC", Count: 0, Fired: 0},
	}}
	if got := decodeList(t, body); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("GET: %+v, want %+v", got, want)
	}
	if code, body := call(t, "DELETE", url, ""); code != 200 || len(decodeList(t, body).Faults) != 0 {
		t.Fatalf("DELETE: %d %q", code, body)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `op=sync`, "bad fault: invalid character"},
		{"unknown op", `{"op":"fsync"}`, `bad fault: op "fsync"`},
		{"unknown error", `{"op":"sync","err":"EPERM"}`, `bad fault: err "EPERM": want EIO or ENOSPC`},
		{"negative count", `{"op":"sync","count":-1}`, "bad fault: count -1"},
		{"unknown field", `{"op":"sync","after":3}`, `bad fault: json: unknown field "after"`},
	} {
		code, body := call(t, "POST", url, tc.body)
		if code != 400 || !strings.HasPrefix(body, tc.want) || strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
			t.Errorf("%s: %d %q, want 400 and one line starting %q", tc.name, code, body, tc.want)
		}
	}
	if len(d.inject.Faults()) != 0 {
		t.Errorf("a bad request armed a fault: %+v", d.inject.Faults())
	}
	if code, _ := call(t, "PUT", url, "{}"); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
}

// The power cut answers 202, drops what was not fsynced, then kills the
// process; every later disk operation fails.
func TestFaultPowerCut(t *testing.T) {
	var killed atomic.Bool
	d := newDiskFaults(quietLogger(), func() { killed.Store(true) })
	srv := faultServer(t, d)
	if code, body := call(t, "POST", srv.URL+"/debug/faults/power-cut?seed=x", ""); code != 400 || !strings.HasPrefix(body, `bad seed "x"`) {
		t.Fatalf("bad seed: %d %q", code, body)
	}
	dir := t.TempDir()
	fsys := d.FS()
	f, err := fsys.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("synced")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(" and lost")); err != nil {
		t.Fatal(err)
	}
	// A fault armed at the cut does not stop the rollback.
	if code, body := call(t, "POST", srv.URL+"/debug/faults", `{"op":"truncate"}`); code != 200 {
		t.Fatalf("arm: %d %q", code, body)
	}
	if code, body := call(t, "POST", srv.URL+"/debug/faults/power-cut", ""); code != http.StatusAccepted || body != "cutting the power\n" {
		t.Fatalf("power cut: %d %q", code, body)
	}
	if !killed.Load() {
		t.Fatal("the process was not killed after the power cut")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "synced" {
		t.Fatalf("file after the power cut: %q %v, want the synced bytes", b, err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, vfs.ErrPowerCut) {
		t.Fatalf("write after the power cut: %v", err)
	}
}

// Off, the node's replicas use the OS filesystem as it is.
func TestFaultInjectionOffUsesTheOS(t *testing.T) {
	var off *diskFaults
	if off.FS() != vfs.Default {
		t.Fatalf("switch off: FS %T, want vfs.Default", off.FS())
	}
	on := newDiskFaults(quietLogger(), func() {})
	if _, ok := on.FS().(*vfs.VolatileFS); !ok {
		t.Fatalf("switch on: FS %T, want *vfs.VolatileFS", on.FS())
	}
	n, err := Start(context.Background(), Config{NodeID: 1, Advertise: "http://127.0.0.1:1", DataDir: t.TempDir(),
		Controllers: []string{"http://127.0.0.1:1"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.cfg.FS != vfs.Default {
		t.Fatalf("a node started without an FS uses %T, want vfs.Default", n.cfg.FS)
	}
}

// The whole process: /debug/faults exists on the admin port only with
// --fault-injection, which logs a warning at start.
func TestFaultEndpointOnlyWithTheFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			// A controller that is never there: the node keeps trying.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctrl := "http://" + ln.Addr().String()
			ln.Close()
			args := []string{"--node-id", "1", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
				"--controller", ctrl, "--data-dir", t.TempDir(), "--log-format", "text"}
			if on {
				args = append(args, "--fault-injection")
			}
			cfg := &ProcessConfig{Base: serve.Base{Listen: DefaultListen}}
			setup := Setup(cfg)
			admin := make(chan net.Addr, 1)
			logs := &lockedBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() {
				done <- serve.Command{
					Name: "strata-storage", Config: cfg, Args: args, Stderr: logs,
					Setup: func(ctx context.Context, p *serve.Process) (http.Handler, error) {
						h, err := setup(ctx, p)
						admin <- p.AdminAddr()
						return h, err
					},
				}.Run(ctx)
			}()
			var addr net.Addr
			select {
			case addr = <-admin:
			case code := <-done:
				t.Fatalf("exited %d before Setup; logs:\n%s", code, logs.String())
			}
			defer func() {
				cancel()
				if code := <-done; code != serve.ExitOK {
					t.Errorf("exit code %d; logs:\n%s", code, logs.String())
				}
			}()
			code, body := call(t, "GET", "http://"+addr.String()+"/debug/faults", "")
			warned := strings.Contains(logs.String(), "fault injection is on")
			if on && (code != 200 || !strings.HasPrefix(body, `{"faults":[]`) || !warned) {
				t.Errorf("with --fault-injection: GET /debug/faults %d %q, warning logged %v", code, body, warned)
			}
			if !on && (code != 404 || warned) {
				t.Errorf("without --fault-injection: GET /debug/faults %d %q, warning logged %v", code, body, warned)
			}
			if !on {
				// (With the flag this would cut the power and kill the test.)
				if code, _ := call(t, "POST", "http://"+addr.String()+"/debug/faults/power-cut", ""); code != 404 {
					t.Errorf("without --fault-injection: POST /debug/faults/power-cut %d, want 404", code)
				}
			}
		})
	}
}

// An injected disk error fails the log as a real one would: the produce
// that met it gets an error and is not acknowledged, every later produce
// to that replica fails, and consumers see only what was acknowledged.
func TestInjectedDiskErrorFencesTheLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      string
		configs map[string]string
	}{
		{"write error", "write", nil},
		{"fsync error with flush.messages=1", "sync", map[string]string{"flush.messages": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDiskFaults(quietLogger(), func() { t.Error("killed") })
			c := newClusterWith(t, 1, 2*time.Second, nil, func(int32) vfs.FS { return d.FS() })
			c.createTopic("disk", 1, 1)
			if tc.configs != nil {
				c.ctrl.UpdateTopicConfigs("disk", func(m map[string]string) {
					for k, v := range tc.configs {
						m[k] = v
					}
				})
				c.eventually("flush.messages=1 applied", func() bool {
					return c.node(1).node.replica("disk", 0).Log().Config().Flush.Mode == partlog.FlushSync
				})
			}
			leader := c.storage(1)
			if _, err := produce(leader, "disk", acksAll, 1, batch(t, "acked"), 5*time.Second); err != nil {
				t.Fatalf("produce before the fault: %v", err)
			}
			srv := faultServer(t, d)
			dir := replica.Dir(c.dirs[1], "disk", 0) + string(filepath.Separator)
			if code, body := call(t, "POST", srv.URL+"/debug/faults", `{"op":"`+tc.op+`","path":"`+dir+`","err":"EIO","count":1}`); code != 200 {
				t.Fatalf("arm: %d %q", code, body)
			}
			if _, err := produce(leader, "disk", acksAll, 1, batch(t, "failed"), 5*time.Second); err == nil {
				t.Fatal("produce that met the disk error was acknowledged")
			}
			if d.inject.Fired() != 1 {
				t.Fatalf("fault fired %d times, want 1", d.inject.Fired())
			}
			// The node reports the failed log once (strata-storage stops
			// on it; haltOnLogFailure).
			c.mu.Lock()
			failures := slices.Clone(c.logFailures)
			c.mu.Unlock()
			if !slices.Equal(failures, []string{"node 1: disk-0"}) {
				t.Fatalf("log failures reported %q, want node 1's disk-0 once", failures)
			}
			// The fault is spent, but the log stays failed until reopened.
			_, err := produce(leader, "disk", acksAll, 1, batch(t, "after"), 5*time.Second)
			if err == nil {
				t.Fatal("produce to a failed log was acknowledged")
			}
			if reason(err) != commonv1.Reason_REASON_NOT_LEADER {
				t.Fatalf("produce to a failed log: %v, want NOT_LEADER so that clients look for the next leader", err)
			}
			if connect.CodeOf(err) == connect.CodeDeadlineExceeded {
				t.Fatalf("produce to a failed log timed out instead of failing: %v", err)
			}
			if !errors.Is(c.node(1).node.replica("disk", 0).Log().Flush(context.Background()), partlog.ErrFailed) {
				t.Fatal("the log is not in the failed state")
			}
			got := fetch(t, leader, "disk", 0, 0)
			if v := values(t, got.GetRecords()); len(v) != 1 || v[0] != "acked" || got.GetHighWatermark() != 1 {
				t.Fatalf("consumers see %q up to high watermark %d, want only the acknowledged record", v, got.GetHighWatermark())
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer the process's logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
