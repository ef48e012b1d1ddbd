package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-mq/strata/lib/testwait"
)

// testConfig is a service config as a service would write it.
type testConfig struct {
	Base
	NodeID int
	DSN    string
}

func (c *testConfig) RegisterFlags(f *Flags) {
	f.IntVar(&c.NodeID, "node-id", 1, "this node's id")
	f.StringVar(&c.DSN, "offsets-dsn", "", "Postgres DSN")
}

func (c *testConfig) Validate() error {
	var p Problems
	if c.NodeID <= 0 {
		p.Flag("node-id", c.NodeID, "must be positive")
	}
	return p.Err()
}

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
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

func quietOTel(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
}

func TestRunBadConfigIsOneLine(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{
			args: []string{"--listen", "x", "--node-id", "0", "--log-format", "xml"},
			want: `strata-test: bad config: --listen "x": missing port; --log-format "xml": must be json or text; --node-id 0: must be positive` + "\n",
		},
		{
			env:  map[string]string{"STRATA_NODE_ID": "two"},
			want: `strata-test: bad config: STRATA_NODE_ID="two" (for --node-id): invalid value: parse error` + "\n",
		},
		{
			args: []string{"--nope"},
			want: "strata-test: bad config: unknown flag --nope (see --help)\n",
		},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Command{
			Name: "strata-test", Config: &testConfig{},
			Setup:  func(context.Context, *Process) (http.Handler, error) { t.Error("Setup called"); return nil, nil },
			Args:   tt.args,
			Stdout: &stdout, Stderr: &stderr, LookupEnv: env(tt.env),
		}.Run(context.Background())
		if code != ExitConfig {
			t.Errorf("%q: exit %d, want %d", tt.args, code, ExitConfig)
		}
		if stderr.String() != tt.want {
			t.Errorf("%q: stderr\n%q\nwant\n%q", tt.args, stderr.String(), tt.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: stdout %q (no usage dump on errors)", tt.args, stdout.String())
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Command{
		Name: "strata-test", Summary: "A test service.", Config: &testConfig{Base: Base{Listen: ":9102"}},
		Setup: func(context.Context, *Process) (http.Handler, error) { return nil, nil },
		Args:  []string{"--help"}, Stdout: &stdout, Stderr: &stderr,
	}.Run(context.Background())
	if code != ExitOK || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, want := range []string{
		"A test service.",
		"--listen string", "env STRATA_LISTEN; default \":9102\"",
		"--admin-listen string", "env STRATA_ADMIN_LISTEN",
		"--log-format", "--log-level", "--drain-timeout",
		"--node-id int", "env STRATA_NODE_ID; default 1",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// started runs cmd in the background and returns its Process once Setup
// has been called, and a channel with Run's exit code.
type running struct {
	p      *Process
	code   chan int
	cancel context.CancelFunc
	logs   *syncBuffer
}

func start(t *testing.T, cfg *testConfig, args []string, setup SetupFunc) *running {
	t.Helper()
	quietOTel(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &running{code: make(chan int, 1), logs: &syncBuffer{}}
	r.cancel = func() { cancel(errors.New("test stop")) }
	ready := make(chan *Process, 1)
	go func() {
		r.code <- Command{
			Name:   "strata-test",
			Config: cfg,
			Setup: func(ctx context.Context, p *Process) (http.Handler, error) {
				h, err := setup(ctx, p)
				ready <- p
				return h, err
			},
			Args:   append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...),
			Stderr: r.logs,
		}.Run(ctx)
	}()
	select {
	case r.p = <-ready:
	case code := <-r.code:
		t.Fatalf("Run exited %d before Setup; logs:\n%s", code, r.logs.String())
	}
	t.Cleanup(func() {
		r.cancel()
		select {
		case <-r.code:
		default:
		}
	})
	return r
}

func (r *running) waitReady(t *testing.T) {
	t.Helper()
	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", r.logs.String())
		}
	}()
	testwait.Until(t, 30*time.Second, "/readyz to answer 200", func() error {
		resp, err := c.Get(baseURL(r.p.AdminAddr()) + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

func TestRunServesConnectWithTelemetry(t *testing.T) {
	var serverTrace atomic.Value
	cfg := &testConfig{}
	r := start(t, cfg, []string{"--offsets-dsn", "postgres://u:hunter2@db/x", "--log-level", "debug"},
		func(ctx context.Context, p *Process) (http.Handler, error) {
			mux := http.NewServeMux()
			mux.Handle("/strata.test.v1.EchoService/Echo", connect.NewUnaryHandler("/strata.test.v1.EchoService/Echo",
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					serverTrace.Store(trace.SpanContextFromContext(ctx).TraceID().String())
					p.Logger().InfoContext(ctx, "echo")
					return connect.NewResponse(wrapperspb.String(req.Msg.Value)), nil
				}, p.ConnectOption()))
			return mux, nil
		})
	r.waitReady(t)
	p := r.p

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](
		p.HTTPClient(), p.URL()+"/strata.test.v1.EchoService/Echo", p.ConnectOption())
	ctx, span := p.Telemetry().Tracer("test").Start(context.Background(), "caller")
	resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("hi")))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.Value != "hi" {
		t.Errorf("echo = %q", resp.Msg.Value)
	}
	if got, want := serverTrace.Load(), span.SpanContext().TraceID().String(); got != want {
		t.Errorf("server span in trace %v, want the caller's %v", got, want)
	}

	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	_, metrics := get(t, c, baseURL(p.AdminAddr())+"/metrics")
	for _, want := range []string{"rpc_server_call_duration", "rpc_client_call_duration", `rpc_method="strata.test.v1.EchoService/Echo"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	r.cancel()
	if code := <-r.code; code != ExitOK {
		t.Fatalf("exit %d; logs:\n%s", code, r.logs.String())
	}

	// Every log line is JSON; the config is logged once with the DSN's
	// password masked; the handler's line carries the trace id.
	var starting, echo int
	for l := range strings.SplitSeq(strings.TrimSpace(r.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line not JSON: %q", l)
		}
		switch m["msg"] {
		case "starting":
			starting++
			config, _ := m["config"].(map[string]any)
			if config["offsets-dsn"] != "postgres://u:xxxxx@db/x" || config["node-id"] != float64(1) || config["listen"] != "127.0.0.1:0" {
				t.Errorf("config logged as %v", config)
			}
		case "echo":
			echo++
			if m["trace_id"] != span.SpanContext().TraceID().String() {
				t.Errorf("handler log line %q lacks the trace id", l)
			}
		}
	}
	if starting != 1 || echo != 1 {
		t.Errorf("%d starting lines and %d echo lines; logs:\n%s", starting, echo, r.logs.String())
	}
	if strings.Contains(r.logs.String(), "hunter2") {
		t.Error("password in logs")
	}
}

func TestRunGracefulShutdown(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	var order []string
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	var svcCtx context.Context
	r := start(t, &testConfig{}, nil, func(ctx context.Context, p *Process) (http.Handler, error) {
		svcCtx = ctx
		p.OnShutdown("first", func(context.Context) error { note("first"); return nil })
		p.OnShutdown("second", func(context.Context) error {
			if ctx.Err() == nil {
				t.Error("service ctx not canceled before hooks")
			}
			note("second")
			return nil
		})
		go func() {
			<-p.Draining()
			note("draining")
		}()
		return slowHandler(started, release), nil
	})
	r.waitReady(t)

	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	body := make(chan string, 1)
	go func() {
		resp, err := c.Get(r.p.URL() + "/slow")
		if err != nil {
			body <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body <- fmt.Sprintf("%s %s", resp.Proto, b)
	}()
	<-started
	r.cancel() // as SIGTERM would
	<-r.p.Draining()
	if svcCtx.Err() != nil {
		t.Error("service ctx canceled before the drain finished")
	}
	// /readyz turns 503 while draining; /healthz still answers.
	resp, _ := get(t, c, baseURL(r.p.AdminAddr())+"/readyz")
	if resp.StatusCode != 503 {
		t.Errorf("/readyz while draining = %d", resp.StatusCode)
	}
	if resp, _ := get(t, c, baseURL(r.p.AdminAddr())+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz while draining = %d", resp.StatusCode)
	}
	select {
	case code := <-r.code:
		t.Fatalf("Run returned %d with a request in flight", code)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if code := <-r.code; code != ExitOK {
		t.Fatalf("exit %d; logs:\n%s", code, r.logs.String())
	}
	if got := <-body; got != "HTTP/2.0 done" {
		t.Errorf("in-flight request got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"draining", "second", "first"}; !slices.Equal(order, want) {
		t.Errorf("shutdown order %v, want %v", order, want)
	}
	for _, msg := range []string{`"msg":"shutting down","service":"strata-test","cause":"test stop"`, `"msg":"drained"`, `"msg":"stopped"`} {
		if !strings.Contains(r.logs.String(), msg) {
			t.Errorf("logs lack %s:\n%s", msg, r.logs.String())
		}
	}
}

func TestRunDrainTimeout(t *testing.T) {
	started := make(chan struct{}, 1)
	hookRan := make(chan struct{})
	r := start(t, &testConfig{}, []string{"--drain-timeout", "50ms"}, func(ctx context.Context, p *Process) (http.Handler, error) {
		p.OnShutdown("close", func(context.Context) error { close(hookRan); return nil })
		return slowHandler(started, make(chan struct{})), nil
	})
	r.waitReady(t)
	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	go func() {
		if resp, err := c.Get(r.p.URL() + "/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	r.cancel()
	if code := <-r.code; code != ExitFailed {
		t.Errorf("exit %d, want %d after a drain timeout", code, ExitFailed)
	}
	<-hookRan // hooks run even after a timed-out drain
}

func TestRunSetupFailureRunsHooks(t *testing.T) {
	quietOTel(t)
	var closed atomic.Bool
	var stderr syncBuffer
	code := Command{
		Name: "strata-test", Config: &testConfig{},
		Args: []string{"--listen", "127.0.0.1:0"},
		Setup: func(ctx context.Context, p *Process) (http.Handler, error) {
			p.OnShutdown("log", func(context.Context) error { closed.Store(true); return nil })
			return nil, errors.New("open log: disk on fire")
		},
		Stderr: &stderr,
	}.Run(context.Background())
	if code != ExitFailed {
		t.Errorf("exit %d", code)
	}
	if !closed.Load() {
		t.Error("hook registered before the failure did not run")
	}
	if !strings.Contains(stderr.String(), "disk on fire") {
		t.Errorf("logs lack the cause:\n%s", stderr.String())
	}
}

func TestRunListenFailure(t *testing.T) {
	quietOTel(t)
	ln := listenLocal(t)
	defer ln.Close()
	var stderr syncBuffer
	code := Command{
		Name: "strata-test", Config: &testConfig{},
		Args:   []string{"--listen", ln.Addr().String()},
		Setup:  func(context.Context, *Process) (http.Handler, error) { t.Error("Setup called"); return nil, nil },
		Stderr: &stderr,
	}.Run(context.Background())
	if code != ExitFailed || !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("exit %d, logs:\n%s", code, stderr.String())
	}
}

func TestRunTextLogsAndNoAdmin(t *testing.T) {
	quietOTel(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Command{
			Name: "strata-test", Config: &testConfig{},
			Args: []string{"--listen", "127.0.0.1:0", "--admin-listen", "0", "--log-format", "text"},
			Setup: func(ctx context.Context, p *Process) (http.Handler, error) {
				if p.AdminAddr() != nil {
					t.Error("admin listener with --admin-listen 0")
				}
				cancel()
				return nil, nil
			},
			Stderr: &stderr,
		}.Run(ctx)
	}()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "level=INFO msg=starting service=strata-test") {
		t.Errorf("not text logs:\n%s", stderr.String())
	}
}

// A service adds its own endpoints to the admin listener; without one,
// HandleAdmin says so.
func TestHandleAdmin(t *testing.T) {
	r := start(t, &testConfig{}, nil, func(ctx context.Context, p *Process) (http.Handler, error) {
		err := p.HandleAdmin("GET /debug/thing", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "thing")
		}))
		return nil, err
	})
	r.waitReady(t)
	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	if resp, body := get(t, c, baseURL(r.p.AdminAddr())+"/debug/thing"); resp.StatusCode != 200 || body != "thing\n" {
		t.Errorf("/debug/thing = %d %q", resp.StatusCode, body)
	}
	if resp, body := get(t, c, baseURL(r.p.AdminAddr())+"/healthz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("/healthz beside it = %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, c, baseURL(r.p.Addr())+"/debug/thing"); resp.StatusCode != 404 {
		t.Errorf("/debug/thing on the API listener = %d, want 404", resp.StatusCode)
	}

	noAdmin := &Process{}
	if err := noAdmin.HandleAdmin("/debug/thing", http.NotFoundHandler()); err == nil || !strings.Contains(err.Error(), "--admin-listen") {
		t.Errorf("HandleAdmin without an admin listener: %v", err)
	}
}
