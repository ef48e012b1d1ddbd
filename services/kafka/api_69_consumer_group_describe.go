package kafka

import (
	"context"
	"math"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// ConsumerGroupDescribe (69), v0–1: KIP-848 groups as the coordinator
// describes them (Kafka 4's kafka-consumer-groups.sh --describe asks it of
// consumer-protocol groups): state, group and assignment epochs, the
// assignor, and each member with its epoch, subscription, current and
// target assignment by topic id and name.
//
//   - A group that does not exist, or a classic group, answers
//     GROUP_ID_NOT_FOUND, as Kafka ("not a consumer group"); a classic
//     group is described by DescribeGroups.
//   - States are KIP-848's: Empty, Reconciling, Stable, Dead (Strata's
//     coordinator assigns at once, so never Assigning).
//   - v1's member type is 1 (consumer protocol).
//   - ACL: describe on the group, and topics the principal may not
//     describe are left out, as DescribeGroups (the gateway's
//     DescribeGroup). Authorized operations are not computed:
//     -2147483648, Kafka's "not requested".
func (b *Bridge) consumerGroupDescribeAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ConsumerGroupDescribe, MinVersion: 0, MaxVersion: 1, Handle: handler(b.consumerGroupDescribe)}
}

func (b *Bridge) consumerGroupDescribe(ctx context.Context, version int16, req *kmsg.ConsumerGroupDescribeRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group, rg.AuthorizedOperations = id, math.MinInt32
		out, err := b.cfg.Gateway.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: id}))
		if err != nil {
			rg.ErrorCode = kafkaCode(err, groupPlane)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := out.Msg.GetGroup()
		if g.GetProtocolType() != "" {
			rg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "group " + id + " is a classic group (JoinGroup), not a consumer group: DescribeGroups describes it"
			rg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = consumerGroupState(g.GetState()), g.GetGroupEpoch(), g.GetAssignmentEpoch(), g.GetAssignor()
		var names []string
		for _, m := range g.GetMembers() {
			for _, a := range []*coordinatorv1.Assignment{m.GetAssignment(), m.GetTargetAssignment()} {
				for _, t := range a.GetPartitions() {
					if !slices.Contains(names, t.GetTopic()) {
						names = append(names, t.GetTopic())
					}
				}
			}
		}
		ids, err := b.topicIDs(ctx, names)
		if err != nil {
			rg.ErrorCode = kafkaCode(err, groupPlane)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		assignment := func(a *coordinatorv1.Assignment) kmsg.Assignment {
			var out kmsg.Assignment
			for _, t := range a.GetPartitions() {
				tp := kmsg.AssignmentTopicPartition{TopicID: ids[t.GetTopic()], Topic: t.GetTopic(), Partitions: slices.Clone(t.GetPartitions())}
				out.TopicPartitions = append(out.TopicPartitions, tp)
			}
			return out
		}
		for _, m := range g.GetMembers() {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.GetMemberId(), m.GetMemberEpoch(), m.GetClientId(), m.GetClientHost()
			if iid := m.GetInstanceId(); iid != "" {
				rm.InstanceID = &iid
			}
			if rack := m.GetRackId(); rack != "" {
				rm.RackID = &rack
			}
			rm.SubscribedTopics = slices.Clone(m.GetSubscribedTopicNames())
			rm.Assignment, rm.TargetAssignment = assignment(m.GetAssignment()), assignment(m.GetTargetAssignment())
			if version >= 1 {
				rm.MemberType = 1
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// consumerGroupState is a coordinator state as KIP-848 names it.
func consumerGroupState(s coordinatorv1.GroupState) string {
	switch s {
	case coordinatorv1.GroupState_GROUP_STATE_EMPTY:
		return "Empty"
	case coordinatorv1.GroupState_GROUP_STATE_RECONCILING:
		return "Reconciling"
	case coordinatorv1.GroupState_GROUP_STATE_STABLE:
		return "Stable"
	case coordinatorv1.GroupState_GROUP_STATE_DEAD:
		return "Dead"
	}
	return "Unknown"
}
