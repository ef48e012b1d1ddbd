package serve

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"
)

// CheckTimeout bounds one run of all readiness checks behind /readyz. A
// check that has not answered by then counts as failing.
const CheckTimeout = 3 * time.Second

// Health holds the process's readiness: its lifecycle state (starting,
// serving, draining) and the readiness checks services register. The zero
// value is not usable; use [NewHealth]. Safe for concurrent use.
type Health struct {
	mu     sync.Mutex
	state  string // "" when serving, else why not ready: "starting", "shutting down"
	checks []readinessCheck
}

type readinessCheck struct {
	name string
	fn   func(context.Context) error
}

// NewHealth returns a Health in the "starting" state: not ready until
// SetServing is called.
func NewHealth() *Health { return &Health{state: "starting"} }

// AddCheck registers a readiness check. /readyz answers 200 only when the
// process is serving and every check returns nil. fn is called on every
// /readyz request, concurrently with other checks and with itself, under
// a context bounded by [CheckTimeout]; it should be cheap (read a flag or
// an atomic the service keeps up to date), not do I/O of its own.
func (h *Health) AddCheck(name string, fn func(ctx context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, readinessCheck{name, fn})
}

// SetServing marks the process as serving (ready, subject to the checks).
func (h *Health) SetServing() { h.setState("") }

// SetDraining marks the process as shutting down: /readyz answers 503 from
// now on so load balancers and clients move away before the listener closes.
func (h *Health) SetDraining() { h.setState("shutting down") }

func (h *Health) setState(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = s
}

// Failing runs the checks and returns one "name: reason" line per failing
// check, sorted by name, plus the lifecycle state when the process is not
// serving. An empty result means ready.
func (h *Health) Failing(ctx context.Context) []string {
	h.mu.Lock()
	state := h.state
	checks := slices.Clone(h.checks)
	h.mu.Unlock()
	var out []string
	if state != "" {
		out = append(out, "process: "+state)
	}
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	results := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			done := make(chan error, 1)
			go func() { done <- c.fn(ctx) }()
			select {
			case err := <-done:
				results[i] = err
			case <-ctx.Done():
				results[i] = fmt.Errorf("no answer in %s", CheckTimeout)
			}
		})
	}
	wg.Wait()
	var failing []string
	for i, err := range results {
		if err != nil {
			failing = append(failing, checks[i].name+": "+oneLine(err.Error()))
		}
	}
	slices.Sort(failing)
	return append(out, failing...)
}

// AdminHandler returns the handler of the admin listener:
//
//	/healthz       200 "ok" while the process runs (liveness)
//	/readyz        200 "ok" when h reports ready, else 503 and one failing check per line
//	/metrics       metrics in the Prometheus exposition format (omitted when metrics is nil)
//	/debug/pprof/  the Go profiler
//
// The admin port is for operators and the cluster, not for clients: it
// exposes profiles and check messages. A service adds its own endpoints
// with [Process.HandleAdmin].
func AdminHandler(h *Health, metrics http.Handler) http.Handler {
	return adminMux(h, metrics)
}

// adminMux is AdminHandler as the mux, so that Process.HandleAdmin can add
// to it while it serves (http.ServeMux is safe for that).
func adminMux(h *Health, metrics http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		failing := h.Failing(r.Context())
		if len(failing) == 0 {
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready\n%s\n", strings.Join(failing, "\n"))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
