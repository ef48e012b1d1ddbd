package cli

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/strata-mq/strata/client"
)

// waitNotice tells the user, on stderr, why a produce or consume waits:
// one line at the first retriable error the client reports, with its
// reason in plain words, and one more line each time a reason it has not
// reported yet appears. It is keyed on the kind of reason, not the
// partition or the attempt, so twelve partitions refused for the same
// cause, retried every second, make one line:
//
//	strata: waiting: orders-3: not enough in-sync replicas (ISR 1, min.insync.replicas 2); retrying until the delivery timeout (2m0s)
//
// Its methods are safe for concurrent use (the client calls OnRetry from
// its goroutines).
type waitNotice struct {
	e       *Env
	timeout time.Duration // the --delivery-timeout the client was given
	scope   string        // names what waits when an event names no topic, e.g. `group "g"`; may be ""

	mu   sync.Mutex
	said map[client.RetryReason]bool // reasons reported
	last client.RetryEvent           // the last event, for gaveUp
	any  bool                        // whether last is set
}

func newWaitNotice(e *Env, timeout time.Duration, scope string) *waitNotice {
	return &waitNotice{e: e, timeout: timeout, scope: scope, said: map[client.RetryReason]bool{}}
}

// onRetry is the client's OnRetry callback.
func (w *waitNotice) onRetry(ev client.RetryEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.any = ev, true
	if w.said[ev.Reason] {
		return
	}
	w.said[ev.Reason] = true
	fmt.Fprintf(w.e.Stderr, "strata: waiting: %s; retrying until the delivery timeout (%s)\n", w.describe(ev), w.timeout)
}

// failed is the error a consume exits with for err: when the client
// stopped retrying after the delivery timeout, one line naming the last
// reason it waited for (or err's cause when it reported none); any other
// error unchanged.
func (w *waitNotice) failed(err error) error {
	if !errors.Is(err, client.ErrDeliveryTimeout) {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	what := w.e.explainCause(causeAfter(err, client.ErrDeliveryTimeout))
	if w.any {
		what = w.describe(w.last)
	}
	return fmt.Errorf("gave up after retrying for the delivery timeout (%s): %s", w.timeout, what)
}

// describe says what waits and why: "orders-3: leader not available".
func (w *waitNotice) describe(ev client.RetryEvent) string {
	where := w.scope
	switch {
	case ev.Topic != "" && ev.Partition >= 0:
		where = client.TopicPartition{Topic: ev.Topic, Partition: ev.Partition}.String()
	case ev.Topic != "":
		where = ev.Topic
	}
	why := w.e.retryReason(ev)
	if where == "" {
		return why
	}
	return where + ": " + why
}

// retryReason says a retry's reason in plain words, with the numbers or
// the server's message where the reason alone does not say enough.
func (e *Env) retryReason(ev client.RetryEvent) string {
	switch ev.Reason {
	case client.RetryNotEnoughReplicas:
		if ev.MinInsyncReplicas > 0 {
			return fmt.Sprintf("%s (ISR %d, min.insync.replicas %d)", ev.Reason, ev.ISRSize, ev.MinInsyncReplicas)
		}
	case client.RetryNodeUnreachable:
		if _, _, dial := unreachable(ev.Err); dial {
			return e.explainCause(ev.Err) // "cannot reach the storage node at …: connection refused"
		}
		return fmt.Sprintf("%s: %s", ev.Reason, e.explainCause(ev.Err))
	case client.RetryTimeout:
		if d := client.DetailOf(ev.Err); d != nil && d.GetMessage() != "" {
			return fmt.Sprintf("%s: %s", ev.Reason, oneLine(d.GetMessage()))
		}
	case client.RetryCoordinatorUnavailable, client.RetryUnavailable, client.RetryOther:
		return fmt.Sprintf("%s: %s", ev.Reason, e.explainCause(ev.Err))
	}
	return ev.Reason.String()
}

// causeAfter returns the cause of an error built as
// fmt.Errorf("%w: %w", sentinel, cause), or err itself when it is not one.
func causeAfter(err, sentinel error) error {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		if es := m.Unwrap(); len(es) == 2 && es[0] == sentinel {
			return es[1]
		}
	}
	return err
}

// lockedWriter serializes writes, so lines written from several
// goroutines (the client's retry reports, delivery reports) never
// interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// timeoutCause is the cause of a delivery timeout, past the
// ErrOutcomeUnknown that wraps it when the batch may have been written.
func timeoutCause(err error) error {
	return causeAfter(causeAfter(err, client.ErrOutcomeUnknown), client.ErrDeliveryTimeout)
}
