package client

import (
	"context"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/apierr"
)

// Tracing follows the OpenTelemetry messaging semantic conventions:
//
//   - Produce starts a "send TOPIC" span (kind producer) per record, ended
//     when the record is acknowledged or fails, and writes its context into
//     the record's headers (W3C traceparent and tracestate, through the
//     propagator). The batch's Produce RPC runs under the span of the
//     batch's first record, so the leader's append and replication wait
//     join that record's trace.
//   - Poll starts a "receive" span (kind consumer) for the records it
//     returns, linked to each record's send span.
//   - StartProcessSpan starts a "process TOPIC" span (kind consumer) for one
//     record: a child of the record's send span when the caller's context
//     holds no span, else a child of the caller's span linked to the send
//     span.
//
// With the default global tracer provider (a no-op until the application
// installs an SDK) a span costs an allocation or two and nothing is
// written into records: a header is added only for a valid span context.

// Attribute keys from the OpenTelemetry messaging semantic conventions.
// Strata keeps Kafka's model (partitions, offsets, groups), so the
// messaging.kafka.* keys apply as they are.
const (
	attrSystem         = attribute.Key("messaging.system")
	attrOperationName  = attribute.Key("messaging.operation.name")
	attrOperationType  = attribute.Key("messaging.operation.type")
	attrDestination    = attribute.Key("messaging.destination.name")
	attrPartitionID    = attribute.Key("messaging.destination.partition.id")
	attrOffset         = attribute.Key("messaging.kafka.offset")
	attrMessageKey     = attribute.Key("messaging.kafka.message.key")
	attrConsumerGroup  = attribute.Key("messaging.consumer.group.name")
	attrBatchCount     = attribute.Key("messaging.batch.message_count")
	attrBodySize       = attribute.Key("messaging.message.body.size")
	messagingSystem    = "strata"
	instrumentationPkg = "github.com/strata-mq/strata/client"
)

// maxReceiveLinks caps the links of one receive span; the SDK keeps 128
// by default.
const maxReceiveLinks = 128

// TracerProvider sets where the producer's and consumer's spans go.
// Default: the global provider (otel.GetTracerProvider()), which records
// nothing until the application installs an SDK; nil keeps the default.
func TracerProvider(tp trace.TracerProvider) Opt {
	return commonOpt(func(c *config) { c.tracerProvider = tp })
}

// Propagator sets how trace context is written to and read from record
// headers. Default: W3C trace context (traceparent and tracestate
// headers), whatever the global propagator is, so records carry context
// between any two W3C-speaking clients; nil keeps the default.
func Propagator(p propagation.TextMapPropagator) Opt {
	return commonOpt(func(c *config) { c.propagator = p })
}

// tracing is the tracer and propagator of one producer or consumer.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	group  string // consumer group name, for a GroupConsumer's spans
}

func newTracing(cfg *config) *tracing {
	tp := cfg.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &tracing{tracer: tp.Tracer(instrumentationPkg), prop: prop}
}

// headerCarrier adapts record headers to the propagator. Set replaces a
// header of the same key, so producing a consumed record again carries
// the new context, not the old one.
type headerCarrier struct{ h *[]Header }

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.h {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.h {
		if h.Key == key {
			(*c.h)[i].Value = []byte(value)
			return
		}
	}
	*c.h = append(*c.h, Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(*c.h))
	for i, h := range *c.h {
		keys[i] = h.Key
	}
	return keys
}

// startSend starts a record's send span under ctx.
func (t *tracing) startSend(ctx context.Context, r *Record) trace.Span {
	_, span := t.tracer.Start(ctx, "send "+r.Topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attrSystem.String(messagingSystem),
			attrOperationName.String("send"),
			attrOperationType.String("send"),
			attrDestination.String(r.Topic),
			attrBodySize.Int(len(r.Value)),
		))
	return span
}

// injectHeaders returns the record's headers with its send span's context
// in place of any trace context they carried (a consumed record produced
// again carries the new send span's, not a mix of two traces), or the
// headers as they are when the span has no valid context. The record
// itself is not changed.
func (t *tracing) injectHeaders(pr *promise) []Header {
	if pr.span == nil || !pr.span.SpanContext().IsValid() {
		return pr.r.Headers
	}
	fields := t.prop.Fields()
	hs := make([]Header, 0, len(pr.r.Headers)+len(fields))
	for _, h := range pr.r.Headers {
		if !slices.Contains(fields, h.Key) {
			hs = append(hs, h)
		}
	}
	t.prop.Inject(trace.ContextWithSpan(context.Background(), pr.span), headerCarrier{&hs})
	return hs
}

// endSend ends a record's send span with its outcome.
func endSend(pr *promise, err error) {
	span := pr.span
	if span == nil || !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrPartitionID.String(strconv.Itoa(int(pr.r.Partition))), attrOffset.Int64(pr.r.Offset))
	}
	span.End()
}

// withBatchTrace returns ctx carrying the send span of the batch's first
// record that has one, so the Produce RPC (and what the leader does for
// it) joins that record's trace.
func withBatchTrace(ctx context.Context, batch []*promise) context.Context {
	for _, pr := range batch {
		if pr.span != nil && pr.span.SpanContext().IsValid() {
			return trace.ContextWithSpan(ctx, pr.span)
		}
	}
	return ctx
}

