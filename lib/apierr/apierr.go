// Package apierr is Strata's error model at the Connect edge: every API
// error is a *connect.Error carrying one commonv1.ErrorDetail with the same
// code, a Kafka-level reason, the one-line message and, where the server
// knows it, a hint (the current leader, coordinator, controller, ISR size or
// offset range). Per-partition results carry the same ErrorDetail without a
// Connect error around it.
//
// Services build errors with New, Detail and Error; callers read them back
// with DetailOf and AsDetail. Nothing else in the project converts between
// the two forms.
package apierr

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// New returns a Connect error with code and one ErrorDetail carrying the
// same code, reason and the formatted message.
func New(code connect.Code, reason commonv1.Reason, format string, args ...any) *connect.Error {
	return Error(Detail(code, reason, format, args...))
}

// Detail returns a per-partition ErrorDetail with code, reason and the
// formatted message, and no hint.
func Detail(code connect.Code, reason commonv1.Reason, format string, args ...any) *commonv1.ErrorDetail {
	return &commonv1.ErrorDetail{Code: commonv1.Code(code), Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Error returns d as a whole-request Connect error: d's code (CodeUnknown
// when d has none), d's message, and d itself attached as the detail.
func Error(d *commonv1.ErrorDetail) *connect.Error {
	code := connect.Code(d.GetCode())
	if code == 0 {
		code = connect.CodeUnknown
	}
	e := connect.NewError(code, errors.New(d.GetMessage()))
	if det, err := connect.NewErrorDetail(d); err == nil {
		e.AddDetail(det)
	}
	return e
}

// DetailOf returns the ErrorDetail attached to the Connect error in err's
// chain, or nil when there is none.
func DetailOf(err error) *commonv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := v.(*commonv1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}

// ReasonOf returns the reason of the ErrorDetail attached to err, or
// REASON_UNSPECIFIED.
func ReasonOf(err error) commonv1.Reason { return DetailOf(err).GetReason() }

// AsDetail returns err as an ErrorDetail for a per-record or per-partition
// result: the attached detail when there is one, else one built from the
// Connect code and message, else CODE_UNKNOWN with err's text. nil for a
// nil err.
func AsDetail(err error) *commonv1.ErrorDetail {
	if err == nil {
		return nil
	}
	if ed := DetailOf(err); ed != nil {
		return ed
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &commonv1.ErrorDetail{Code: commonv1.Code(ce.Code()), Message: ce.Message()}
	}
	return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNKNOWN, Message: err.Error()}
}

// Forward returns an error from an upstream call as this service's answer:
// the same code, message and details, without the upstream's headers. An
// error that is not a Connect error becomes CodeUnknown. nil stays nil.
func Forward(err error) error {
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
