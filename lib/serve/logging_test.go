package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestTraceHandlerAddsIDs(t *testing.T) {
	var b bytes.Buffer
	logger, err := NewLogger(&b, "json", slog.LevelInfo, "strata-test")
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))

	logger.InfoContext(ctx, "in span", "k", "v")
	logger.Info("no context")
	logger.InfoContext(context.Background(), "no span")
	logger.With("a", 1).InfoContext(ctx, "with attrs")

	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines:\n%s", len(lines), b.String())
	}
	var recs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		recs = append(recs, m)
	}
	for _, i := range []int{0, 3} {
		if recs[i]["trace_id"] != tid.String() || recs[i]["span_id"] != sid.String() {
			t.Errorf("line %d lacks trace ids: %s", i, lines[i])
		}
		if recs[i]["service"] != "strata-test" {
			t.Errorf("line %d lacks service: %s", i, lines[i])
		}
	}
	for _, i := range []int{1, 2} {
		if _, ok := recs[i]["trace_id"]; ok {
			t.Errorf("line %d has a trace id: %s", i, lines[i])
		}
	}
}

func TestTraceHandlerWithRealSpan(t *testing.T) {
	tel := newTestTelemetry(t)
	var b bytes.Buffer
	logger, _ := NewLogger(&b, "text", slog.LevelInfo, "")
	ctx, span := tel.Tracer("test").Start(context.Background(), "op")
	logger.InfoContext(ctx, "hello")
	span.End()
	want := "trace_id=" + span.SpanContext().TraceID().String()
	if !strings.Contains(b.String(), want) {
		t.Errorf("%q lacks %q", b.String(), want)
	}
}

func TestNewLoggerRejectsUnknownFormat(t *testing.T) {
	if _, err := NewLogger(io.Discard, "xml", slog.LevelInfo, ""); err == nil {
		t.Error("format xml accepted")
	}
}