// received records a receive span for the records one Poll returns,
// started when the Poll did and linked to each record's send span (links
// are read from headers only when the span records).
func (t *tracing) received(ctx context.Context, start time.Time, recs []*Record) {
	if len(recs) == 0 {
		return
	}
	topic := recs[0].Topic
	for _, r := range recs {
		if r.Topic != topic {
			topic = ""
			break
		}
	}
	name := "receive"
	attrs := []attribute.KeyValue{
		attrSystem.String(messagingSystem),
		attrOperationName.String("receive"),
		attrOperationType.String("receive"),
		attrBatchCount.Int(len(recs)),
	}
	if topic != "" {
		name += " " + topic
		attrs = append(attrs, attrDestination.String(topic))
	}
	if t.group != "" {
		attrs = append(attrs, attrConsumerGroup.String(t.group))
	}
	_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if span.IsRecording() {
		for _, r := range recs[:min(len(recs), maxReceiveLinks)] {
			if sc := t.extract(r); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	span.End()
}

// extract reads the trace context a producer wrote into the record.
func (t *tracing) extract(r *Record) trace.SpanContext {
	if len(r.Headers) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), headerCarrier{&r.Headers}))
}

// startProcess starts the process span for one consumed record.
func (t *tracing) startProcess(ctx context.Context, r *Record) (context.Context, trace.Span) {
	sc := t.extract(r)
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrSystem.String(messagingSystem),
			attrOperationName.String("process"),
			attrOperationType.String("process"),
			attrDestination.String(r.Topic),
			attrPartitionID.String(strconv.Itoa(int(r.Partition))),
			attrOffset.Int64(r.Offset),
			attrBodySize.Int(len(r.Value)),
		),
	}
	if r.Key != nil {
		opts = append(opts, trace.WithAttributes(attrMessageKey.String(string(r.Key))))
	}
	if t.group != "" {
		opts = append(opts, trace.WithAttributes(attrConsumerGroup.String(t.group)))
	}
	if sc.IsValid() {
		if trace.SpanContextFromContext(ctx).IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return t.tracer.Start(ctx, "process "+r.Topic, opts...)
}

// StartProcessSpan starts the span of the application's processing of one
// record this consumer returned; end it when processing is done. The span
// is a child of the record's send span when ctx holds no span (so one
// trace runs from producer to consumer), and otherwise a child of ctx's
// span with a link to the send span. The returned context carries the new
// span, for the work the processing does.
func (c *Consumer) StartProcessSpan(ctx context.Context, r *Record) (context.Context, trace.Span) {
	return c.tracing.startProcess(ctx, r)
}

// StartProcessSpan is Consumer.StartProcessSpan with the group's name on
// the span (messaging.consumer.group.name).
func (g *GroupConsumer) StartProcessSpan(ctx context.Context, r *Record) (context.Context, trace.Span) {
	return g.inner.tracing.startProcess(ctx, r)
}

// traceRecord starts the record's send span and counts the trace headers
// it will carry in the record's size, so batches stay within
// MaxBatchBytes.
func (t *tracing) traceRecord(ctx context.Context, pr *promise) {
	pr.span = t.startSend(ctx, pr.r)
	if pr.span.SpanContext().IsValid() {
		pr.size += traceHeadersSize
	}
}

// traceHeadersSize is what a traceparent header adds to a record (key,
// 55-byte value, lengths), with room for a short tracestate.
const traceHeadersSize = 10 + len("traceparent") + 55 + 64

// connectOptions are the Connect options of every client: the
// application's (ConnectOptions), inside an interceptor that makes a call
// whose connection broke UNAVAILABLE rather than CANCELED (connect-go
// takes a reset for the caller leaving; apierr.BrokenConnection), one
// that writes the caller's trace context into the request headers and,
// with Token, one that adds the bearer token. So a Produce RPC carries
// its record's send span to the leader even when the application adds no
// otelconnect interceptor; one that it adds runs inside and writes its
// own client span's context over it.
func (c *config) connectOptions() []connect.ClientOption {
	prop := c.propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	ics := []connect.Interceptor{apierr.BrokenConnectionInterceptor{}, propagateInterceptor{prop}}
	if c.token.set() {
		ics = append(ics, newBearerInterceptor(c.token))
	}
	return append([]connect.ClientOption{connect.WithInterceptors(ics...)}, c.connectOpts...)
}

// propagateInterceptor writes the trace context of a call's context into
// its request headers; calls without a valid span context are untouched.
type propagateInterceptor struct{ prop propagation.TextMapPropagator }

func (i propagateInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient && trace.SpanContextFromContext(ctx).IsValid() {
			i.prop.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		}
		return next(ctx, req)
	}
}

func (i propagateInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if trace.SpanContextFromContext(ctx).IsValid() {
			i.prop.Inject(ctx, propagation.HeaderCarrier(conn.RequestHeader()))
		}
		return conn
	}
}

func (i propagateInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
