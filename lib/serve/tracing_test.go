package serve

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestQuietProceduresNeedASampledParent: a long poll or heartbeat starts
// no trace of its own, but shows up inside a sampled trace; other RPCs
// are sampled as the base sampler says.
func TestQuietProceduresNeedASampledParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(NewQuietSampler(sdktrace.ParentBased(sdktrace.AlwaysSample()), QuietProcedures...)),
		sdktrace.WithSpanProcessor(rec))
	tr := tp.Tracer("test")
	const fetch = "strata.storage.v1.StorageService/Fetch"

	_, root := tr.Start(context.Background(), fetch)
	root.End()
	if root.SpanContext().IsSampled() {
		t.Errorf("a root %s span was sampled", fetch)
	}
	// The dropped span still carries ids, so its context flows on unsampled.
	if !root.SpanContext().IsValid() {
		t.Errorf("a dropped root span has no ids")
	}

	ctx, parent := tr.Start(context.Background(), "consume")
	_, child := tr.Start(ctx, fetch)
	child.End()
	parent.End()
	if !child.SpanContext().IsSampled() {
		t.Errorf("a %s span under a sampled parent was dropped", fetch)
	}

	_, produce := tr.Start(context.Background(), "strata.storage.v1.StorageService/Produce")
	produce.End()
	if !produce.SpanContext().IsSampled() {
		t.Error("a root Produce span was dropped")
	}

	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	_, served := tr.Start(remote, "strata.storage.v1.StorageService/Replicate")
	served.End()
	if !served.SpanContext().IsSampled() {
		t.Error("a Replicate span under a sampled remote parent was dropped")
	}

	if got := len(rec.Ended()); got != 4 {
		t.Errorf("recorded %d spans, want 4 (all but the root Fetch)", got)
	}
}

func TestSamplerFromEnv(t *testing.T) {
	tests := []struct {
		sampler, arg string
		want         string // Description prefix
		bad          bool
	}{
		{want: "ParentBased{root:AlwaysOnSampler"},
		{sampler: "always_off", want: "AlwaysOffSampler"},
		{sampler: "traceidratio", arg: "0.25", want: "TraceIDRatioBased{0.25}"},
		{sampler: "parentbased_traceidratio", arg: "0.5", want: "ParentBased{root:TraceIDRatioBased{0.5}"},
		{sampler: "traceidratio", arg: "2", bad: true},
		{sampler: "jaeger_remote", bad: true},
	}
	for _, tt := range tests {
		t.Setenv("OTEL_TRACES_SAMPLER", tt.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", tt.arg)
		s, err := samplerFromEnv()
		if tt.bad {
			if err == nil {
				t.Errorf("%s %s: no error", tt.sampler, tt.arg)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v", tt.sampler, tt.arg, err)
		}
		if d := s.Description(); len(d) < len(tt.want) || d[:len(tt.want)] != tt.want {
			t.Errorf("%s %s: sampler %q, want %q...", tt.sampler, tt.arg, d, tt.want)
		}
	}
}

// TestUntracedContextStartsNoTrace: background work under Untraced starts
// no trace, but a span under a sampled parent in such a context records.
func TestUntracedContextStartsNoTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(NewQuietSampler(sdktrace.ParentBased(sdktrace.AlwaysSample()), QuietProcedures...)))
	tr := tp.Tracer("test")
	bg := Untraced(context.Background())
	ctx, root := tr.Start(bg, "strata.storage.v1.StorageService/ListOffsets")
	_, child := tr.Start(ctx, "child")
	if root.SpanContext().IsSampled() || child.SpanContext().IsSampled() {
		t.Error("a span of untraced background work was sampled")
	}
	sampled, parent := tr.Start(context.Background(), "request")
	_, under := tr.Start(Untraced(sampled), "work")
	if !parent.SpanContext().IsSampled() || !under.SpanContext().IsSampled() {
		t.Error("a span under a sampled parent was dropped in an untraced context")
	}
}
