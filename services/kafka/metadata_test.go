package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/serve"
)

// countingDownGateway is a downGateway that counts the Metadata calls
// it fails, and whose FindCoordinator, when locate is set, names an
// unregistered coordinator.
type countingDownGateway struct {
	downGateway
	metadataCalls int
	locate        *gatewayv1.FindCoordinatorResponse
}

func (g *countingDownGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	g.metadataCalls++
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:9092: connection refused"))
}

func (g *countingDownGateway) FindCoordinator(context.Context, *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	if g.locate == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	}
	return connect.NewResponse(g.locate), nil
}

func viewNode(id int32, state controllerv1.NodeState) *controllerv1.NodeStatus {
	return &controllerv1.NodeStatus{State: state, Node: &commonv1.Node{NodeId: id, Address: "http://127.0.0.1:1",
		Listeners: []*commonv1.Listener{{Name: serve.KafkaListenerName, Address: serve.KafkaScheme + fmt.Sprintf("127.0.0.1:%d", 9130+id)}}}}
}

// TestMetadataFromTheView: a bridge with a metadata view answers Metadata
// and DescribeCluster from it while the gateway is down, and follows the
// view as it changes (a leader move); it lists the live brokers, the
// registered coordinator and one FindCoordinator located, the topics the
// principal may describe, and refuses a named one it may not. Before the
// view's first snapshot the gateway is asked.
func TestMetadataFromTheView(t *testing.T) {
	topic := func(name string, leader, epoch int32) *commonv1.TopicMetadata {
		return &commonv1.TopicMetadata{Name: name, TopicId: "00000000-0000-0000-0000-00000000000" + name[:1],
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: leader, LeaderEpoch: epoch, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}}}}
	}
	v := &metaview.View{
		Version: 7, ClusterID: "cluster-1",
		Nodes: map[int32]*controllerv1.NodeStatus{
			1: viewNode(1, controllerv1.NodeState_NODE_STATE_ALIVE), 2: viewNode(2, controllerv1.NodeState_NODE_STATE_ALIVE),
			3: viewNode(3, controllerv1.NodeState_NODE_STATE_DEAD),
		},
		Topics: map[string]*commonv1.TopicMetadata{"granted": topic("granted", 1, 4), "hidden": topic("hidden", 2, 1)},
		Coordinators: &controllerv1.CoordinatorRegistry{Coordinators: []*controllerv1.CoordinatorRegistration{{
			CoordinatorId: "c1", KafkaNodeId: brokerid.Coordinator("c1"),
			Listeners: []*commonv1.Listener{{Name: serve.KafkaListenerName, Address: serve.KafkaScheme + "127.0.0.1:9106"}},
		}}},
	}
	var current *metaview.View
	gw := &countingDownGateway{locate: &gatewayv1.FindCoordinatorResponse{CoordinatorId: "c2", Address: serve.KafkaScheme + "127.0.0.1:9206"}}
	g, ctx := readerGuard(t)
	// The reader may read topic granted, and describe group g.
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		{Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Read),
			ResourceType: commonv1.AclResourceType(acl.Topic), ResourceName: "granted"},
		{Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Describe),
			ResourceType: commonv1.AclResourceType(acl.Group), ResourceName: "g"},
	}})
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g, View: func() *metaview.View { return current }})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(names ...string) *kmsg.MetadataResponse {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		for _, n := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, rt)
		}
		r, err := b.metadata(ctx, 12, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.MetadataResponse)
	}
	brokerIDs := func(r *kmsg.MetadataResponse) []int32 {
		var ids []int32
		for _, br := range r.Brokers {
			ids = append(ids, br.NodeID)
		}
		return ids
	}

	// No snapshot yet: the gateway is asked (and is down).
	current = &metaview.View{}
	if _, err := b.clusterMetadata(ctx, nil); err == nil || gw.metadataCalls != 1 {
		t.Fatalf("before the first snapshot: err %v, %d gateway calls; want the gateway asked", err, gw.metadataCalls)
	}

	current = v
	// FindCoordinator through the bridge locates c2, which is not
	// registered: Metadata lists it from then on.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	r, err := b.findCoordinator(ctx, 3, fc)
	if err != nil {
		t.Fatal(err)
	}
	if r := r.(*kmsg.FindCoordinatorResponse); r.ErrorCode != 0 || r.NodeID != brokerid.Coordinator("c2") {
		t.Fatalf("find coordinator: %+v, want c2", r)
	}
	all := ask()
	if *all.ClusterID != "cluster-1" || all.ControllerID != 1 {
		t.Fatalf("cluster %v controller %d", *all.ClusterID, all.ControllerID)
	}
	want := []int32{1, 2, brokerid.Coordinator("c1"), brokerid.Coordinator("c2")}
	slices.Sort(want[2:])
	if got := brokerIDs(all); !slices.Equal(got, want) {
		t.Fatalf("brokers %v, want the live storage nodes and both coordinators %v", got, want)
	}
	if len(all.Topics) != 1 || *all.Topics[0].Topic != "granted" || all.Topics[0].Partitions[0].Leader != 1 {
		t.Fatalf("every topic: %+v, want granted alone, led by 1", all.Topics)
	}
	named := ask("granted", "hidden", "missing")
	codes := map[string]int16{}
	for _, tp := range named.Topics {
		codes[*tp.Topic] = tp.ErrorCode
	}
	if codes["granted"] != 0 || codes["hidden"] != kerr.TopicAuthorizationFailed.Code || codes["missing"] != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("named topics: %v (a topic the reader may not describe is refused whether it exists or not)", codes)
	}
	if gw.metadataCalls != 1 {
		t.Fatalf("the gateway was asked for metadata %d times after the view's snapshot", gw.metadataCalls-1)
	}

	// The leader moves: the next answer follows the view.
	moved := *v
	moved.Version = 8
	moved.Topics = map[string]*commonv1.TopicMetadata{"granted": topic("granted", 2, 5), "hidden": v.Topics["hidden"]}
	current = &moved
	if p := ask("granted").Topics[0].Partitions[0]; p.Leader != 2 || p.LeaderEpoch != 5 {
		t.Fatalf("after the move: leader %d epoch %d, want 2 and 5", p.Leader, p.LeaderEpoch)
	}
	dc, err := b.describeCluster(ctx, 0, kmsg.NewPtrDescribeClusterRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r := dc.(*kmsg.DescribeClusterResponse); r.ErrorCode != 0 || r.ClusterID != "cluster-1" || len(r.Brokers) != 4 {
		t.Fatalf("describe cluster: %+v", r)
	}
}
