package sasl

import (
	"context"
	"strings"

	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// The Kafka listener's authentication failures go to the audit log, as
// the Connect listener's do (the guard's middleware): a SASL exchange
// that failed, or a client certificate that names no valid principal.
// Its denied requests need nothing here: they are refused by the guard,
// which writes their lines. The connection's context carries the
// client's address (kafkawire), so each line has its source.

// auditMechanisms wraps each mechanism so that a failed exchange writes
// an audit line. With a nil logger the mechanisms are returned as they
// are.
func auditMechanisms(l *audit.Logger, ms []kafkawire.Mechanism) []kafkawire.Mechanism {
	if l == nil {
		return ms
	}
	for i := range ms {
		m := &ms[i]
		op := "SASL " + m.Name
		if auth := m.Authenticate; auth != nil {
			m.Authenticate = func(ctx context.Context, msg []byte) (context.Context, error) {
				out, err := auth(ctx, msg)
				if err != nil {
					auditAuthFailure(ctx, l, op, err)
				}
				return out, err
			}
		}
		if start := m.Start; start != nil {
			m.Start = func(ctx context.Context) kafkawire.Exchange {
				return auditedExchange{next: start(ctx), l: l, op: op}
			}
		}
	}
	return ms
}

// auditedExchange is a multi-message exchange (SCRAM) whose failing step
// writes an audit line.
type auditedExchange struct {
	next kafkawire.Exchange
	l    *audit.Logger
	op   string
}

func (e auditedExchange) Step(ctx context.Context, msg []byte) ([]byte, context.Context, error) {
	reply, done, err := e.next.Step(ctx, msg)
	if err != nil {
		auditAuthFailure(ctx, e.l, e.op, err)
	}
	return reply, done, err
}

// auditAuthFailure writes the line of a refused Kafka authentication.
// The principal is unknown: the credentials did not prove one.
func auditAuthFailure(ctx context.Context, l *audit.Logger, op string, err error) {
	l.Record(ctx, audit.Event{Kind: audit.AuthFailure, Operation: op, Resource: "kafka listener",
		Outcome: audit.OutcomeFailure, Reason: strings.TrimPrefix(err.Error(), "unauthenticated: ")})
}
