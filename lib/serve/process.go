package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Exit codes of [Command.Run] and [Main].
const (
	ExitOK     = 0 // clean shutdown, or --help
	ExitFailed = 1 // start-up failed, the server failed, or shutdown was not clean
	ExitConfig = 2 // bad flags, environment or config
)

// SetupFunc builds the service: it opens what the service needs, registers
// readiness checks and shutdown hooks on p, and returns the handler to
// serve on --listen (normally an http.ServeMux holding the Connect
// handlers). It runs after the listeners are bound, so p.Addr is known.
//
// ctx lives until in-flight requests have drained at shutdown, then is
// canceled before the shutdown hooks run: background goroutines started
// with it stop then. When SetupFunc fails, the hooks it registered so far
// still run, in reverse order, so a partial start is cleaned up.
type SetupFunc func(ctx context.Context, p *Process) (http.Handler, error)

// Command is one service binary. [Main] runs it with the process's
// arguments, environment and signals; tests call Run directly.
type Command struct {
	// Name is the binary's name, for example "strata-storage". It prefixes
	// error lines and is the default OTel service.name. Required.
	Name string
	// Summary is a sentence or two printed at the top of --help.
	Summary string
	// Config is the service's config struct (a pointer embedding [Base]).
	// Run fills it from flags and environment before calling Setup.
	Config Config
	// Setup builds the service. Required.
	Setup SetupFunc

	// Args are the command-line arguments without the program name.
	// Main passes os.Args[1:].
	Args []string
	// LookupEnv reads STRATA_* variables; nil means no environment. Main
	// passes os.LookupEnv. (OTEL_* variables are read by the OpenTelemetry
	// SDK from the real environment.)
	LookupEnv func(string) (string, bool)
	// Stdout receives --help; nil means io.Discard.
	Stdout io.Writer
	// Stderr receives logs and the one-line config error; nil means io.Discard.
	Stderr io.Writer
}

// Main runs cmd as the whole of a service's main function and exits the
// process with Run's exit code. SIGTERM and SIGINT start a graceful
// shutdown; a second signal during shutdown kills the process at once.
func Main(cmd Command) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// After the first signal, restore the default disposition so that a
	// second one ends a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	cmd.Args = os.Args[1:]
	cmd.LookupEnv = os.LookupEnv
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	os.Exit(cmd.Run(ctx))
}

// Run parses and validates the config, sets up logging and telemetry
// (installing them as the slog and otel globals), binds --listen and
// --admin-listen, calls Setup, serves until ctx is canceled, then shuts
// down in this order:
//
//  1. /readyz turns 503 and Draining closes;
//  2. the API listener stops accepting; in-flight requests get
//     --drain-timeout to finish, after which their connections are closed;
//  3. Setup's ctx is canceled;
//  4. shutdown hooks run in reverse order of registration, all within
//     another --drain-timeout;
//  5. telemetry is flushed and the admin listener closes.
//
// It returns [ExitOK] after a clean shutdown or --help, [ExitConfig] for
// bad config (one line on Stderr: "strata-storage: bad config: ..."), and
// [ExitFailed] otherwise. Run is meant to be called once per process.
func (cmd Command) Run(ctx context.Context) int {
	stdout, stderr := orDiscard(cmd.Stdout), orDiscard(cmd.Stderr)
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", cmd.Name, oneLine(fmt.Sprintf(format, args...)))
		return code
	}
	if cmd.Name == "" || cmd.Config == nil || cmd.Setup == nil {
		return fail(ExitFailed, "serve: Command needs Name, Config and Setup")
	}

	// Config: flags, then environment, then validation of everything.
	flags := NewFlags(cmd.Name)
	base := cmd.Config.base()
	base.registerFlags(flags)
	cmd.Config.RegisterFlags(flags)
	if err := flags.Parse(cmd.Args, cmd.LookupEnv); err != nil {
		if errors.Is(err, ErrHelp) {
			flags.PrintUsage(stdout, cmd.Summary)
			return ExitOK
		}
		return fail(ExitConfig, "bad config: %v", err)
	}
	if base.Probe != "" {
		return probe(ctx, base.Probe, base.TLS, stdout, stderr, cmd.Name)
	}
	var problems Problems
	base.validate(&problems)
	problems.Add(cmd.Config.Validate())
	if err := problems.Err(); err != nil {
		return fail(ExitConfig, "%v", err)
	}

	// Logging, and the resolved config logged once.
	logger, err := NewLogger(stderr, base.LogFormat, base.LogLevel, cmd.Name)
	if err != nil {
		return fail(ExitConfig, "bad config: %v", err)
	}
	slog.SetDefault(logger)
	version := buildVersion()
	logger.Info("starting",
		slog.String("version", version),
		slog.String("go", runtime.Version()),
		slog.Int("pid", os.Getpid()),
		slog.Any("config", slog.GroupValue(flags.Attrs()...)),
	)

	tel, err := NewTelemetry(ctx, TelemetryConfig{ServiceName: cmd.Name, ServiceVersion: version, Logger: logger})
	if err != nil {
		logger.Error("telemetry setup failed", slog.String("err", err.Error()))
		return fail(ExitFailed, "%v", err)
	}
	tel.SetGlobal()

	p := &Process{
		name:   cmd.Name,
		logger: logger,
		tel:    tel,
		health: NewHealth(),
		client: NewHTTPClient(),
		limits: newCallLimits(MaxStreamsPerPrincipal, MaxLongPollsPerPrincipal),
	}
	code := p.run(ctx, base, cmd.Setup)
	p.client.CloseIdleConnections()
	return code
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// version is set at link time by release and container builds:
// -ldflags "-X github.com/strata-mq/strata/lib/serve.version=v1.2.3"
// (deploy/docker/build.sh). Empty in other builds.
var version string

