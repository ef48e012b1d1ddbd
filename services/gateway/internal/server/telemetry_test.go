package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// TestJSONRecordsCarryTheCallersTrace: a ProduceJSON caller that sends a
// traceparent gets the request's trace context into every record without
// one of its own; a caller that does not trace adds nothing.
func TestJSONRecordsCarryTheCallersTrace(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	traced := http.Header{"Traceparent": []string{"00-01020000000000000000000000000000-0900000000000000-01"}}

	if got := jsonTraceHeaders(ctx, http.Header{}); got != nil {
		t.Errorf("an untraced caller's records get %v", got)
	}
	hdrs := jsonTraceHeaders(ctx, traced)
	if len(hdrs) != 1 || hdrs[0].Key != "traceparent" || !strings.Contains(string(hdrs[0].Value), sc.TraceID().String()) {
		t.Fatalf("trace headers %v, want the request span's traceparent", hdrs)
	}
	plain := withTraceHeaders([]recordbatch.RecordHeader{{Key: "a", Value: []byte("1")}}, hdrs)
	if len(plain) != 2 || plain[1].Key != "traceparent" {
		t.Errorf("record headers %v, want a then traceparent", plain)
	}
	own := []recordbatch.RecordHeader{{Key: "traceparent", Value: []byte("mine")}}
	if got := withTraceHeaders(own, hdrs); len(got) != 1 || string(got[0].Value) != "mine" {
		t.Errorf("a record's own traceparent was replaced: %v", got)
	}
}
