package serve

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// clearOTLPEnv leaves the process with no trace exporter configured.
func clearOTLPEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
}

// TestUnexportedSpansCarryIDsButDoNotRecord: with no exporter a process's
// spans record nothing (nobody would read them), yet carry ids and the
// sampler's decision as the SDK's spans do: a root is sampled, a child
// keeps its parent's trace id under a new span id, a quiet procedure
// starts no sampled trace of its own but is sampled under a sampled
// parent, and a remote sampled parent stays sampled.
func TestUnexportedSpansCarryIDsButDoNotRecord(t *testing.T) {
	clearOTLPEnv(t)
	tel, err := NewTelemetry(context.Background(), TelemetryConfig{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	tr := tel.Tracer("test")

	ctx, root := tr.Start(context.Background(), "strata.storage.v1.StorageService/Produce", trace.WithSpanKind(trace.SpanKindServer))
	if root.IsRecording() {
		t.Error("a span of a process without an exporter records")
	}
	rsc := root.SpanContext()
	if !rsc.IsValid() || !rsc.IsSampled() {
		t.Errorf("root span context %v: want valid ids, sampled", rsc)
	}
	if got := trace.SpanContextFromContext(ctx); !got.Equal(rsc) {
		t.Errorf("the context carries %v, want the span's %v", got, rsc)
	}
	_, child := tr.Start(ctx, "strata.storage.append")
	csc := child.SpanContext()
	if csc.TraceID() != rsc.TraceID() || csc.SpanID() == rsc.SpanID() || !csc.SpanID().IsValid() || !csc.IsSampled() {
		t.Errorf("child %v of %v: want the same trace, a new span id, sampled", csc, rsc)
	}
	_, other := tr.Start(context.Background(), "strata.storage.v1.StorageService/Produce")
	if other.SpanContext().TraceID() == rsc.TraceID() {
		t.Error("two roots share a trace id")
	}
	_, newRoot := tr.Start(ctx, "detached", trace.WithNewRoot())
	if newRoot.SpanContext().TraceID() == rsc.TraceID() {
		t.Error("WithNewRoot kept the parent's trace")
	}

	const fetch = "strata.storage.v1.StorageService/Fetch"
	_, quiet := tr.Start(context.Background(), fetch)
	if qsc := quiet.SpanContext(); !qsc.IsValid() || qsc.IsSampled() {
		t.Errorf("a root %s: %v, want ids and not sampled", fetch, qsc)
	}
	_, quietChild := tr.Start(ctx, fetch)
	if !quietChild.SpanContext().IsSampled() {
		t.Errorf("a %s under a sampled parent was not sampled", fetch)
	}
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	_, served := tr.Start(remote, "strata.storage.v1.StorageService/Replicate")
	if ssc := served.SpanContext(); ssc.TraceID() != (trace.TraceID{1}) || !ssc.IsSampled() || ssc.IsRemote() {
		t.Errorf("served under a remote sampled parent: %v", ssc)
	}
	// The same provider is what the Connect interceptor and the globals use.
	if _, s := tel.TracerProvider().Tracer("x").Start(context.Background(), "y"); s.IsRecording() {
		t.Error("TracerProvider() records without an exporter")
	}
}

// TestExportedSpansRecord: with an exporter configured the SDK's provider
// is used and spans record.
func TestExportedSpansRecord(t *testing.T) {
	clearOTLPEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // never reached: nothing is flushed
	tel, err := NewTelemetry(context.Background(), TelemetryConfig{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tel.Tracer("test").Start(context.Background(), "strata.storage.v1.StorageService/Produce")
	if !s.IsRecording() {
		t.Error("a sampled span with an exporter does not record")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // drop the span rather than wait for the unreachable endpoint
	_ = tel.Shutdown(ctx)
}
