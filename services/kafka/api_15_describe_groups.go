package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) describeGroupsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeGroups, MinVersion: 0, MaxVersion: 5, Handle: handler(b.describeGroups)}
}

func (b *Bridge) describeGroups(ctx context.Context, version int16, req *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ProtocolType = id, "consumer"
		out, err := b.cfg.Gateway.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: id}))
		if err != nil {
			if rg.ErrorCode = kafkaCode(err, groupPlane); rg.ErrorCode == kerr.GroupIDNotFound.Code {
				rg.ErrorCode, rg.State = 0, "Dead"
			}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := out.Msg.GetGroup()
		rg.State, rg.Protocol = groupState(g.GetState()), g.GetAssignor()
		classic := g.GetProtocolType() != ""
		if classic {
			// A classic group: its state, protocol type and each
			// member's bytes as the coordinator holds them.
			rg.State, rg.ProtocolType = g.GetClassicState(), g.GetProtocolType()
		}
		for _, m := range g.GetMembers() {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost = m.GetMemberId(), m.GetClientId(), m.GetClientHost()
			if m.GetInstanceId() != "" {
				iid := m.GetInstanceId()
				rm.InstanceID = &iid
			}
			if classic {
				rm.ProtocolMetadata, rm.MemberAssignment = m.GetClassicMetadata(), m.GetClassicAssignment()
				rg.Members = append(rg.Members, rm)
				continue
			}
			md := kmsg.ConsumerMemberMetadata{Topics: m.GetSubscribedTopicNames()}
			rm.ProtocolMetadata = md.AppendTo(nil)
			var a kmsg.ConsumerMemberAssignment
			for _, t := range m.GetAssignment().GetPartitions() {
				a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.GetTopic(), Partitions: t.GetPartitions()})
			}
			rm.MemberAssignment = a.AppendTo(nil)
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
