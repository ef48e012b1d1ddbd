package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
)

// clusterGuard is readerGuard with User:admin allowed everything on the
// cluster and describe on every topic; it returns the reader's context
// and the admin's.
func clusterGuard(t *testing.T) (*guard.Guard, context.Context, context.Context) {
	t.Helper()
	g, reader := readerGuard(t)
	st := g.Applied()
	st.Acls = append(st.Acls, &commonv1.AclBinding{
		Principal: "User:admin", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.All),
		ResourceType: commonv1.AclResourceType(acl.Cluster), ResourceName: acl.ClusterName,
	}, &commonv1.AclBinding{
		Principal: "User:admin", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Describe),
		ResourceType: commonv1.AclResourceType(acl.Topic), ResourceName: acl.AnyResource,
	})
	g.Apply(st)
	return g, reader, authn.NewContext(context.Background(), authn.Info{Principal: acl.User("admin"), Method: authn.MethodToken})
}

// electGateway holds topic t: partition 0 led by its preferred replica 1
// at epoch 3, partition 1 led by 2 at epoch 4 though 1 is preferred, and
// partition 2 whose preferred replica cannot lead. Its ElectLeaders
// elects as the controller does and records the calls.
type electGateway struct {
	fakeGateway
	asked []*gatewayv1.ElectLeadersRequest
}

func (g *electGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{Topics: []*commonv1.TopicMetadata{{Name: "t", Partitions: []*commonv1.PartitionMetadata{
		{Partition: 0, LeaderId: 1, LeaderEpoch: 3, Replicas: []int32{1, 2}},
		{Partition: 1, LeaderId: 2, LeaderEpoch: 4, Replicas: []int32{1, 2}},
		{Partition: 2, LeaderId: 2, LeaderEpoch: 7, Replicas: []int32{3, 2}},
	}}}}), nil
}

func (g *electGateway) ElectLeaders(_ context.Context, req *connect.Request[gatewayv1.ElectLeadersRequest]) (*connect.Response[gatewayv1.ElectLeadersResponse], error) {
	g.asked = append(g.asked, proto.Clone(req.Msg).(*gatewayv1.ElectLeadersRequest))
	parts := req.Msg.GetPartitions()
	if len(parts) == 0 { // every partition needing it; 0 raced to its preferred leader meanwhile
		parts = []*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}
	}
	out := &gatewayv1.ElectLeadersResponse{}
	for _, tp := range parts {
		for _, p := range tp.GetPartitions() {
			r := &controllerv1.ElectLeadersResult{Topic: tp.GetTopic(), Partition: p, LeaderId: -1}
			switch p {
			case 0:
				r.LeaderId, r.LeaderEpoch = 1, 3
			case 1:
				r.LeaderId, r.LeaderEpoch = 1, 5
			case 2:
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "preferred replica 3 is not alive")
			default:
				r.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "partition t-%d not found", p)
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	return connect.NewResponse(out), nil
}

func electRequest(typ int8, topics map[string][]int32) *kmsg.ElectLeadersRequest {
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = typ
	if topics == nil {
		return req
	}
	req.Topics = []kmsg.ElectLeadersRequestTopic{}
	for _, name := range []string{"t", "u"} {
		if ps, ok := topics[name]; ok {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = name, ps
			req.Topics = append(req.Topics, rt)
		}
	}
	return req
}

// electCodes flattens an answer to "topic/partition" -> code.
func electCodes(t *testing.T, resp kmsg.Response, version int16) (int16, map[string]int16) {
	t.Helper()
	r := decoded(t, resp, version).(*kmsg.ElectLeadersResponse)
	out := map[string]int16{}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			out[rt.Topic+"/"+string(rune('0'+rp.Partition))] = rp.ErrorCode
		}
	}
	return r.ErrorCode, out
}

