package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestTraceExporterFromEnv(t *testing.T) {
	tests := []struct {
		env      map[string]string
		exporter bool
		where    string
	}{
		{env: map[string]string{}, where: "OTEL_EXPORTER_OTLP_ENDPOINT unset"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, exporter: true, where: "otlp http/protobuf to http://127.0.0.1:4318"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, exporter: true, where: "otlp http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, where: "OTEL_TRACES_EXPORTER=none"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, where: "OTEL_SDK_DISABLED"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, exporter: true, where: "otlp grpc to http://x:4317"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, where: `"http/json" is not supported`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, where: `"zipkin" is not supported`},
	}
	for _, tt := range tests {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
			"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
			t.Setenv(k, tt.env[k])
		}
		exp, where, err := traceExporter(context.Background())
		if err != nil {
			t.Fatalf("%v: %v", tt.env, err)
		}
		if (exp != nil) != tt.exporter || !strings.Contains(where, tt.where) {
			t.Errorf("%v: exporter=%v where=%q; want exporter=%v where containing %q", tt.env, exp != nil, where, tt.exporter, tt.where)
		}
		if exp != nil {
			// Nothing was exported, so this does not touch the network.
			if err := exp.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}
}

func TestTelemetryServiceName(t *testing.T) {
	for envName, want := range map[string]string{"": "strata-test", "renamed": "renamed"} {
		t.Setenv("OTEL_SERVICE_NAME", envName)
		tel := newTestTelemetry(t)
		// The SDK's provider, which exports when an exporter is set (the
		// test has none, so tel.Tracer's spans record nothing).
		_, span := tel.tracerProvider.Tracer("test").Start(context.Background(), "op")
		span.End()
		got, _ := span.(sdktrace.ReadOnlySpan).Resource().Set().Value("service.name")
		if got.AsString() != want {
			t.Errorf("OTEL_SERVICE_NAME=%q: service.name %q, want %q", envName, got.AsString(), want)
		}
	}
}

func TestTelemetryShutdownTwice(t *testing.T) {
	tel := newTestTelemetry(t)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A metric keeps a series per partition well past the SDK's default limit
// of 2 000 series, which folded the rest into one overflow series and hid
// which partitions of a large node were under-replicated.
func TestTelemetryKeepsThousandsOfSeries(t *testing.T) {
	t.Setenv("OTEL_GO_X_CARDINALITY_LIMIT", "")
	tel := newTestTelemetry(t)
	const partitions = 2500
	g, err := tel.Meter("test").Int64Gauge("strata_test_partition_gauge")
	if err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		g.Record(context.Background(), int64(p), metric.WithAttributes(attribute.Int("partition", p)))
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if strings.Contains(body, "otel_metric_overflow") {
		t.Fatal("/metrics folded series into otel_metric_overflow")
	}
	if n := strings.Count(body, "strata_test_partition_gauge{"); n != partitions {
		t.Fatalf("/metrics holds %d series of the gauge, want %d", n, partitions)
	}
}
