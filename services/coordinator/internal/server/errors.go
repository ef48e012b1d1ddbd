package server

import (
	"fmt"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

func errNotCoordinator(group, ownerID, addr string) *connect.Error {
	return apierr.Error(&commonv1.ErrorDetail{
		Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_COORDINATOR,
		Message: fmt.Sprintf("this coordinator does not own group %q; %s does", group, or(ownerID, "another instance")),
		Hint:    &commonv1.ErrorDetail_Coordinator{Coordinator: &commonv1.CoordinatorHint{GroupId: group, CoordinatorId: ownerID, Address: addr}},
	})
}

func errDatabase(err error) *connect.Error {
	return apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "the offsets database is unavailable: %v", err)
}
