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
	return withDetail(code, &commonv1.ErrorDetail{Code: commonv1.Code(code), Reason: reason, Message: msg})
}

func withDetail(code connect.Code, d *commonv1.ErrorDetail) *connect.Error {
	e := connect.NewError(code, errors.New(d.GetMessage()))
	if det, err := connect.NewErrorDetail(d); err == nil {
		e.AddDetail(det)
	}
	return e
}

// detail is a per-partition ErrorDetail.
func detail(code connect.Code, reason commonv1.Reason, format string, args ...any) *commonv1.ErrorDetail {
	return &commonv1.ErrorDetail{Code: commonv1.Code(code), Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func errNotCoordinator(group, ownerID, addr string) *connect.Error {
	return withDetail(connect.CodeFailedPrecondition, &commonv1.ErrorDetail{
		Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_COORDINATOR,
		Message: fmt.Sprintf("this coordinator does not own group %q; %s does", group, or(ownerID, "another instance")),
		Hint:    &commonv1.ErrorDetail_Coordinator{Coordinator: &commonv1.CoordinatorHint{GroupId: group, CoordinatorId: ownerID, Address: addr}},
	})
}

func errDatabase(err error) *connect.Error {
	return newError(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "the offsets database is unavailable: %v", err)
}
