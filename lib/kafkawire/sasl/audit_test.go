package sasl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// stepFunc is an Exchange made of one function.
type stepFunc func(ctx context.Context, msg []byte) ([]byte, context.Context, error)

func (f stepFunc) Step(ctx context.Context, msg []byte) ([]byte, context.Context, error) {
	return f(ctx, msg)
}

// A failed SASL exchange, one message or several, writes one
// authentication failure naming the mechanism and the connection's
// address; a successful one writes nothing.
func TestAuditMechanisms(t *testing.T) {
	refused := errors.New("unauthenticated: unknown or revoked token")
	ok := func(ctx context.Context, _ []byte) (context.Context, error) { return ctx, nil }
	fail := func(context.Context, []byte) (context.Context, error) { return nil, refused }
	cases := []struct {
		name  string
		mech  kafkawire.Mechanism
		lines int
	}{
		{"one message, accepted", kafkawire.Mechanism{Name: "PLAIN", Authenticate: ok}, 0},
		{"one message, refused", kafkawire.Mechanism{Name: "PLAIN", Authenticate: fail}, 1},
		{"an exchange, refused at a step", kafkawire.Mechanism{Name: "SCRAM-SHA-256", Start: func(context.Context) kafkawire.Exchange {
			return stepFunc(func(context.Context, []byte) ([]byte, context.Context, error) { return nil, nil, refused })
		}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := audit.New(slog.NewJSONHandler(&buf, nil), audit.SamplerConfig{})
			m := auditMechanisms(l, []kafkawire.Mechanism{tc.mech})[0]
			ctx := audit.WithSource(context.Background(), "198.51.100.4:9000")
			if m.Authenticate != nil {
				_, _ = m.Authenticate(ctx, nil)
			} else {
				_, _, _ = m.Start(ctx).Step(ctx, nil)
			}
			raw := strings.TrimSpace(buf.String())
			if tc.lines == 0 {
				if raw != "" {
					t.Fatalf("lines %s, want none", raw)
				}
				return
			}
			if strings.Count(raw, "\n")+1 != tc.lines {
				t.Fatalf("lines %s, want %d", raw, tc.lines)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(raw), &line); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"event": "authentication_failure", "operation": "SASL " + tc.mech.Name, "source": "198.51.100.4:9000",
				"outcome": "failure", "reason": "unknown or revoked token", "principal": ""}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("%s = %#v, want %#v", k, line[k], v)
				}
			}
		})
	}
}
