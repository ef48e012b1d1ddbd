package audit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Kind is an audit event's kind, the "event" attribute.
type Kind string

// The kinds of audit events.
const (
	// AuthFailure is a request or connection whose credentials were
	// refused (a bad token, an unknown SASL user, a bad certificate).
	AuthFailure Kind = "authentication_failure"
	// Denied is an authenticated request an ACL (or a service-only
	// rule) refused.
	Denied Kind = "denied"
	// ACLChange is ACLs created or deleted.
	ACLChange Kind = "acl_change"
	// UserChange is a user created or deleted.
	UserChange Kind = "user_change"
	// QuotaChange is a quota set.
	QuotaChange Kind = "quota_change"
	// Suppressed is the summary of events a flood's sampling left out.
	Suppressed Kind = "suppressed"
)

// Outcomes of an event, the "outcome" attribute.
const (
	OutcomeDenied  = "denied"
	OutcomeFailure = "failure"
	OutcomeSuccess = "success"
)

// Event is one audit line's content. Empty fields are written empty, so
// every line has the same keys.
type Event struct {
	Kind      Kind
	Principal string // "User:alice"; empty when unknown
	Via       string // the service that forwarded the request for Principal ("Service:gateway"); empty when none
	Source    string // client address; empty: taken from the context (WithSource)
	Operation string
	Resource  string
	Outcome   string
	Reason    string
}

// Logger writes audit events to a slog handler, sampled for floods. A nil
// *Logger writes nothing, so code may call it without checking. Safe for
// concurrent use.
type Logger struct {
	log     *slog.Logger
	sampler *Sampler
}

// Name is the value of every audit line's "logger" attribute.
const Name = "audit"

// New returns a Logger writing to h (at info level) and sampling with
// cfg. A nil h writes to slog.Default's handler.
func New(h slog.Handler, cfg SamplerConfig) *Logger {
	if h == nil {
		h = slog.Default().Handler()
	}
	return &Logger{log: slog.New(h).With(slog.String("logger", Name)), sampler: NewSampler(cfg)}
}

// Record writes e, unless its kind and principal are over their rate;
// then it is counted for a later "suppressed" line. ctx gives the source
// address when e has none (WithSource) and the trace ids, when the
// handler adds them.
func (l *Logger) Record(ctx context.Context, e Event) {
	if l == nil {
		return
	}
	if e.Source == "" {
		e.Source = SourceFrom(ctx)
	}
	key := sampleKey(e)
	admit, summaries := l.sampler.Admit(key)
	for _, s := range summaries {
		l.writeSummary(ctx, s)
	}
	if admit {
		l.write(ctx, e)
	}
}

// Flush writes a "suppressed" line for every kind and principal with
// events left out since its last line. Call it at shutdown; Record also
// writes them, as the flood goes on.
func (l *Logger) Flush(ctx context.Context) {
	if l == nil {
		return
	}
	for _, s := range l.sampler.Drain() {
		l.writeSummary(ctx, s)
	}
}

func (l *Logger) write(ctx context.Context, e Event, extra ...slog.Attr) {
	attrs := []slog.Attr{
		slog.String("event", string(e.Kind)),
		slog.String("principal", e.Principal),
		slog.String("source", e.Source),
		slog.String("operation", e.Operation),
		slog.String("resource", e.Resource),
		slog.String("outcome", e.Outcome),
		slog.String("reason", e.Reason),
	}
	if e.Via != "" {
		attrs = append(attrs, slog.String("via", e.Via))
	}
	attrs = append(attrs, extra...)
	l.log.LogAttrs(ctx, slog.LevelInfo, Name, attrs...)
}

// sampleKey is the bucket an event counts against: its kind and
// principal, or its source host when no principal is known (an address
// guessing tokens), so a flood from one caller does not silence others.
func sampleKey(e Event) Key {
	who := e.Principal
	if who == "" {
		who = "source " + host(e.Source)
	}
	return Key{Kind: e.Kind, Who: who}
}

func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// writeSummary writes the "suppressed" line of s: the usual keys (the
// principal or source of the events left out, outcome "suppressed"),
// plus suppressed_event, their kind, and suppressed, how many.
func (l *Logger) writeSummary(ctx context.Context, s Summary) {
	e := Event{Kind: Suppressed, Outcome: "suppressed",
		Reason: fmt.Sprintf("%d %s events left out by sampling since %s", s.N, s.Key.Kind, s.Since.UTC().Format(time.RFC3339))}
	if src, ok := strings.CutPrefix(s.Key.Who, "source "); ok {
		e.Source = src
	} else {
		e.Principal = s.Key.Who
	}
	l.write(ctx, e, slog.String("suppressed_event", string(s.Key.Kind)), slog.Int64("suppressed", s.N))
}

type sourceKey struct{}

// WithSource returns ctx carrying the client's address, which Record
// writes as the source of events that name none. The Kafka listener sets
// it once per connection; lines written in a Connect handler name the
// call's peer instead.
func WithSource(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, sourceKey{}, addr)
}

// SourceFrom is the address WithSource put in ctx, or "".
func SourceFrom(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}
