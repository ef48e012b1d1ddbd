package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// describingGateway describes the groups of its table, on topicGateway's
// topics.
type describingGateway struct {
	*topicGateway
	groups map[string]*coordinatorv1.GroupDescription
}

func (g *describingGateway) DescribeGroup(_ context.Context, req *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
	d, ok := g.groups[req.Msg.GetGroupId()]
	if !ok {
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "no group %s", req.Msg.GetGroupId())
	}
	return connect.NewResponse(&gatewayv1.DescribeGroupResponse{Group: d}), nil
}

// ConsumerGroupDescribe: a KIP-848 group with its epochs, assignor and
// members, assignments by topic id and name; a classic group and an
// unknown one are GROUP_ID_NOT_FOUND.
func TestConsumerGroupDescribe(t *testing.T) {
	gw := &describingGateway{topicGateway: &topicGateway{}, groups: map[string]*coordinatorv1.GroupDescription{
		"orders": {GroupId: "orders", State: coordinatorv1.GroupState_GROUP_STATE_RECONCILING, GroupEpoch: 5, AssignmentEpoch: 4, Assignor: "uniform",
			Members: []*coordinatorv1.GroupMember{{MemberId: "m1", InstanceId: "i1", ClientId: "c1", ClientHost: "/10.0.0.1", RackId: "r1", MemberEpoch: 4,
				SubscribedTopicNames: []string{"t", "u"},
				Assignment:           &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}},
				TargetAssignment:     &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}, {Topic: "u", Partitions: []int32{2}}}}}}},
		"connect": {GroupId: "connect", ProtocolType: "connect", ClassicState: "Stable"},
	}}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{"orders", "connect", "nothing"}
	r, err := b.consumerGroupDescribe(context.Background(), 1, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := decoded(t, r, 1).(*kmsg.ConsumerGroupDescribeResponse)
	if len(resp.Groups) != 3 {
		t.Fatalf("%d groups answered, want 3", len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.ErrorCode != 0 || g.State != "Reconciling" || g.Epoch != 5 || g.AssignmentEpoch != 4 || g.AssignorName != "uniform" || len(g.Members) != 1 {
		t.Fatalf("orders: %+v", g)
	}
	m := g.Members[0]
	if m.MemberID != "m1" || *m.InstanceID != "i1" || *m.RackID != "r1" || m.MemberEpoch != 4 || m.ClientID != "c1" || m.MemberType != 1 || len(m.SubscribedTopics) != 2 {
		t.Fatalf("member: %+v", m)
	}
	tID, uID := topicID(idT), topicID(idU)
	if a := m.Assignment.TopicPartitions; len(a) != 1 || a[0].Topic != "t" || a[0].TopicID != tID || len(a[0].Partitions) != 2 {
		t.Fatalf("assignment %+v", a)
	}
	if a := m.TargetAssignment.TopicPartitions; len(a) != 2 || a[1].Topic != "u" || a[1].TopicID != uID || a[1].Partitions[0] != 2 {
		t.Fatalf("target assignment %+v", a)
	}
	for _, g := range resp.Groups[1:] {
		if g.ErrorCode != kerr.GroupIDNotFound.Code {
			t.Fatalf("group %s: code %d, want GROUP_ID_NOT_FOUND", g.Group, g.ErrorCode)
		}
	}
}
