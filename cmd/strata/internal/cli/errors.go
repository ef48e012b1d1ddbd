package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// msgNoCoordinator is what group commands print while the cluster runs no
// coordinator.
const msgNoCoordinator = "consumer groups need the coordinator, which this cluster does not run yet"

// topicError names the topic an admin call was about, so NOT_FOUND can be
// reported as `topic "x" does not exist`.
type topicError struct {
	topic string
	err   error
}

func (e *topicError) Error() string { return e.err.Error() }
func (e *topicError) Unwrap() error { return e.err }

func aboutTopic(topic string, err error) error {
	if err == nil {
		return nil
	}
	return &topicError{topic, err}
}

// coordinatorError marks a failed call to a coordinator-backed API.
type coordinatorError struct{ err error }

func (e *coordinatorError) Error() string { return e.err.Error() }
func (e *coordinatorError) Unwrap() error { return e.err }

// explain renders any error as one line without the "strata: " prefix:
// no Go error chains, no stack traces, no internal paths.
func (e *Env) explain(err error) string {
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown) && errors.Is(err, client.ErrDeliveryTimeout):
		// An idempotent producer's batch sent and never answered.
		return "may or may not have been written, not acknowledged within the delivery timeout: " + e.explainCause(timeoutCause(err))
	case errors.Is(err, client.ErrOutcomeUnknown) && client.ReasonOf(err) == commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID:
		return "may or may not have been written, and the leader no longer knows this producer, so it was not sent again: " + e.explainCause(err)
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "may or may not have been written, so it was not sent again (--acks all retries safely): " + e.explainCause(err)
	case errors.Is(err, client.ErrDeliveryTimeout):
		return "not acknowledged within the delivery timeout: " + e.explainCause(causeAfter(err, client.ErrDeliveryTimeout))
	case errors.Is(err, client.ErrOffsetOutOfRange):
		return "cannot read on: " + e.explainCause(err)
	}
	return e.explainCause(err)
}

// explainCause is explain for the server's or the transport's error
// carried by err.
func (e *Env) explainCause(err error) string {
	var ue *usageError
	if errors.As(err, &ue) {
		return oneLine(ue.msg)
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	if reason, addr, ok := unreachable(err); ok {
		if addr == "" || sameHost(addr, e.gatewayURL()) {
			return fmt.Sprintf("cannot reach the gateway at %s: %s", e.gatewayURL(), reason)
		}
		return fmt.Sprintf("cannot reach the storage node at %s: %s", addr, reason)
	}
	if addr, ok := plainToTLS(err, e.gatewayURL()); ok { // credentials.go
		what := "the server at http://" + addr
		if addr == "" || sameHost(addr, e.gatewayURL()) {
			what = "the gateway at " + e.gatewayURL()
		}
		return "no HTTP/2 cleartext answer from " + what + ": if it serves TLS, use an https:// URL (strata dev --secure: source DIR/admin.env)"
	}
	if reason, addr, ok := tlsFailure(err); ok { // credentials.go
		if addr == "" {
			addr = e.gatewayURL()
		}
		return fmt.Sprintf("TLS with %s failed: %s", addr, reason)
	}
	var ute *client.UnknownTopicError
	if errors.As(err, &ute) {
		return fmt.Sprintf("topic %q does not exist", ute.Topic)
	}
	code := connect.CodeOf(err)
	reason := client.ReasonOf(err)
	var ce *coordinatorError
	if errors.As(err, &ce) && (code == connect.CodeUnavailable || code == connect.CodeUnimplemented) {
		return msgNoCoordinator
	}
	var te *topicError
	if errors.As(err, &te) && code == connect.CodeNotFound &&
		(reason == commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION || reason == commonv1.Reason_REASON_UNSPECIFIED) {
		return fmt.Sprintf("topic %q does not exist", te.topic)
	}
	if errors.Is(err, context.DeadlineExceeded) || code == connect.CodeDeadlineExceeded {
		if d := client.DetailOf(err); d != nil && d.GetMessage() != "" {
			return oneLine(d.GetMessage())
		}
		return "timed out"
	}
	if d := client.DetailOf(err); d != nil && d.GetMessage() != "" {
		return oneLine(d.GetMessage())
	}
	var cerr *client.Error
	if errors.As(err, &cerr) && cerr.Message != "" {
		return oneLine(cerr.Message)
	}
	var conn *connect.Error
	if errors.As(err, &conn) {
		if m := conn.Message(); m != "" {
			return oneLine(m)
		}
		return strings.ReplaceAll(conn.Code().String(), "_", " ")
	}
	return oneLine(strings.TrimPrefix(err.Error(), "client: "))
}

// unreachable recognizes a failure to connect and says why in a few words.
func unreachable(err error) (reason, addr string, ok bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		var dns *net.DNSError
		if errors.As(err, &dns) {
			return "no such host", "", true
		}
		return "", "", false
	}
	if op.Addr != nil {
		addr = op.Addr.String()
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.As(err, &dns):
		reason = "no such host"
	case op.Timeout():
		reason = "timed out"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		reason = "host unreachable"
	default:
		reason = oneLine(op.Err.Error())
	}
	return reason, addr, true
}

// sameHost reports whether a dialed address is the gateway's.
func sameHost(addr, gateway string) bool {
	u, err := url.Parse(gateway)
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	_, aport, _ := net.SplitHostPort(addr)
	return aport == port
}

func oneLine(s string) string {
	s = strings.TrimPrefix(s, "client: ")
	s = strings.Join(strings.Fields(s), " ")
	return s
}
