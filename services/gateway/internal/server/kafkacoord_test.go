package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/serve"
)

func registered(id, connect, kafka string) *controllerv1.CoordinatorRegistration {
	r := &controllerv1.CoordinatorRegistration{CoordinatorId: id, KafkaNodeId: brokerid.Coordinator(id), Address: connect, IncarnationId: "i-" + id}
	if kafka != "" {
		r.Listeners = []*commonv1.Listener{{Name: serve.KafkaListenerName, Address: kafka}}
	}
	return r
}

// kafkaBrokers is the kafka_coordinators of the gateway's Metadata, as
// node id -> Kafka address.
func kafkaBrokers(t *testing.T, gc interface {
	Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error)
}) map[int32]string {
	t.Helper()
	res, err := gc.Metadata(context.Background(), connect.NewRequest(&gatewayv1.MetadataRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]string{}
	for _, n := range res.Msg.GetKafkaCoordinators() {
		out[n.GetNodeId()] = n.GetListeners()[0].GetAddress()
	}
	return out
}

// TestKafkaCoordinatorsFromRegistry: the gateway's Metadata lists every
// coordinator registered with the controller that has a Kafka listener,
// from the metadata stream alone (no FindCoordinator through it), drops
// one whose registration ends, still lists one without a controller once
// located, and never names a coordinator's listener under a broker id
// another live coordinator holds.
func TestKafkaCoordinatorsFromRegistry(t *testing.T) {
	cl := newFakeCluster(t, 1)
	snap := cl.snapshot(10, nil)
	a := registered("coord-a", "http://a:9094", "kafka://a:9098")
	snap.GetSnapshot().Coordinators = &controllerv1.CoordinatorRegistry{Coordinators: []*controllerv1.CoordinatorRegistration{
		a, registered("coord-nokafka", "http://n:9094", ""),
	}}
	// The owner of every group is "b", which has no controller: it is not
	// in the registry.
	owner := &fakeLocator{id: "b", listeners: map[string]string{serve.KafkaListenerName: "kafka://b:9098"}, ownerID: "b"}
	owner.self = owner.start(t)
	release := make(chan struct{})
	fc := newFakeController()
	fc.scripts <- sendThenHold(release, snap)
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t), Coordinators: owner.self})
	waitReady(t, g)

	if got := kafkaBrokers(t, gc); len(got) != 1 || got[a.KafkaNodeId] != "kafka://a:9098" {
		t.Fatalf("kafka coordinators %v; want coord-a alone, from the registry", got)
	}
	// b, without a controller, is listed once located, as before.
	ctx := context.Background()
	fr, err := gc.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "g", Listener: serve.KafkaListenerName}))
	if err != nil || fr.Msg.GetAddress() != "kafka://b:9098" {
		t.Fatalf("FindCoordinator: %v %v", fr, err)
	}
	bID := brokerid.Coordinator("b")
	if got := kafkaBrokers(t, gc); len(got) != 2 || got[bID] != "kafka://b:9098" {
		t.Fatalf("kafka coordinators %v; want coord-a and b", got)
	}

	// coord-a's registration ends, and another live coordinator registers
	// under b's broker id (a hash collision): b is no longer named by it.
	x := registered("coord-x", "http://x:9094", "kafka://x:9098")
	x.KafkaNodeId = bID
	snap2 := cl.snapshot(20, nil)
	snap2.GetSnapshot().Coordinators = &controllerv1.CoordinatorRegistry{Coordinators: []*controllerv1.CoordinatorRegistration{x}}
	fc.scripts <- sendThenHold(make(chan struct{}), snap2)
	close(release) // the stream breaks; the gateway reconnects and gets snap2
	waitFor(t, "the second snapshot", func() bool { return g.cache.Load().Version == 20 })
	if got := kafkaBrokers(t, gc); len(got) != 1 || got[bID] != "kafka://x:9098" {
		t.Fatalf("kafka coordinators %v; want coord-x alone under %d", got, bID)
	}
	fr, err = gc.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "g", Listener: serve.KafkaListenerName}))
	if err != nil || fr.Msg.GetCoordinatorId() != "b" || fr.Msg.GetAddress() != owner.self {
		t.Fatalf("FindCoordinator with b's broker id held: %v %v; want b's default address %s", fr, err, owner.self)
	}
	if got := kafkaBrokers(t, gc); len(got) != 1 {
		t.Fatalf("kafka coordinators %v after the collision; want coord-x alone", got)
	}
}
