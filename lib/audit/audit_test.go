package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// lines decodes the JSON lines in buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggerLine(t *testing.T) {
	cases := []struct {
		name string
		ctx  context.Context
		ev   Event
		want map[string]any
	}{
		{"denied request", WithSource(context.Background(), "10.0.0.7:5123"),
			Event{Kind: Denied, Principal: "User:bob", Operation: "write", Resource: "topic secret", Outcome: OutcomeDenied, Reason: "no ACL allows it"},
			map[string]any{"event": "denied", "principal": "User:bob", "source": "10.0.0.7:5123", "operation": "write",
				"resource": "topic secret", "outcome": "denied", "reason": "no ACL allows it"}},
		{"an event's own source wins over the context's", WithSource(context.Background(), "10.0.0.7:5123"),
			Event{Kind: AuthFailure, Source: "10.0.0.8:1", Operation: "authenticate", Outcome: OutcomeFailure, Reason: "unknown or revoked token"},
			map[string]any{"event": "authentication_failure", "principal": "", "source": "10.0.0.8:1", "operation": "authenticate",
				"resource": "", "outcome": "failure", "reason": "unknown or revoked token"}},
		{"a request a door forwarded", WithSource(context.Background(), "10.0.0.9:443"),
			Event{Kind: Denied, Principal: "User:bob", Via: "Service:gateway", Operation: "write", Resource: "topic secret", Outcome: OutcomeDenied, Reason: "no ACL allows it"},
			map[string]any{"event": "denied", "principal": "User:bob", "via": "Service:gateway", "source": "10.0.0.9:443", "operation": "write",
				"resource": "topic secret", "outcome": "denied", "reason": "no ACL allows it"}},
		{"no source known", context.Background(),
			Event{Kind: ACLChange, Principal: "User:admin", Operation: "create", Resource: "acl User:bob allow write topic orders", Outcome: OutcomeSuccess},
			map[string]any{"event": "acl_change", "principal": "User:admin", "source": "", "operation": "create",
				"resource": "acl User:bob allow write topic orders", "outcome": "success", "reason": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := New(slog.NewJSONHandler(&buf, nil), SamplerConfig{})
			l.Record(tc.ctx, tc.ev)
			got := lines(t, &buf)
			if len(got) != 1 {
				t.Fatalf("%d lines, want 1: %s", len(got), buf.String())
			}
			line := got[0]
			if line["logger"] != "audit" || line["msg"] != "audit" || line["time"] == nil {
				t.Errorf("line %v: want logger=audit, msg=audit and a time", line)
			}
			for k, v := range tc.want {
				if line[k] != v {
					t.Errorf("%s = %#v, want %#v", k, line[k], v)
				}
			}
		})
	}
}

// A flood writes its burst, then, once a token is back, one "suppressed"
// line counting what was left out before the next event's line.
func TestLoggerFlood(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var buf bytes.Buffer
	l := New(slog.NewJSONHandler(&buf, nil), SamplerConfig{Burst: 5, Every: time.Second, Now: clk.now})
	ctx := context.Background()
	ev := Event{Kind: Denied, Principal: "User:bob", Operation: "write", Resource: "topic secret", Outcome: OutcomeDenied}
	for range 10000 {
		l.Record(ctx, ev)
	}
	if n := len(lines(t, &buf)); n != 5 {
		t.Fatalf("%d lines after a flood of 10000, want the burst of 5", n)
	}
	clk.advance(time.Second)
	l.Record(ctx, ev)
	got := lines(t, &buf)
	if len(got) != 7 {
		t.Fatalf("%d lines, want 5 + a summary + the next event", len(got))
	}
	sum := got[5]
	if sum["event"] != "suppressed" || sum["suppressed_event"] != "denied" || sum["suppressed"] != float64(9995) || sum["principal"] != "User:bob" {
		t.Fatalf("summary line %v: want 9995 denied events of User:bob suppressed", sum)
	}
	if got[6]["event"] != "denied" {
		t.Fatalf("line after the summary %v, want the denied event", got[6])
	}
}

// Flush reports what was left out even when no later event comes, and a
// flood of bad credentials without a principal is keyed, and reported,
// by its source host.
func TestLoggerFlushBySource(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var buf bytes.Buffer
	l := New(slog.NewJSONHandler(&buf, nil), SamplerConfig{Burst: 1, Every: time.Hour, Now: clk.now})
	for port := range 3 {
		l.Record(context.Background(), Event{Kind: AuthFailure, Source: "192.0.2.1:" + string(rune('1'+port)), Outcome: OutcomeFailure})
	}
	// Another host has its own bucket.
	l.Record(context.Background(), Event{Kind: AuthFailure, Source: "192.0.2.2:1", Outcome: OutcomeFailure})
	l.Flush(context.Background())
	got := lines(t, &buf)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 2 events and 1 summary: %s", len(got), buf.String())
	}
	sum := got[2]
	if sum["event"] != "suppressed" || sum["source"] != "192.0.2.1" || sum["suppressed"] != float64(2) || sum["principal"] != "" {
		t.Fatalf("summary %v: want 2 authentication failures from 192.0.2.1", sum)
	}
}

func TestNilLogger(t *testing.T) {
	var l *Logger
	l.Record(context.Background(), Event{Kind: Denied})
	l.Flush(context.Background())
}
