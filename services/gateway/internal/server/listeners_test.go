package server

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// fakeLocator is a coordinator that answers LocateGroup only: as the owner
// (with its listener addresses) or naming another owner.
type fakeLocator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	id        string
	self      string            // default address
	listeners map[string]string // name -> address
	ownerID   string            // when not id: the owner it names
	ownerURL  string            // the owner's default address

	mu    sync.Mutex
	asked []string // listener of each request
}

func (f *fakeLocator) LocateGroup(_ context.Context, req *connect.Request[coordinatorv1.LocateGroupRequest]) (*connect.Response[coordinatorv1.LocateGroupResponse], error) {
	f.mu.Lock()
	f.asked = append(f.asked, req.Msg.GetListener())
	f.mu.Unlock()
	if f.ownerID != f.id {
		return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: f.ownerID, Address: f.ownerURL}), nil
	}
	addr := f.self
	if a, ok := f.listeners[req.Msg.GetListener()]; ok {
		addr = a
	}
	return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: f.id, Address: addr, ListenerResolved: true}), nil
}

func (f *fakeLocator) start(t *testing.T) string {
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(f))
	return serveOn(t, mux)
}

// TestClientListener checks advertised listeners end to end in the
// gateway: without --client-listener clients get every endpoint's default
// address; with it they get the named listener's address of storage nodes
// that have one (and the default of those that do not), and
// FindCoordinator asks the owning coordinator for its listener address when
// another instance answered first.
func TestClientListener(t *testing.T) {
	cl := newFakeCluster(t, 2)
	cl.setLeader(tp{"orders", 0}, 1, 1)
	snap := cl.snapshot(10, map[string]int32{"orders": 1})
	for _, n := range snap.GetSnapshot().GetNodes() {
		if n.GetNode().GetNodeId() == 1 {
			n.Node.Listeners = []*commonv1.Listener{{Name: "external", Address: "http://node-1.example.com:31102"}}
		}
	}

	owner := &fakeLocator{id: "b", listeners: map[string]string{"external": "http://coordinator-b.example.com:31094"}, ownerID: "b"}
	ownerURL := owner.start(t)
	owner.self = ownerURL
	other := &fakeLocator{id: "a", ownerID: "b", ownerURL: ownerURL}
	otherURL := other.start(t)

	for _, tc := range []struct {
		listener  string
		node1     string
		coordAddr string
	}{
		{"", cl.NodeURL(1), ownerURL},
		{"external", "http://node-1.example.com:31102", "http://coordinator-b.example.com:31094"},
		{"lan", cl.NodeURL(1), ownerURL}, // nobody advertises it: defaults
	} {
		t.Run("listener="+tc.listener, func(t *testing.T) {
			fc := newFakeController()
			fc.scripts <- sendThenHold(make(chan struct{}), snap)
			g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t), Coordinators: otherURL, ClientListener: tc.listener})
			waitReady(t, g)
			ctx := context.Background()
			res, err := gc.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			got := map[int32]string{}
			for _, n := range res.Msg.GetNodes() {
				got[n.GetNodeId()] = n.GetAddress()
			}
			if got[1] != tc.node1 || got[2] != cl.NodeURL(2) {
				t.Errorf("node addresses %v; want 1=%s 2=%s", got, tc.node1, cl.NodeURL(2))
			}
			fr, err := gc.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "g"}))
			if err != nil {
				t.Fatal(err)
			}
			if fr.Msg.GetCoordinatorId() != "b" || fr.Msg.GetAddress() != tc.coordAddr {
				t.Errorf("FindCoordinator = %s at %s; want b at %s", fr.Msg.GetCoordinatorId(), fr.Msg.GetAddress(), tc.coordAddr)
			}
			// The cache keeps default addresses: the gateway's own calls
			// to storage nodes stay on the internal network.
			if a := g.cache.Load().Nodes[1].GetNode().GetAddress(); a != cl.NodeURL(1) {
				t.Errorf("cached node 1 address %s; want the default %s", a, cl.NodeURL(1))
			}
		})
	}
	bad := &Config{Controllers: "http://x:1", ClientListener: "Bad_Name", ProducerIDBlockSize: 1}
	if err := bad.Validate(); err == nil {
		t.Error("a bad --client-listener passed validation")
	}
}
