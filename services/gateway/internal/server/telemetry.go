package server

import (
	"context"
	"net/http"
	"slices"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// w3c writes and reads W3C trace context, what the clients put in record
// headers (client/tracing.go).
var w3c = propagation.TraceContext{}

// jsonTraceHeaders returns the record headers that carry a ProduceJSON
// request's trace context: the context of the gateway's span for the
// request (a child of the caller's), when the caller sent a traceparent.
// A caller that does not trace adds nothing to its records.
func jsonTraceHeaders(ctx context.Context, h http.Header) []recordbatch.RecordHeader {
	if h.Get("traceparent") == "" || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	var out []recordbatch.RecordHeader
	for _, k := range w3c.Fields() {
		if v := carrier.Get(k); v != "" {
			out = append(out, recordbatch.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	return out
}

// withTraceHeaders adds the request's trace headers to a record's, unless
// the record carries a traceparent of its own.
func withTraceHeaders(hs, tc []recordbatch.RecordHeader) []recordbatch.RecordHeader {
	if len(tc) == 0 || slices.ContainsFunc(hs, func(h recordbatch.RecordHeader) bool { return h.Key == "traceparent" }) {
		return hs
	}
	return append(hs, tc...)
}
