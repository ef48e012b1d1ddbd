package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger returns the process logger: format "json" (the default for
// services: one JSON object per line, which log pipelines parse without
// configuration) or "text" (key=value, easier on a terminal), writing to w
// at level and above, with trace ids added by [TraceHandler]. Every line
// carries service=name when name is not empty.
func NewLogger(w io.Writer, format string, level slog.Leveler, name string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "", "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("serve: unknown log format %q (want json or text)", format)
	}
	l := slog.New(TraceHandler(h))
	if name != "" {
		l = l.With(slog.String("service", name))
	}
	return l, nil
}

// TraceHandler wraps h so that a record logged with a context holding a
// valid OpenTelemetry span context (logger.InfoContext(ctx, ...)) gets
// trace_id and span_id attributes, which join log lines to traces.
// Records logged without a context, or outside a span, are unchanged.
// Inside a WithGroup the ids land in that group, as any record attribute
// does. The result is as safe for concurrent use as h.
func TraceHandler(h slog.Handler) slog.Handler {
	if th, ok := h.(traceHandler); ok {
		return th
	}
	return traceHandler{h}
}

type traceHandler struct{ next slog.Handler }

func (t traceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.next.Enabled(ctx, l)
}

func (t traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(
				slog.String("trace_id", sc.TraceID().String()),
				slog.String("span_id", sc.SpanID().String()),
			)
		}
	}
	return t.next.Handle(ctx, r)
}

func (t traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{t.next.WithAttrs(attrs)}
}

func (t traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{t.next.WithGroup(name)}
}