// buildVersion is the version set at link time, else the main module's
// version, or the VCS revision when the binary was built from a checkout,
// or "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return "devel"
}

// Process is what a service's Setup gets: its logger, telemetry, addresses,
// and the places to register readiness checks and shutdown hooks. Its
// methods are safe for concurrent use.
type Process struct {
	name   string
	logger *slog.Logger
	tel    *Telemetry
	health *Health
	client *http.Client
	tls    *tlsconfig.Source // nil without TLS
	guard  *guard.Guard
	// limits bound each user's open streams and long polls across the
	// process's handlers (concurrency.go).
	limits *callLimits

	apiLn    net.Listener
	adminLn  net.Listener
	adminMux *http.ServeMux // nil when the admin listener is disabled
	api      *Server

	// public are the handlers Setup registered with HandlePublic, by
	// pattern; served on the API listener outside the guard.
	public map[string]http.Handler

	mu        sync.Mutex
	hooks     []shutdownHook
	hooksDone bool
	draining  chan struct{}
}

type shutdownHook struct {
	name string
	fn   func(context.Context) error
}

// Name is the binary's name, as in Command.Name.
func (p *Process) Name() string { return p.name }

// Logger is the process logger (also slog.Default()). Log with the
// ...Context methods inside requests so lines carry trace ids.
func (p *Process) Logger() *slog.Logger { return p.logger }

// Telemetry is the process's OpenTelemetry setup.
func (p *Process) Telemetry() *Telemetry { return p.tel }

// ConnectOption is what every Connect handler and client of the process
// takes: the instrumentation of [Telemetry.ConnectOption], the request
// quota (requestquota.go), which charges a user's handler time and takes
// the process's own calls to other services out of it, and, on clients,
// [apierr.BrokenConnectionInterceptor], so a call to a peer that died
// under a pooled connection is UNAVAILABLE, as retry loops expect, not
// CANCELED.
func (p *Process) ConnectOption() connect.Option {
	return connect.WithOptions(p.tel.ConnectOption(), connect.WithInterceptors(requestTime{g: p.guard}, apierr.BrokenConnectionInterceptor{}))
}

// HTTPClient is the process's shared client for Connect calls to other
// Strata services, from [NewHTTPClient]. Its idle connections are closed
// when Run returns.
func (p *Process) HTTPClient() *http.Client { return p.client }

// Addr is the bound address of --listen (with the real port when the flag
// asked for port 0).
func (p *Process) Addr() net.Addr { return p.apiLn.Addr() }

// URL is the base URL of the API listener as reachable from this host,
// such as "http://127.0.0.1:9102" ("https://..." with TLS); see
// [Server.URL].
func (p *Process) URL() string {
	if p.tls != nil {
		return "https://" + strings.TrimPrefix(baseURL(p.apiLn.Addr()), "http://")
	}
	return baseURL(p.apiLn.Addr())
}

