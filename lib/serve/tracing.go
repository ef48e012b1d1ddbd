package serve

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// QuietProcedures are the RPCs that a healthy, idle cluster calls all the
// time: long polls (a follower's Replicate, a consumer's Fetch or
// FetchJSON with a max wait, the metadata stream) and heartbeats (a storage
// node's to the controller, a group member's to the coordinator). A span of
// one of them is recorded only when the caller's context is sampled, so a
// traced request that reaches one still shows it, while the polls of an
// idle cluster start no traces of their own (each would be a root span a
// few times a second per node or member, and would bury the traces that
// matter in a trace backend). Their rpc.* metrics are recorded as usual:
// the sampler decides spans only.
//
// Names are span names as otelconnect writes them: the procedure without
// its leading slash.
var QuietProcedures = []string{
	"strata.storage.v1.StorageService/Replicate",
	"strata.storage.v1.StorageService/Fetch",
	"strata.gateway.v1.GatewayService/FetchJSON",
	"strata.controller.v1.ControllerService/Heartbeat",
	"strata.controller.v1.ControllerService/WatchMetadata",
	"strata.coordinator.v1.CoordinatorService/ConsumerGroupHeartbeat",
}

// untracedKey marks a context of background work (see Untraced).
type untracedKey struct{}

// Untraced returns ctx marked as the context of a service's own background
// work on a timer (refreshing metadata, consumer-group lag, tier state):
// spans started under it are recorded only under a sampled parent, so
// the loop starts no traces of its own, and the services it calls see an
// unsampled caller and record nothing either. Spans of real events that
// the loop causes can still start traces from a context without the mark.
func Untraced(ctx context.Context) context.Context {
	return context.WithValue(ctx, untracedKey{}, true)
}

// quietSampler samples a span of a quiet procedure, or one started under
// an Untraced context, only under a sampled parent, and asks the base
// sampler about every other span.
type quietSampler struct {
	base  sdktrace.Sampler
	quiet map[string]bool
}

// NewQuietSampler returns a sampler that drops spans named in quiet unless
// their parent is sampled, and leaves every other decision to base.
func NewQuietSampler(base sdktrace.Sampler, quiet ...string) sdktrace.Sampler {
	s := &quietSampler{base: base, quiet: make(map[string]bool, len(quiet))}
	for _, q := range quiet {
		s.quiet[q] = true
	}
	return s
}

func (s *quietSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if s.quiet[p.Name] || p.ParentContext.Value(untracedKey{}) != nil {
		psc := trace.SpanContextFromContext(p.ParentContext)
		if !psc.IsSampled() {
			return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: psc.TraceState()}
		}
	}
	return s.base.ShouldSample(p)
}

func (s *quietSampler) Description() string {
	return "QuietProcedures{" + s.base.Description() + "}"
}

// samplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as
// the specification defines them; the default is parentbased_always_on.
// The SDK reads them itself only when no sampler is passed, and Strata
// passes one (the quiet sampler wraps this one).
func samplerFromEnv() (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("serve: OTEL_TRACES_SAMPLER_ARG=%q is not a ratio between 0 and 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.TraceIDRatioBased(r), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("serve: OTEL_TRACES_SAMPLER=%q is not supported (use always_on, always_off, traceidratio or their parentbased_ forms)", name)
}

// NewTracerProvider builds the tracer provider every Strata process uses:
// the span exporter chosen by the standard OTEL_* variables (OTLP over
// HTTP or gRPC, or none), the sampler from OTEL_TRACES_SAMPLER wrapped so
// [QuietProcedures] start no traces of their own, and the batch span
// processor (which reads OTEL_BSP_*). It also returns a few words saying
// where traces go. It does not touch the network: the exporter connects
// on its first export. res may be nil.
//
// The CLI uses it directly; services get it through [NewTelemetry].
func NewTracerProvider(ctx context.Context, res *resource.Resource) (*sdktrace.TracerProvider, string, error) {
	tp, _, where, err := newTracerProvider(ctx, res)
	return tp, where, err
}

// newTracerProvider is NewTracerProvider that also returns the provider
// to trace with: the SDK's when spans are exported, else one whose spans
// carry ids and sampling decisions but record nothing (tracing_ids.go).
func newTracerProvider(ctx context.Context, res *resource.Resource) (*sdktrace.TracerProvider, trace.TracerProvider, string, error) {
	base, err := samplerFromEnv()
	if err != nil {
		return nil, nil, "", err
	}
	sampler := NewQuietSampler(base, QuietProcedures...)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler)}
	if res != nil {
		opts = append(opts, sdktrace.WithResource(res))
	}
	exp, where, err := traceExporter(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	if exp == nil {
		return sdktrace.NewTracerProvider(opts...), newIDsOnlyProvider(sampler), where, nil
	}
	opts = append(opts, sdktrace.WithBatcher(exp))
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp, where, nil
}

// traceExporter picks the span exporter from the standard variables and
// says in a few words where traces go.
//
// Both OTLP transports are linked in. http/protobuf is the default (and
// what the specification recommends); grpc is there because it is what
// most collectors and agents listen on first (port 4317), and the
// exporter is the OpenTelemetry project's own, kept in step with the SDK.
// It costs the binaries the grpc-go stack, which is idle unless chosen.
func traceExporter(ctx context.Context) (sdktrace.SpanExporter, string, error) {
	if b, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); b {
		return nil, "not exported (OTEL_SDK_DISABLED=true)", nil
	}
	switch e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return nil, "not exported (OTEL_TRACES_EXPORTER=none)", nil
	default:
		return nil, fmt.Sprintf("not exported (OTEL_TRACES_EXPORTER=%q is not supported; use otlp or none)", e), nil
	}
	endpoint := firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if endpoint == "" {
		return nil, "not exported (OTEL_EXPORTER_OTLP_ENDPOINT unset)", nil
	}
	switch p := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p {
	case "", "http/protobuf":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("serve: otlp trace exporter: %w", err)
		}
		return exp, "otlp http/protobuf to " + Redact(endpoint), nil
	case "grpc":
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("serve: otlp grpc trace exporter: %w", err)
		}
		return exp, "otlp grpc to " + Redact(endpoint), nil
	default:
		return nil, fmt.Sprintf("not exported (OTEL_EXPORTER_OTLP_PROTOCOL=%q is not supported; use http/protobuf or grpc)", p), nil
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}
