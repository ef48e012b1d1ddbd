package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

var (
	// ErrClosed is returned for records produced after Close, and by
	// calls on a closed Consumer.
	ErrClosed = errors.New("client: closed")
	// ErrDeliveryTimeout wraps the last error of a batch whose delivery
	// timeout passed before it was acknowledged, and the last error of a
	// consumer's Poll or ListOffsets whose calls kept failing for longer
	// than the DeliveryTimeout it was given.
	ErrDeliveryTimeout = errors.New("client: delivery timeout")
	// ErrUnknownTopic is matched (errors.Is) by every *UnknownTopicError.
	ErrUnknownTopic = errors.New("client: unknown topic")
	// ErrNoLeader means a partition has no live leader right now.
	ErrNoLeader = errors.New("client: partition has no leader")
	// ErrOutcomeUnknown wraps the error of a batch that failed after it
	// may have been written: the request failed after it left (a broken
	// connection, a timeout, a leader that lost leadership while waiting
	// for acks=all) and the producer cannot send it again safely. Without
	// idempotence that is any such failure, since sending again could
	// write the records twice. With idempotence (the default with
	// AcksAll) the batch is sent again with the same producer id and
	// sequence, which the leader recognizes, until it is answered or its
	// delivery timeout passes: then the error wraps ErrDeliveryTimeout
	// too. Such records may be in the log; they are never written a
	// second time.
	ErrOutcomeUnknown = errors.New("client: the records may or may not have been written")
	// ErrOffsetOutOfRange is returned by Poll when a leader answers that a
	// partition's position is out of range although the range it reports
	// holds the position (a gap in the log): moving to either end would
	// skip data or read it again forever, so the consumer stops instead of
	// fetching the same offset again. A position below the log start or
	// above the high watermark moves there instead.
	ErrOffsetOutOfRange = errors.New("client: offset out of range")
	// ErrUnauthenticated is matched (errors.Is) by an *Error a service
	// answered with UNAUTHENTICATED: the cluster requires credentials
	// (Token, ClientCertificate) and the call had none, or ones it does
	// not accept (an unknown or revoked token). The *Error's Message is
	// the service's one line ("unauthenticated: unknown or revoked
	// token"). Never retried: the same credentials fail again.
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrPermissionDenied is matched (errors.Is) by an *Error a service
	// answered with PERMISSION_DENIED: the caller's principal has no ACL
	// allowing the operation. The *Error's Message is the service's one
	// line, naming the principal, the operation and the resource
	// ("permission denied: User:alice may not write topic orders"). Never
	// retried; a grant takes effect for the next call.
	ErrPermissionDenied = errors.New("client: permission denied")
	// ErrProducerFenced is matched (errors.Is) by the error of every call
	// of a transactional producer once another producer initialized with
	// the same TransactionalID (or the coordinator aborted the producer's
	// transaction after its TransactionTimeout and bumped the epoch): the
	// coordinator answered PRODUCER_FENCED, or a leader refused its epoch.
	// It is final, as Kafka's ProducerFencedException: the producer can
	// only be closed; records buffered or produced later fail with it.
	ErrProducerFenced = errors.New("client: producer fenced by a newer producer with the same transactional id")
	// ErrNoTransaction is returned when a transactional producer is asked
	// to produce, commit, abort or send offsets with no transaction begun
	// (BeginTransaction), and by BeginTransaction itself on a producer
	// without TransactionalID.
	ErrNoTransaction = errors.New("client: no transaction in progress")
	// ErrAbortRequired is matched by CommitTransaction's error (and by the
	// errors of records produced afterwards) once a record or an offset
	// of the transaction failed: the transaction can no longer commit, and
	// AbortTransaction is the way on. It wraps the first failure.
	ErrAbortRequired = errors.New("client: the transaction failed and must be aborted")
	// ErrTransactionAborted fails the records of a transaction that
	// AbortTransaction found not yet sent.
	ErrTransactionAborted = errors.New("client: transaction aborted")
)

// UnknownTopicError says the gateway does not know a topic.
type UnknownTopicError struct {
	Topic string // the topic asked for
}

func (e *UnknownTopicError) Error() string {
	return fmt.Sprintf("client: topic %q does not exist", e.Topic)
}

// Is makes errors.Is(err, ErrUnknownTopic) true.
func (e *UnknownTopicError) Is(target error) bool { return target == ErrUnknownTopic }

// Error is a failure a Strata service reported for one request or one
// partition: its Connect code, the Kafka-level reason and the server's one
// line message. It wraps the Connect error when there was one.
type Error struct {
	Code    connect.Code
	Reason  commonv1.Reason
	Message string
	// Detail is the structured error as sent, with its hint (for example
	// the current leader); nil when the server attached none.
	Detail *commonv1.ErrorDetail
	cause  error
}

func (e *Error) Error() string {
	if e.Message != "" {
		return "client: " + e.Message
	}
	if e.cause != nil {
		return "client: " + e.cause.Error()
	}
	return "client: " + e.Code.String()
}

func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, ErrUnauthenticated) and
// errors.Is(err, ErrPermissionDenied) true for the matching codes, and
// errors.Is(err, ErrProducerFenced) for REASON_PRODUCER_FENCED.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthenticated:
		return e.Code == connect.CodeUnauthenticated
	case ErrPermissionDenied:
		return e.Code == connect.CodePermissionDenied
	case ErrProducerFenced:
		return e.Reason == commonv1.Reason_REASON_PRODUCER_FENCED
	}
	return false
}

