package metastore

import (
	"context"
	"fmt"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/testwait"
)

func coordReg(id string, nodeID int32, inc string) *controllerv1.CoordinatorRegistration {
	return &controllerv1.CoordinatorRegistration{
		CoordinatorId: id, KafkaNodeId: nodeID, Address: "http://127.0.0.1:9094", IncarnationId: inc,
		Listeners: []*commonv1.Listener{{Name: "kafka", Address: "kafka://127.0.0.1:9098"}},
	}
}

// streamView applies every message of w to a metadata view, as a gateway
// does, and returns the coordinators it lists.
func streamView(t *testing.T, w *watchLog) []*controllerv1.CoordinatorRegistration {
	t.Helper()
	var v *metaview.View
	for _, m := range w.after(0) {
		next, err := v.Apply(m)
		if err != nil {
			t.Fatal(err)
		}
		v = next
	}
	if v == nil {
		return nil
	}
	return v.Coordinators.GetCoordinators()
}

func listed(regs []*controllerv1.CoordinatorRegistration, id string) error {
	for _, r := range regs {
		if r.GetCoordinatorId() == id {
			return nil
		}
	}
	return fmt.Errorf("listed %v", regs)
}

func notListed(regs []*controllerv1.CoordinatorRegistration, id string) error {
	if listed(regs, id) == nil {
		return fmt.Errorf("%s still listed: %v", id, regs)
	}
	return nil
}

// A coordinator registration is in the metadata stream while its lease
// lives: it appears when registered, stays while heartbeats renew it,
// and disappears when they stop (lease expiry) or when it unregisters.
func TestCoordinatorRegistrationLiveness(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, time.Second)
	w := startWatch(t, s)
	testwait.Until(t, 10*time.Second, "the first snapshot", func() error { return testwait.True(len(w.after(0)) > 0) })
	if regs := streamView(t, w); len(regs) != 0 {
		t.Fatalf("coordinators before any registered: %v", regs)
	}

	const nodeA, nodeB = MinCoordinatorNodeID + 7, MinCoordinatorNodeID + 8
	a := coordReg("coord-a", nodeA, "inc-a1")
	regA, err := s.RegisterCoordinator(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "coord-a in the stream", func() error { return listed(streamView(t, w), "coord-a") })
	// A retry of the same registration keeps its lease.
	if again, err := s.RegisterCoordinator(ctx, a); err != nil || again != regA {
		t.Fatalf("retry: %x, %v; want %x", again, err, regA)
	}
	// Another instance whose Kafka node id is held is refused.
	if _, err := s.RegisterCoordinator(ctx, coordReg("coord-x", nodeA, "inc-x")); code(err) != commonv1.Code_CODE_ALREADY_EXISTS {
		t.Fatalf("a second coordinator on a held kafka node id: %v; want ALREADY_EXISTS", err)
	}
	// Heartbeats keep it listed across several lease lengths.
	stop := time.Now().Add(3 * time.Second)
	for time.Now().Before(stop) {
		if _, err := s.CoordinatorHeartbeat(ctx, nodeA, regA); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // the heartbeat interval under test, not a wait for a condition
	}
	if err := listed(streamView(t, w), "coord-a"); err != nil {
		t.Fatalf("heartbeating coordinator dropped: %v", err)
	}
	// Without heartbeats the lease expires and the registration goes.
	testwait.Until(t, 15*time.Second, "coord-a gone after its lease", func() error { return notListed(streamView(t, w), "coord-a") })
	if _, err := s.CoordinatorHeartbeat(ctx, nodeA, regA); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Fatalf("heartbeat after expiry: %v; want NOT_FOUND", err)
	}
	// Now the id is free for another instance.
	if _, err := s.RegisterCoordinator(ctx, coordReg("coord-x", nodeA, "inc-x")); err != nil {
		t.Fatalf("a free kafka node id: %v", err)
	}

	// A restarted instance replaces its registration at once, and the old
	// incarnation's heartbeats end.
	b1 := coordReg("coord-b", nodeB, "inc-b1")
	regB1, err := s.RegisterCoordinator(ctx, b1)
	if err != nil {
		t.Fatal(err)
	}
	regB2, err := s.RegisterCoordinator(ctx, coordReg("coord-b", nodeB, "inc-b2"))
	if err != nil || regB2 == regB1 {
		t.Fatalf("restart: %x, %v (first %x)", regB2, err, regB1)
	}
	if _, err := s.CoordinatorHeartbeat(ctx, nodeB, regB1); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Fatalf("heartbeat of the replaced incarnation: %v; want NOT_FOUND", err)
	}
	testwait.Until(t, 10*time.Second, "coord-b's new incarnation in the stream", func() error {
		for _, r := range streamView(t, w) {
			if r.GetCoordinatorId() == "coord-b" && r.GetIncarnationId() == "inc-b2" {
				return nil
			}
		}
		return fmt.Errorf("listed %v", streamView(t, w))
	})
	// Unregistering the old incarnation leaves the new one; its own
	// unregistration removes it at once, long before the lease would end.
	if err := s.UnregisterCoordinator(ctx, regB1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CoordinatorHeartbeat(ctx, nodeB, regB2); err != nil {
		t.Fatalf("new incarnation after the old one unregistered: %v", err)
	}
	s.NodeTTL = time.Hour // a registration now would outlive the test: only unregistering removes it
	regB3, err := s.RegisterCoordinator(ctx, coordReg("coord-b", nodeB, "inc-b3"))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "coord-b's third incarnation in the stream", func() error { return listed(streamView(t, w), "coord-b") })
	if err := s.UnregisterCoordinator(ctx, regB3); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "coord-b gone after unregistering", func() error { return notListed(streamView(t, w), "coord-b") })

	// A fresh snapshot agrees with the deltas.
	m, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if regs := m.Snapshot().GetCoordinators().GetCoordinators(); len(regs) != 1 || regs[0].GetCoordinatorId() != "coord-x" {
		t.Fatalf("snapshot coordinators %v; want coord-x alone", regs)
	}
}

func TestRegisterCoordinatorChecks(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, time.Second)
	for name, c := range map[string]*controllerv1.CoordinatorRegistration{
		"empty id":        coordReg("", MinCoordinatorNodeID, "i"),
		"id with a space": coordReg("a b", MinCoordinatorNodeID, "i"),
		"storage node id": coordReg("c", 5, "i"),
		"bad address":     {CoordinatorId: "c", KafkaNodeId: MinCoordinatorNodeID, Address: "nope", IncarnationId: "i"},
		"no incarnation":  coordReg("c", MinCoordinatorNodeID, ""),
		"kafka not kafka://": {CoordinatorId: "c", KafkaNodeId: MinCoordinatorNodeID, Address: "http://h:1", IncarnationId: "i",
			Listeners: []*commonv1.Listener{{Name: "kafka", Address: "http://h:2"}}},
	} {
		if _, err := s.RegisterCoordinator(ctx, c); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
}