// TestElectLeadersMapping: a named partition already led by the replica
// the election would choose is ELECTION_NOT_NEEDED, one elected none, one
// whose preferred replica cannot lead PREFERRED_LEADER_NOT_AVAILABLE
// (ELIGIBLE_LEADERS_NOT_AVAILABLE for an unclean election), an unknown one
// UNKNOWN_TOPIC_OR_PARTITION; null topics answer only the partitions an
// election changed; an empty partition list elects nothing (the
// controller would read it as every partition); an unknown election type
// is INVALID_REQUEST.
func TestElectLeadersMapping(t *testing.T) {
	g, _, admin := clusterGuard(t)
	gw := &electGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.electLeaders(admin, 2, electRequest(0, map[string][]int32{"t": {0, 1, 2, 9}}))
	if err != nil {
		t.Fatal(err)
	}
	top, got := electCodes(t, resp, 2)
	want := map[string]int16{"t/0": kerr.ElectionNotNeeded.Code, "t/1": 0, "t/2": kerr.PreferredLeaderNotAvailable.Code, "t/9": kerr.UnknownTopicOrPartition.Code}
	if top != 0 || len(got) != len(want) {
		t.Fatalf("top %d, partitions %v, want none and %v", top, got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %d, want %d", k, got[k], w)
		}
	}
	if typ := gw.asked[0].GetElectionType(); typ != controllerv1.ElectionType_ELECTION_TYPE_PREFERRED {
		t.Errorf("asked %v", typ)
	}

	resp, _ = b.electLeaders(admin, 1, electRequest(1, map[string][]int32{"t": {2}}))
	if _, got := electCodes(t, resp, 1); got["t/2"] != kerr.EligibleLeadersNotAvailable.Code {
		t.Errorf("unclean: %v", got)
	}
	if typ := gw.asked[1].GetElectionType(); typ != controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN {
		t.Errorf("asked %v", typ)
	}

	resp, _ = b.electLeaders(admin, 2, electRequest(0, nil))
	if _, got := electCodes(t, resp, 2); len(got) != 1 || got["t/1"] != 0 {
		t.Errorf("every partition: %v, want t/1 alone", got)
	}
	if len(gw.asked[2].GetPartitions()) != 0 {
		t.Errorf("every partition asked as %v", gw.asked[2].GetPartitions())
	}

	n := len(gw.asked)
	resp, _ = b.electLeaders(admin, 2, electRequest(0, map[string][]int32{"u": {}}))
	if _, got := electCodes(t, resp, 2); len(got) != 0 || len(gw.asked) != n {
		t.Errorf("empty partition list: %v, %d calls", got, len(gw.asked)-n)
	}

	resp, _ = b.electLeaders(admin, 1, electRequest(7, map[string][]int32{"t": {1}}))
	if top, got := electCodes(t, resp, 1); top != kerr.InvalidRequest.Code || got["t/1"] != kerr.InvalidRequest.Code || len(gw.asked) != n {
		t.Errorf("election type 7: top %d, %v", top, got)
	}
}

// TestElectLeadersNeedsClusterAlter: without alter on the cluster the
// answer is CLUSTER_AUTHORIZATION_FAILED at the top and on every
// partition, nothing elected; at v0, which has no top-level code, a
// request for every partition closes the connection.
func TestElectLeadersNeedsClusterAlter(t *testing.T) {
	g, reader, _ := clusterGuard(t)
	gw := &electGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.electLeaders(reader, 2, electRequest(0, map[string][]int32{"t": {0, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	top, got := electCodes(t, resp, 2)
	if top != kerr.ClusterAuthorizationFailed.Code || got["t/0"] != kerr.ClusterAuthorizationFailed.Code || got["t/1"] != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("top %d, %v", top, got)
	}
	if resp, err := b.electLeaders(reader, 0, electRequest(0, nil)); resp != nil || err == nil {
		t.Fatalf("v0 for every partition: %v %v, want no answer", resp, err)
	}
	if len(gw.asked) != 0 {
		t.Fatalf("refused, yet the controller was asked %v", gw.asked)
	}

}
