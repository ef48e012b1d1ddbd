package serve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

func newTestTelemetry(t *testing.T) *Telemetry {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tel, err := NewTelemetry(context.Background(), TelemetryConfig{ServiceName: "strata-test", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	return tel
}

func admin(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthz(t *testing.T) {
	h := AdminHandler(NewHealth(), nil)
	if code, body := admin(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := admin(t, h, "/metrics"); code != 404 {
		t.Errorf("/metrics without a metrics handler = %d", code)
	}
}

func TestReadyzFlips(t *testing.T) {
	health := NewHealth()
	h := AdminHandler(health, nil)
	var logOpen atomic.Bool
	health.AddCheck("log", func(context.Context) error {
		if !logOpen.Load() {
			return errors.New("recovering segments")
		}
		return nil
	})
	health.AddCheck("controller", func(context.Context) error { return nil })

	code, body := admin(t, h, "/readyz")
	if code != 503 || !strings.Contains(body, "process: starting") || !strings.Contains(body, "log: recovering segments") {
		t.Errorf("starting: %d %q", code, body)
	}
	health.SetServing()
	code, body = admin(t, h, "/readyz")
	if code != 503 || strings.Contains(body, "process") || !strings.Contains(body, "log: recovering segments") || strings.Contains(body, "controller") {
		t.Errorf("serving, log not open: %d %q", code, body)
	}
	logOpen.Store(true)
	if code, body = admin(t, h, "/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("all checks pass: %d %q", code, body)
	}
	health.SetDraining()
	if code, body = admin(t, h, "/readyz"); code != 503 || !strings.Contains(body, "process: shutting down") {
		t.Errorf("draining: %d %q", code, body)
	}
}

func TestReadyzCheckThatHangs(t *testing.T) {
	health := NewHealth()
	health.SetServing()
	health.AddCheck("stuck", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	failing := health.Failing(ctx)
	if len(failing) != 1 || !strings.HasPrefix(failing[0], "stuck: ") {
		t.Errorf("Failing = %q", failing)
	}
}

func TestMetricsFromOTelAPI(t *testing.T) {
	tel := newTestTelemetry(t)
	counter, err := tel.Meter("github.com/strata-mq/strata/lib/serve/test").Int64Counter(
		"strata.test.appends", metric.WithDescription("records appended"), metric.WithUnit("{record}"))
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(context.Background(), 3, metric.WithAttributes(attribute.String("topic", "orders")))

	h := AdminHandler(NewHealth(), tel.MetricsHandler())
	code, body := admin(t, h, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`strata_test_appends_total{`,
		`topic="orders"`,
		"go_goroutines ",
		"process_start_time_seconds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var line string
	for l := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(l, "strata_test_appends_total{") {
			line = l
		}
	}
	if !strings.HasSuffix(line, " 3") {
		t.Errorf("counter line %q, want value 3", line)
	}
}

func TestPprof(t *testing.T) {
	if code, _ := admin(t, AdminHandler(NewHealth(), nil), "/debug/pprof/"); code != 200 {
		t.Errorf("/debug/pprof/ = %d", code)
	}
}
