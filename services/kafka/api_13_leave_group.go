package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) leaveGroupAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.LeaveGroup, MinVersion: 0, MaxVersion: 4, Handle: handler(b.leaveGroup)}
}

func (b *Bridge) leaveGroup(ctx context.Context, version int16, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrLeaveGroupResponse()
	members := req.Members
	if version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	creq := &coordinatorv1.ClassicLeaveGroupRequest{GroupId: req.Group}
	static := false
	for _, lm := range members {
		instance := ""
		if lm.InstanceID != nil {
			instance, static = *lm.InstanceID, true
		}
		creq.MemberIds = append(creq.MemberIds, lm.MemberID)
		creq.InstanceIds = append(creq.InstanceIds, instance)
	}
	if !static {
		creq.InstanceIds = nil
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicLeaveGroupResponse]
	if err == nil {
		out, err = c.ClassicLeaveGroup(ctx, connect.NewRequest(creq))
	}
	if err == nil && len(out.Msg.GetErrorCodes()) != len(members) {
		err = connect.NewError(connect.CodeInternal, nil)
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	for i, lm := range members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = lm.MemberID, lm.InstanceID, int16(out.Msg.GetErrorCodes()[i])
		resp.Members = append(resp.Members, rm)
	}
	if version < 3 && len(resp.Members) == 1 {
		resp.ErrorCode = resp.Members[0].ErrorCode
	}
	return resp, nil
}
