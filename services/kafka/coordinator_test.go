package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/serve"
)

// coordGateway answers Metadata with storage nodes and the coordinators
// it was given, and FindCoordinator with owner for every group.
type coordGateway struct {
	Gateway
	nodes, coords []*commonv1.Node
	ownerID       string
	ownerAddr     string
	asked         []string // listeners FindCoordinator was asked for
}

func (g *coordGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{ClusterId: "c", Nodes: g.nodes, KafkaCoordinators: g.coords}), nil
}

func (g *coordGateway) FindCoordinator(_ context.Context, req *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	g.asked = append(g.asked, req.Msg.GetListener())
	return connect.NewResponse(&gatewayv1.FindCoordinatorResponse{CoordinatorId: g.ownerID, Address: g.ownerAddr}), nil
}

func kafkaNode(id int32, addr string) *commonv1.Node {
	return &commonv1.Node{NodeId: id, Listeners: []*commonv1.Listener{{Name: serve.KafkaListenerName, Address: serve.KafkaScheme + addr}}}
}

func TestFindCoordinatorNamesCoordinator(t *testing.T) {
	const owner = "coordinator-0"
	cid := brokerid.Coordinator(owner)
	gw := &coordGateway{
		nodes:     []*commonv1.Node{kafkaNode(1, "s1:9001"), kafkaNode(2, "s2:9002")},
		coords:    []*commonv1.Node{kafkaNode(cid, "coord:9098")},
		ownerID:   owner,
		ownerAddr: serve.KafkaScheme + "coord:9098",
	}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	find := func(version int16) *kmsg.FindCoordinatorResponse {
		t.Helper()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = "g", []string{"g"}
		r, err := b.findCoordinator(ctx, version, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.FindCoordinatorResponse)
	}
	// v4 (keys) and v3 (one key, top-level fields) both name the
	// coordinator's Kafka listener, asked for under the listener "kafka".
	if r := find(4); len(r.Coordinators) != 1 || r.Coordinators[0].ErrorCode != 0 || r.Coordinators[0].NodeID != cid || r.Coordinators[0].Host != "coord" || r.Coordinators[0].Port != 9098 {
		t.Fatalf("v4: %+v", r.Coordinators)
	}
	if r := find(3); r.ErrorCode != 0 || r.NodeID != cid || r.Host != "coord" || r.Port != 9098 {
		t.Fatalf("v3: %+v", r)
	}
	if gw.asked[0] != serve.KafkaListenerName {
		t.Errorf("asked for listener %q", gw.asked[0])
	}
	// Metadata lists the coordinator as a broker under that id, after the
	// storage nodes; the controller stays the lowest storage node.
	mreq := kmsg.NewPtrMetadataRequest()
	mr, err := b.metadata(ctx, 12, mreq)
	if err != nil {
		t.Fatal(err)
	}
	md := mr.(*kmsg.MetadataResponse)
	if len(md.Brokers) != 3 || md.Brokers[2].NodeID != cid || md.Brokers[2].Host != "coord" || md.Brokers[2].Port != 9098 || md.ControllerID != 1 {
		t.Fatalf("metadata brokers %+v, controller %d", md.Brokers, md.ControllerID)
	}

	// An owner without a Kafka listener answers its Connect address: the
	// storage node chosen by the group's hash, as before.
	gw.ownerAddr, gw.coords = "http://coord:9094", nil
	want, _ := groupBroker(brokers(gw.nodes), "g")
	if r := find(4); r.Coordinators[0].NodeID != want.id || r.Coordinators[0].Host != want.host {
		t.Fatalf("fallback: %+v, want %+v", r.Coordinators, want)
	}
	// So does a coordinator whose broker id a storage node holds; and
	// Metadata does not list it twice.
	gw.ownerAddr = serve.KafkaScheme + "coord:9098"
	gw.nodes = append(gw.nodes, kafkaNode(cid, "s3:9003"))
	gw.coords = []*commonv1.Node{kafkaNode(cid, "coord:9098")}
	want, _ = groupBroker(brokers(gw.nodes), "g")
	if r := find(4); r.Coordinators[0].NodeID != want.id || r.Coordinators[0].Host != want.host {
		t.Fatalf("collision: %+v, want %+v", r.Coordinators, want)
	}
	mr, _ = b.metadata(ctx, 12, mreq)
	if md := mr.(*kmsg.MetadataResponse); len(md.Brokers) != 3 || md.Brokers[2].Host != "s3" {
		t.Fatalf("collision metadata %+v", md.Brokers)
	}
}
