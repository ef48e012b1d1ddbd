package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/tests/harness"
)

// natProxy stands for the address a node has on another network (a
// NodePort or a NAT'd public address): a TCP forwarder on a port of its
// own to the node's API. It counts the connections it carried.
type natProxy struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newNATProxy(t *testing.T, target string) *natProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &natProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", target, 2*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *natProxy) URL() string { return "http://" + p.ln.Addr().String() }

// TestAdvertisedListeners runs storage nodes and a coordinator that
// advertise an "external" listener (a forwarder standing for their address
// on another network) besides their default one, and two gateways: one
// without --client-listener and one with --client-listener external. A
// client of each gateway must be handed the addresses of its own network —
// metadata, FindCoordinator — and its produce, fetch and group traffic must
// flow there: through the forwarders for the external client, never for
// the internal one.
func TestAdvertisedListeners(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	proxies := map[string]*natProxy{} // "storage-1", "coordinator-1"
	forward := func(name string) func(int, string) []string {
		return func(id int, api string) []string {
			p := newNATProxy(t, api)
			mu.Lock()
			proxies[fmt.Sprintf("%s-%d", name, id)] = p
			mu.Unlock()
			return []string{"--advertise-listeners", "external=" + p.URL()}
		}
	}
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3, StorageArgsFor: forward("storage")})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{CoordinatorArgsFor: forward("coordinator")})
	ctx := harness.Deadline(t, 2*time.Minute)

	// A second gateway, for clients on the external network.
	ports, err := harness.FreePorts(t, 2)
	if err != nil {
		t.Fatal(err)
	}
	extAPI, extAdmin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	ext := harness.Start(t, "gateway-external", launch.Gateway{
		Process: launch.Process{
			Bin:    harness.Binary(t, "github.com/strata-mq/strata/services/gateway/cmd/strata-gateway"),
			Listen: extAPI, AdminListen: extAdmin, LogFormat: "text",
		},
		Controllers:    c.ControllerURLs(),
		Coordinators:   []string{gs.Coordinators[0].URL},
		ClientListener: "external",
	}.Argv())
	harness.WaitReadyz(ctx, t, "http://"+extAdmin, ext)
	extURL, intURL := "http://"+extAPI, gs.Gateway.URL

	c.CreateTopic(ctx, "net", 3, 3, nil)
	c.WaitFullISR(ctx, "net", 3)

	// Metadata and FindCoordinator answer with each network's addresses.
	for _, tc := range []struct {
		gateway string
		node    func(id int) string
		coord   string
	}{
		{intURL, func(id int) string { return c.Storage(id).URL }, gs.Coordinators[0].URL},
		{extURL, func(id int) string { return proxies[fmt.Sprintf("storage-%d", id)].URL() }, proxies["coordinator-1"].URL()},
	} {
		gw := gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), tc.gateway)
		md, err := gw.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"net"}}))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range md.Msg.GetNodes() {
			if want := tc.node(int(n.GetNodeId())); n.GetAddress() != want {
				t.Errorf("gateway %s: node %d at %s, want %s", tc.gateway, n.GetNodeId(), n.GetAddress(), want)
			}
		}
		fc, err := gw.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "net-group"}))
		if err != nil {
			t.Fatal(err)
		}
		if fc.Msg.GetAddress() != tc.coord {
			t.Errorf("gateway %s: coordinator at %s, want %s", tc.gateway, fc.Msg.GetAddress(), tc.coord)
		}
	}

	through := func() int64 {
		var n int64
		for _, p := range proxies {
			n += p.conns.Load()
		}
		return n
	}
	produce := func(gateway, prefix string) {
		p, err := client.NewProducer(gateway, client.WithAcks(client.AcksAll))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var rs []*client.Record
		for i := range 60 {
			rs = append(rs, &client.Record{Topic: "net", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		}
		if err := p.ProduceSync(ctx, rs...); err != nil {
			t.Fatalf("produce through %s: %v", gateway, err)
		}
	}

	// The internal client never touches the external addresses.
	produce(intURL, "int")
	if n := through(); n != 0 {
		t.Fatalf("the internal client made %d connections to external addresses", n)
	}

	// The external client's produce and group consume go there; each
	// storage node leads a partition, so each forwarder carries traffic.
	produce(extURL, "ext")
	for _, id := range []int{1, 2, 3} {
		if proxies[fmt.Sprintf("storage-%d", id)].conns.Load() == 0 {
			t.Errorf("no connection through storage-%d's external address", id)
		}
	}
	g, err := client.NewGroupConsumer(extURL, "net-group", []string{"net"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	seen := map[string]bool{}
	for len(seen) < 120 {
		recs, err := g.Poll(ctx)
		if err != nil {
			t.Fatalf("poll through the external gateway after %d records: %v", len(seen), err)
		}
		for _, r := range recs {
			seen[string(r.Value)] = true
		}
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if proxies["coordinator-1"].conns.Load() == 0 {
		t.Error("the external group consumer never reached the coordinator's external address")
	}
}
