package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) joinGroupAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.JoinGroup, MinVersion: 0, MaxVersion: 7, Handle: func(ctx context.Context, r *kafkawire.Request) (kmsg.Response, error) {
		return b.joinGroup(ctx, r.Version, r.ClientID, r.RemoteAddr, r.Body.(*kmsg.JoinGroupRequest))
	}}
}

// joinGroup answers a JoinGroup; clientID and host are the connection's,
// for DescribeGroups.
func (b *Bridge) joinGroup(ctx context.Context, version int16, clientID, host string, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.MemberID = -1, req.MemberID
	creq := &coordinatorv1.ClassicJoinGroupRequest{
		GroupId: req.Group, MemberId: req.MemberID, ProtocolType: req.ProtocolType,
		SessionTimeoutMs: req.SessionTimeoutMillis, RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		RequireKnownMemberId: version >= 4, ClientId: clientID, ClientHost: host,
	}
	if version == 0 || creq.RebalanceTimeoutMs <= 0 {
		creq.RebalanceTimeoutMs = req.SessionTimeoutMillis
	}
	if req.InstanceID != nil {
		creq.InstanceId = *req.InstanceID
	}
	for _, p := range req.Protocols {
		creq.Protocols = append(creq.Protocols, &coordinatorv1.ClassicProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicJoinGroupResponse]
	if err == nil {
		out, err = c.ClassicJoinGroup(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	m := out.Msg
	resp.ErrorCode, resp.Generation, resp.MemberID, resp.LeaderID = int16(m.GetErrorCode()), m.GetGeneration(), m.GetMemberId(), m.GetLeaderId()
	if resp.ErrorCode == 0 {
		pt, pn := m.GetProtocolType(), m.GetProtocolName()
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	for _, jm := range m.GetMembers() {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = jm.GetMemberId(), jm.GetMetadata()
		if jm.GetInstanceId() != "" {
			iid := jm.GetInstanceId()
			rm.InstanceID = &iid
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
