package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// newError is a Connect error with one ErrorDetail carrying the same code,
// reason and message, as every Strata API error has.
func newError(code connect.Code, reason commonv1.Reason, format string, args ...any) *connect.Error {
	msg := fmt.Sprintf(format, args...)
	e := connect.NewError(code, errors.New(msg))
	if d, err := connect.NewErrorDetail(&commonv1.ErrorDetail{Code: commonv1.Code(code), Reason: reason, Message: msg}); err == nil {
		e.AddDetail(d)
	}
	return e
}

// errTopicNotFound is the NOT_FOUND for a topic the metadata does not have.
func errTopicNotFound(topic string) *connect.Error {
	return newError(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", topic)
}

// errNoMetadata is the UNAVAILABLE answered before the first snapshot.
func errNoMetadata() *connect.Error {
	return newError(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "the gateway has no metadata from the controller yet")
}

// upstream returns an error from an upstream call as the gateway's answer:
// the same code, message and details, without the upstream's headers.
func upstream(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return connect.NewError(connect.CodeUnknown, err)
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}

// detailOf returns the ErrorDetail attached to err, or nil.
func detailOf(err error) *commonv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*commonv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}

// errorDetail returns err as an ErrorDetail for a per-record or
// per-partition result: the attached detail when there is one, else one
// built from the code and message.
func errorDetail(err error) *commonv1.ErrorDetail {
	if ed := detailOf(err); ed != nil {
		return ed
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &commonv1.ErrorDetail{Code: commonv1.Code(ce.Code()), Message: ce.Message()}
	}
	return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNKNOWN, Message: err.Error()}
}

// fromDetail turns a per-partition ErrorDetail from storage into a Connect
// error carrying it.
func fromDetail(ed *commonv1.ErrorDetail) *connect.Error {
	code := connect.Code(ed.GetCode())
	if code == 0 {
		code = connect.CodeUnknown
	}
	e := connect.NewError(code, errors.New(ed.GetMessage()))
	if d, err := connect.NewErrorDetail(ed); err == nil {
		e.AddDetail(d)
	}
	return e
}

// retryableOnLeader reports whether a data-path error may go away by asking
// the (possibly new) leader again: leadership moved, our epoch is stale or
// ahead of the node, the ISR is short before the append, the partition has
// no leader for now, or the node could not be reached. NOT_ENOUGH_REPLICAS
// _AFTER_APPEND is not retried: the batch is in the log already, and the
// gateway does not produce idempotently, so a retry would duplicate it.
func retryableOnLeader(err error) bool {
	ed := detailOf(err)
	switch ed.GetReason() {
	case commonv1.Reason_REASON_NOT_LEADER,
		commonv1.Reason_REASON_FENCED_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH,
		commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS:
		return true
	case commonv1.Reason_REASON_UNSPECIFIED:
		return connect.CodeOf(err) == connect.CodeUnavailable
	}
	return false
}
