package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// MaxSeriesPerMetric is how many series (attribute sets) one metric may
// hold before the SDK folds the rest into one otel_metric_overflow="true"
// series. The SDK's default of 2 000 hid the per-partition gauges of every
// replica past the 2 000th on a node, so a dashboard could not tell which
// partitions were under-replicated; a node holds at most about 20 000
// replicas (one open file each). OTEL_GO_X_CARDINALITY_LIMIT, when set,
// wins.
const MaxSeriesPerMetric = 100_000

// TelemetryConfig names the process to OpenTelemetry.
type TelemetryConfig struct {
	// ServiceName is the service.name resource attribute, for example
	// "strata-storage". OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override it, as the OpenTelemetry specification says they should.
	ServiceName string
	// ServiceVersion is the service.version attribute; empty omits it.
	ServiceVersion string
	// Logger receives the one line saying where traces go, and errors
	// reported by the OpenTelemetry SDK. Nil means slog.Default().
	Logger *slog.Logger
}

// Telemetry is the process's OpenTelemetry setup: a tracer provider, a
// meter provider read by a Prometheus registry, and the W3C trace-context
// propagator. Services record through the OTel API ([Telemetry.Meter],
// [Telemetry.Tracer], or the otel globals once [Telemetry.SetGlobal] ran).
//
// Traces are exported with OTLP (over HTTP, or gRPC when
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc) when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and not exported otherwise
// (spans still get ids, so logs carry trace ids and context still flows to
// other services). The exporter, sampler and batch processor read the rest
// of the standard OTEL_* variables themselves. OTEL_TRACES_EXPORTER=none
// and OTEL_SDK_DISABLED=true turn exporting off. Long polls and heartbeats
// ([QuietProcedures]) are traced only under a sampled caller.
//
// Metrics are pulled: the Prometheus registry behind [Telemetry.MetricsHandler]
// holds the OTel metrics plus the Go runtime and process collectors.
//
// Methods are safe for concurrent use; Shutdown may be called twice.
type Telemetry struct {
	tracerProvider *sdktrace.TracerProvider
	// tracing is what the process traces with: tracerProvider when spans
	// are exported, else a provider of non-recording spans with ids.
	tracing       trace.TracerProvider
	meterProvider *sdkmetric.MeterProvider
	propagator    propagation.TextMapPropagator
	registry      *prometheus.Registry
	connectOpt    connect.Option
	logger        *slog.Logger

	shutdownOnce sync.Once
	shutdownErr  error
}

// NewTelemetry builds the providers. It does not touch the network: the
// OTLP exporter connects on its first export. Call Shutdown to flush spans.
func NewTelemetry(ctx context.Context, cfg TelemetryConfig) (*Telemetry, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	// Later options win: the OTEL_* environment overrides our name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("serve: telemetry resource: %w", err)
	}

	t := &Telemetry{
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		registry:   prometheus.NewRegistry(),
		logger:     logger,
	}

	// Metrics: OTel instruments exported through a private Prometheus
	// registry (not the client_golang global one, so tests and embedded
	// processes do not collide), plus the Go runtime and process metrics,
	// which cost nothing until scraped.
	if err := t.registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("serve: go collector: %w", err)
	}
	if err := t.registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("serve: process collector: %w", err)
	}
	promExporter, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("serve: prometheus exporter: %w", err)
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithReader(promExporter), sdkmetric.WithResource(res)}
	if os.Getenv("OTEL_GO_X_CARDINALITY_LIMIT") == "" {
		mpOpts = append(mpOpts, sdkmetric.WithCardinalityLimit(MaxSeriesPerMetric))
	}
	t.meterProvider = sdkmetric.NewMeterProvider(mpOpts...)

	// Traces (tracing.go).
	tp, tracing, where, err := newTracerProvider(ctx, res)
	if err != nil {
		_ = t.meterProvider.Shutdown(ctx)
		return nil, err
	}
	t.tracerProvider, t.tracing = tp, tracing
	logger.Info("telemetry", slog.String("traces", where), slog.String("metrics", "prometheus on the admin listener at /metrics"))

	common := []otelconnect.Option{
		otelconnect.WithTracerProvider(t.tracing),
		otelconnect.WithMeterProvider(t.meterProvider),
		otelconnect.WithPropagator(t.propagator),
		// Strata's callers are its own services and clients, so an
		// incoming trace context continues the caller's trace instead of
		// starting a new one linked to it (otelconnect's default, meant
		// for servers facing the internet).
		otelconnect.WithTrustRemote(),
	}
	// Streams: otelconnect's spans and metrics. Unary calls (the data
	// path): otelconnect's spans, and the duration metrics from
	// rpcmetrics.go, which builds each attribute set once instead of per
	// call.
	streams, err := otelconnect.NewInterceptor(append(common,
		otelconnect.WithFilter(func(_ context.Context, s connect.Spec) bool { return s.StreamType != connect.StreamTypeUnary }))...)
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("serve: otelconnect: %w", err)
	}
	unary, err := otelconnect.NewInterceptor(append(common, otelconnect.WithoutMetrics(),
		otelconnect.WithFilter(func(_ context.Context, s connect.Spec) bool { return s.StreamType == connect.StreamTypeUnary }))...)
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("serve: otelconnect: %w", err)
	}
	rm, err := newRPCMetrics(t.meterProvider.Meter(rpcMetricsScope))
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("serve: rpc metrics: %w", err)
	}
	t.connectOpt = connect.WithInterceptors(streams, unary, rm)
	return t, nil
}

// SetGlobal installs the providers and propagator as the otel globals, so
// libraries that use otel.Tracer / otel.Meter report here, and routes SDK
// errors to the logger. A process calls it once; [Main] does.
func (t *Telemetry) SetGlobal() {
	otel.SetTracerProvider(t.tracing)
	otel.SetMeterProvider(t.meterProvider)
	otel.SetTextMapPropagator(t.propagator)
	logger := t.logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", slog.String("err", err.Error()))
	}))
}

// TracerProvider returns the tracer provider: the SDK's when spans are
// exported; otherwise one whose spans carry ids and sampling decisions
// (for logs and for the context passed on) but record nothing.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tracing }

// MeterProvider returns the SDK meter provider.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meterProvider }

// Propagator returns the W3C trace-context and baggage propagator, for
// carrying trace context where Connect headers do not reach (record headers).
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// Tracer returns a tracer named for the instrumenting package, such as
// "github.com/strata-mq/strata/services/storage/replica".
func (t *Telemetry) Tracer(name string) trace.Tracer { return t.tracing.Tracer(name) }

// Meter returns a meter named for the instrumenting package.
func (t *Telemetry) Meter(name string) metric.Meter { return t.meterProvider.Meter(name) }

// ConnectOption returns the option that instruments Connect handlers and
// clients with otelconnect: a span per RPC (continuing the caller's trace),
// the rpc.server / rpc.client duration metrics, and trace context on the
// wire. It is both a connect.HandlerOption and a connect.ClientOption; pass
// it to every generated New...Handler and New...Client.
func (t *Telemetry) ConnectOption() connect.Option { return t.connectOpt }

// MetricsHandler serves the Prometheus exposition of every metric.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes buffered spans and stops the providers. Later calls
// return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		t.shutdownErr = errors.Join(t.tracerProvider.Shutdown(ctx), t.meterProvider.Shutdown(ctx))
	})
	return t.shutdownErr
}