// AdminAddr is the bound address of --admin-listen, or nil when disabled.
func (p *Process) AdminAddr() net.Addr {
	if p.adminLn == nil {
		return nil
	}
	return p.adminLn.Addr()
}

// HandleAdmin serves h at pattern (an [http.ServeMux] pattern, such as
// "/debug/faults/") on the admin listener, beside /healthz, /readyz,
// /metrics and /debug/pprof/: for a service's own operator or test
// endpoints. The handler answers from the moment it is added, until the
// process ends. It returns an error, and adds nothing, when the admin
// listener is disabled; a pattern that conflicts with one already served
// panics, as with [http.ServeMux.Handle].
func (p *Process) HandleAdmin(pattern string, h http.Handler) error {
	if p.adminMux == nil {
		return fmt.Errorf("serve: admin endpoint %s needs the admin listener (--admin-listen)", pattern)
	}
	p.adminMux.Handle(pattern, h)
	return nil
}

// HandlePublic serves h at pattern (an [http.ServeMux] pattern, such as
// "/console/") on the API listener without authentication, even when the
// guard enforces: for static files that carry no data of the cluster (a
// web page that then calls the API with the user's credentials). Every
// other path still goes through the guard. Call it from Setup only; a
// pattern that conflicts with another panics, as with [http.ServeMux.Handle].
func (p *Process) HandlePublic(pattern string, h http.Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.public == nil {
		p.public = map[string]http.Handler{}
	}
	p.public[pattern] = h
}

// apiHandler is h behind the guard, with the public handlers beside it;
// unary request bodies are bounded (readlimits.go).
func (p *Process) apiHandler(h http.Handler) http.Handler {
	guarded := limitUnaryBody(p.guard.Wrap(h))
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.public) == 0 {
		return guarded
	}
	mux := http.NewServeMux()
	mux.Handle("/", guarded)
	for pattern, ph := range p.public {
		mux.Handle(pattern, ph)
	}
	return mux
}

// AddReadinessCheck registers a check behind /readyz; see [Health.AddCheck].
func (p *Process) AddReadinessCheck(name string, fn func(ctx context.Context) error) {
	p.health.AddCheck(name, fn)
}

