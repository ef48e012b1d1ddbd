package metastore

import (
	"errors"
	"fmt"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// Error is a failure a caller can act on: the API code and reason, and one
// line for a user. The server maps it to a Connect error with an
// ErrorDetail at the edge.
type Error struct {
	Code   commonv1.Code
	Reason commonv1.Reason
	Msg    string
}

func (e *Error) Error() string { return "metastore: " + e.Msg }

func errf(code commonv1.Code, reason commonv1.Reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Detail returns the ErrorDetail for err when it is an *Error, else nil.
func Detail(err error) *commonv1.ErrorDetail {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	return &commonv1.ErrorDetail{Code: e.Code, Reason: e.Reason, Message: e.Msg}
}

// ErrNotActive is returned by work reserved to the active controller when
// the caller's election guard no longer holds.
var ErrNotActive = errors.New("metastore: not the active controller")