// refused reports whether err is a refusal of the caller's credentials
// or permissions, which retrying cannot change.
func refused(err error) bool {
	if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrPermissionDenied) {
		return true
	}
	code := connect.CodeOf(err)
	return code == connect.CodeUnauthenticated || code == connect.CodePermissionDenied
}

// DetailOf returns the ErrorDetail attached to a Connect error, or nil.
func DetailOf(err error) *commonv1.ErrorDetail { return apierr.DetailOf(err) }

// ReasonOf returns the Strata reason carried by err (an *Error or a Connect
// error with an ErrorDetail), or REASON_UNSPECIFIED.
func ReasonOf(err error) commonv1.Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if d := DetailOf(err); d != nil {
		return d.GetReason()
	}
	return commonv1.Reason_REASON_UNSPECIFIED
}

// fromConnect turns a whole-request failure into an *Error; an *Error is
// returned as it is.
func fromConnect(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Keep context errors recognizable for callers.
		return err
	}
	e := &Error{Code: connect.CodeOf(err), cause: err}
	if d := DetailOf(err); d != nil {
		e.Reason, e.Message, e.Detail = d.GetReason(), d.GetMessage(), d
	} else {
		var ce *connect.Error
		if errors.As(err, &ce) {
			e.Message = ce.Message()
		}
	}
	return e
}

// fromDetail turns a per-partition ErrorDetail into an *Error.
func fromDetail(d *commonv1.ErrorDetail) error {
	if d == nil {
		return nil
	}
	return &Error{Code: connect.Code(d.GetCode()), Reason: d.GetReason(), Message: d.GetMessage(), Detail: d}
}

// action is what a client does about an error.
type action int

const (
	actFail    action = iota // give up: the request cannot succeed as sent
	actRetry                 // retry after a backoff
	actRefresh               // refresh metadata, then retry
	actNewPID                // the partition's next producer epoch (sink.newChain), rebuild, retry
)

// classify decides what to do about a Produce, Fetch or ListOffsets error.
func classify(err error) action {
	if err == nil {
		return actFail
	}
	if errors.Is(err, ErrNoLeader) {
		return actRefresh
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Our per-request timeout: the node may be gone.
		return actRefresh
	}
	if errors.Is(err, context.Canceled) {
		return actFail
	}
	if refused(err) {
		// The same credentials are refused again.
		return actFail
	}
	if connectionBroke(err) {
		// connect-go reports a connection reset under a call in flight
		// as CodeCanceled (it takes ECONNRESET and EPIPE for a client that
		// went away); it is the node that went away.
		return actRefresh
	}
	var code connect.Code
	reason := commonv1.Reason_REASON_UNSPECIFIED
	var e *Error
	var ce *connect.Error
	switch {
	case errors.As(err, &e):
		code, reason = e.Code, e.Reason
	case errors.As(err, &ce):
		code = ce.Code()
		if d := DetailOf(err); d != nil {
			reason = d.GetReason()
		}
	default:
		// Not from a server or the transport: a local mistake that
		// retrying cannot fix.
		return actFail
	}
	switch reason {
	case commonv1.Reason_REASON_NOT_LEADER,
		commonv1.Reason_REASON_FENCED_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION:
		return actRefresh
	case commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS,
		commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
		commonv1.Reason_REASON_REQUEST_TIMED_OUT:
		return actRetry
	case commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID:
		return actNewPID
	case commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE,
		commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH,
		commonv1.Reason_REASON_CORRUPT_RECORD,
		commonv1.Reason_REASON_RECORD_TOO_LARGE,
		commonv1.Reason_REASON_INVALID_RECORD,
		commonv1.Reason_REASON_INVALID_TIMESTAMP:
		return actFail
	}
	switch code {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded,
		connect.CodeAborted, connect.CodeCanceled:
		// Unknown covers a connection that broke mid-call; Aborted an
		// epoch fence the refresh resolves; Canceled without our own
		// context canceled (checked above) is the server's request
		// context ending, a node shutting down.
		return actRefresh
	}
	return actFail
}

// connectionBroke reports whether err is a connection that failed under a
// call already sent or being sent: reset or closed by the peer, as when the
// node's process is killed or a network path drops.
func connectionBroke(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unwritten reports whether a failed Produce certainly did not append its
// batch, so a producer without idempotence may send it again without
// writing it twice: no request left (no leader known, the connection was
// never made), or the leader refused the batch before appending it. A
// leader answers NOT_LEADER before appending, except with acks=all, where
// it also answers so when it lost leadership while waiting for the
// in-sync replicas. Anything else (a connection broken after the request
// left, a timeout, an error without a reason) leaves the outcome unknown.
//
// The refusals that come before any append (a sequence or producer epoch
// the leader does not accept, a batch too large or corrupt, a refused
// principal) are unwritten too; they fail a batch without idempotence
// anyway, and tell an idempotent producer that this attempt did not land.
func unwritten(err error, acks Acks) bool {
	if errors.Is(err, ErrNoLeader) || refused(err) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	switch ReasonOf(err) {
	case commonv1.Reason_REASON_FENCED_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
		commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS,
		commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE,
		commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID,
		commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH,
		commonv1.Reason_REASON_DUPLICATE_SEQUENCE,
		commonv1.Reason_REASON_RECORD_TOO_LARGE,
		commonv1.Reason_REASON_CORRUPT_RECORD,
		// A topic's rule broken: refused before the append.
		commonv1.Reason_REASON_INVALID_RECORD,
		commonv1.Reason_REASON_INVALID_TIMESTAMP:
		return true
	case commonv1.Reason_REASON_NOT_LEADER:
		return acks != AcksAll
	}
	return false
}