// OnShutdown registers fn to run at shutdown, after in-flight requests
// have drained and Setup's ctx is canceled. Hooks run one at a time in
// reverse order of registration (what was opened last closes first), each
// exactly once, sharing a --drain-timeout deadline; a failing hook is
// logged and the rest still run. Registering after shutdown has begun runs
// nothing and logs a warning.
func (p *Process) OnShutdown(name string, fn func(ctx context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hooksDone {
		p.logger.Warn("shutdown hook registered too late; not run", slog.String("hook", name))
		return
	}
	p.hooks = append(p.hooks, shutdownHook{name, fn})
}

// Draining is closed when shutdown begins. Long-lived stream handlers
// (metadata watches, long-poll fetches) select on it and end the stream so
// that draining does not wait for them until --drain-timeout.
func (p *Process) Draining() <-chan struct{} { return p.draining }

func (p *Process) run(ctx context.Context, base *Base, setup SetupFunc) int {
	logger := p.logger
	p.draining = make(chan struct{})
	secCtx, stopSecurity := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSecurity() // the TLS files' watcher
	if err := p.startSecurity(secCtx, &base.Security); err != nil {
		logger.Error("security setup failed", slog.String("err", err.Error()))
		p.flushTelemetry(base.DrainTimeout)
		return ExitFailed
	}
	// Each server gets a config of its own: http.Server writes its HTTP/2
	// settings into the one it is given.
	apiTLS, err := p.serverTLS()
	var adminTLS *tls.Config
	if err == nil {
		adminTLS, err = p.serverTLS()
	}
	if err != nil {
		logger.Error("TLS setup failed", slog.String("err", err.Error()))
		p.flushTelemetry(base.DrainTimeout)
		return ExitFailed
	}
	p.apiLn, err = net.Listen("tcp", base.Listen)
	if err != nil {
		logger.Error("listen failed", slog.String("listen", base.Listen), slog.String("err", err.Error()))
		p.flushTelemetry(base.DrainTimeout)
		return ExitFailed
	}
	var admin *Server
	if base.AdminEnabled() {
		p.adminLn, err = net.Listen("tcp", base.AdminListen)
		if err != nil {
			p.apiLn.Close()
			logger.Error("listen failed", slog.String("admin-listen", base.AdminListen), slog.String("err", err.Error()))
			p.flushTelemetry(base.DrainTimeout)
			return ExitFailed
		}
		// The admin listener serves from before Setup until the very end,
		// so /healthz answers during a long start and /metrics during drain.
		p.adminMux = adminMux(p.health, p.tel.MetricsHandler())
		admin = StartServerTLS(p.adminLn, p.adminMux, adminTLS)
		defer admin.Close()
	}

	// Setup's ctx keeps ctx's values but not its cancellation: the service
	// runs until the drain is over, not until the signal.
	svcCtx, cancelSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSvc()
	h, err := setup(svcCtx, p)
	if err != nil {
		logger.Error("setup failed", slog.String("err", err.Error()))
		p.apiLn.Close()
		cancelSvc()
		p.runHooks(base.DrainTimeout)
		p.flushTelemetry(base.DrainTimeout)
		return ExitFailed
	}
	if h == nil {
		h = http.NotFoundHandler()
	}
	origins, _ := ParseCORSOrigins(base.CORSAllowedOrigins) // checked by validate
	p.api = StartServerTLS(p.apiLn, withGrownStack(CORSHandler(origins, p.apiHandler(h))), apiTLS)
	p.health.SetServing()
	attrs := []any{slog.String("listen", p.Addr().String())}
	if a := p.AdminAddr(); a != nil {
		attrs = append(attrs, slog.String("admin", a.String()))
	}
	logger.Info("serving", attrs...)

	code := ExitOK
	select {
	case <-ctx.Done():
		logger.Info("shutting down", slog.String("cause", shutdownCause(ctx)))
	case <-p.api.Done():
		logger.Error("server stopped", slog.Any("err", p.api.Err()))
		code = ExitFailed
	}

	// 1-2: turn unready, tell streams to end, drain in-flight requests.
	p.health.SetDraining()
	close(p.draining)
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), base.DrainTimeout)
	start := time.Now()
	if err := p.api.Shutdown(drainCtx); err != nil {
		logger.Warn("drain timed out; closed remaining connections", slog.Duration("drain_timeout", base.DrainTimeout))
		code = ExitFailed
	} else {
		logger.Info("drained", slog.Duration("took", time.Since(start)))
	}
	cancelDrain()
	// 3-4: stop background work, then close in reverse order.
	cancelSvc()
	if !p.runHooks(base.DrainTimeout) {
		code = ExitFailed
	}
	// 5: flush telemetry; the deferred admin.Close ends the admin listener.
	p.flushTelemetry(base.DrainTimeout)
	logger.Info("stopped", slog.Int("exit_code", code))
	return code
}

func shutdownCause(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil {
		return c.Error()
	}
	return "canceled"
}

// runHooks runs the shutdown hooks in reverse order and reports whether
// all of them succeeded.
func (p *Process) runHooks(timeout time.Duration) bool {
	p.mu.Lock()
	hooks := p.hooks
	p.hooks = nil
	p.hooksDone = true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ok := true
	for i := len(hooks) - 1; i >= 0; i-- {
		hk := hooks[i]
		if err := hk.fn(ctx); err != nil {
			p.logger.Error("shutdown hook failed", slog.String("hook", hk.name), slog.String("err", err.Error()))
			ok = false
		}
	}
	return ok
}

func (p *Process) flushTelemetry(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.tel.Shutdown(ctx); err != nil {
		p.logger.Warn("telemetry flush failed", slog.String("err", err.Error()))
	}
}

// probe is --probe: one GET of url, bounded by 5s; 0 on 200, else one line
// on stderr and 1. The rest of the config is not validated, so a health
// check can run beside the service with the same environment.
func probe(ctx context.Context, url string, files tlsconfig.Files, stdout, stderr io.Writer, name string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --probe %q: %v\n", name, url, err)
		return ExitFailed
	}
	client := http.DefaultClient
	if files.Enabled() {
		// An https admin listener is checked against the process's own CA.
		src, err := tlsconfig.Load(ctx, files)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --probe: %v\n", name, err)
			return ExitFailed
		}
		defer src.Close()
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: src.ClientConfig()}}
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --probe: %v\n", name, err)
		return ExitFailed
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "%s: --probe %s: %d %s\n", name, url, resp.StatusCode, oneLine(string(body)))
		return ExitFailed
	}
	fmt.Fprintf(stdout, "%s\n", oneLine(string(body)))
	return ExitOK
}
