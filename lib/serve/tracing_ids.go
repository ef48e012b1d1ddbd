package serve

import (
	"context"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// idsOnlyProvider is the tracer provider of a process that exports no
// spans. Its spans carry ids and the sampler's decision, exactly as the
// SDK's would (logs get trace ids, and the W3C context a process passes on
// says "sampled" where the SDK's would, so a downstream process that does
// export records its part of the trace), but record nothing: the SDK
// records every sampled span, attributes, events and timestamps, whether
// or not a processor reads them, and with no exporter none does. On the
// data path that was the larger part of the cost of tracing (three spans
// per Produce).
type idsOnlyProvider struct {
	embedded.TracerProvider
	tracer idsOnlyTracer
}

func newIDsOnlyProvider(sampler sdktrace.Sampler) *idsOnlyProvider {
	return &idsOnlyProvider{tracer: idsOnlyTracer{sampler: sampler}}
}

func (p *idsOnlyProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.tracer }

type idsOnlyTracer struct {
	embedded.Tracer
	sampler sdktrace.Sampler
}

// Start returns ctx with a non-recording span: a new span id under the
// parent's trace id (a new trace id for a root), sampled as the sampler
// decides, as the SDK's tracer does.
func (t idsOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var psc trace.SpanContext
	if cfg.NewRoot() {
		ctx = trace.ContextWithSpanContext(ctx, psc)
	} else {
		psc = trace.SpanContextFromContext(ctx)
	}
	tid := psc.TraceID()
	for !tid.IsValid() {
		putUint64(tid[:8], rand.Uint64())
		putUint64(tid[8:], rand.Uint64())
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		putUint64(sid[:], rand.Uint64())
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: ctx, TraceID: tid, Name: name, Kind: cfg.SpanKind(),
		Attributes: cfg.Attributes(), Links: cfg.Links(),
	})
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: res.Tracestate})
	ctx = trace.ContextWithSpanContext(ctx, sc)
	return ctx, trace.SpanFromContext(ctx)
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}
