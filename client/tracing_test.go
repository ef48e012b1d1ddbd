package client

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceCrossesARecord: the producer writes its send span's context
// into the record's headers, and the consumer's process span continues
// that trace; the receive span links to it.
func TestTraceCrossesARecord(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	p := newProducer(t, fc, TracerProvider(tp))
	in := &Record{Topic: "t", Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "app", Value: []byte("1")}}}
	if err := p.ProduceSync(ctxT(t), in); err != nil {
		t.Fatal(err)
	}
	if len(in.Headers) != 1 {
		t.Errorf("the producer changed the application's record headers: %v", in.Headers)
	}

	c := newConsumer(t, fc, TracerProvider(tp))
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
	recs, err := c.Poll(ctxT(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("poll: %d records, %v", len(recs), err)
	}
	got := recs[0]
	if len(got.Headers) != 2 || got.Headers[0].Key != "app" || got.Headers[1].Key != "traceparent" {
		t.Fatalf("consumed headers %v, want app then traceparent", got.Headers)
	}
	_, span := c.StartProcessSpan(context.Background(), got)
	span.End()

	var send, receive, process sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "send t":
			send = s
		case "receive t":
			receive = s
		case "process t":
			process = s
		}
	}
	if send == nil || receive == nil || process == nil {
		t.Fatalf("spans %v; want send t, receive t and process t", names(rec.Ended()))
	}
	if send.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds: send %v, process %v", send.SpanKind(), process.SpanKind())
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Errorf("process span's parent %v, want the send span %v", process.Parent(), send.SpanContext())
	}
	if l := receive.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("receive span links %v, want the send span", l)
	}
	want := map[string]string{"messaging.destination.name": "t", "messaging.destination.partition.id": "0",
		"messaging.kafka.offset": "0", "messaging.operation.name": "send", "messaging.system": "strata"}
	for _, kv := range send.Attributes() {
		if w, ok := want[string(kv.Key)]; ok && kv.Value.Emit() != w {
			t.Errorf("send span %s=%s, want %s", kv.Key, kv.Value.Emit(), w)
		}
		delete(want, string(kv.Key))
	}
	if len(want) > 0 {
		t.Errorf("send span lacks %v", want)
	}
}

// TestProcessSpanUnderCallerLinksTheSend: with a span in the caller's
// context, the process span is its child and links to the send span.
func TestProcessSpanUnderCallerLinksTheSend(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := newTracing(&config{tracerProvider: tp})
	_, send := tp.Tracer("test").Start(context.Background(), "send")
	r := &Record{Topic: "t", Value: []byte("v")}
	tr.prop.Inject(trace.ContextWithSpan(context.Background(), send), headerCarrier{&r.Headers})

	ctx, caller := tp.Tracer("test").Start(context.Background(), "batch job")
	_, span := tr.startProcess(ctx, r)
	span.End()
	ro := span.(sdktrace.ReadOnlySpan)
	if ro.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("parent %v, want the caller's span", ro.Parent())
	}
	if l := ro.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("links %v, want the send span", l)
	}
}

// TestUntracedProducerAddsNoHeaders: with no tracer installed (the global
// no-op) records carry only the application's headers.
func TestUntracedProducerAddsNoHeaders(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc)
	if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
	recs, err := c.Poll(ctxT(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("poll: %d records, %v", len(recs), err)
	}
	if len(recs[0].Headers) != 0 {
		t.Errorf("headers %v, want none", recs[0].Headers)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// TestReproducedRecordCarriesOnlyTheNewContext: a record that already
// carries trace context (consumed, then produced again) leaves with the new
// send span's context only, and the application's record is unchanged.
func TestReproducedRecordCarriesOnlyTheNewContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := newTracing(&config{tracerProvider: tp})
	old := []Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Key: "tracestate", Value: []byte("old=1")}, {Key: "app", Value: []byte("x")}}
	pr := &promise{r: &Record{Topic: "t", Headers: old}}
	tr.traceRecord(context.Background(), pr)
	hs := tr.injectHeaders(pr)
	if len(hs) != 2 || hs[0].Key != "app" || hs[1].Key != "traceparent" ||
		!strings.Contains(string(hs[1].Value), pr.span.SpanContext().TraceID().String()) {
		t.Errorf("headers %q, want app and the new traceparent only", hs)
	}
	if len(pr.r.Headers) != 3 || string(pr.r.Headers[1].Value) != "old=1" {
		t.Errorf("the application's headers changed: %q", pr.r.Headers)
	}
}
