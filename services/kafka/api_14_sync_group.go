package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) syncGroupAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.SyncGroup, MinVersion: 0, MaxVersion: 5, Handle: handler(b.syncGroup)}
}

func (b *Bridge) syncGroup(ctx context.Context, version int16, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSyncGroupResponse()
	creq := &coordinatorv1.ClassicSyncGroupRequest{GroupId: req.Group, MemberId: req.MemberID, Generation: req.Generation}
	if req.ProtocolType != nil {
		creq.ProtocolType = *req.ProtocolType
	}
	if req.Protocol != nil {
		creq.ProtocolName = *req.Protocol
	}
	if req.InstanceID != nil {
		creq.InstanceId = *req.InstanceID
	}
	for _, a := range req.GroupAssignment {
		creq.Assignments = append(creq.Assignments, &coordinatorv1.ClassicAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicSyncGroupResponse]
	if err == nil {
		out, err = c.ClassicSyncGroup(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	m := out.Msg
	resp.ErrorCode, resp.MemberAssignment = int16(m.GetErrorCode()), m.GetAssignment()
	if resp.ErrorCode == 0 {
		pt, pn := m.GetProtocolType(), m.GetProtocolName()
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	return resp, nil
}
