package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember/etcdtest"
)

type member struct {
	c      *Controller
	srv    *serve.Server
	client controllerv1connect.ControllerServiceClient
}

func startQuorum(t *testing.T, n int) []*member {
	t.Helper()
	peers := etcdtest.TestPeers(t, n)
	out := make([]*member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				errs[i] = err
				return
			}
			url := "http://" + ln.Addr().String()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// Leases well above the 300ms heartbeat cadence plus the time
			// a heartbeat takes when etcd is slow on a loaded machine (its
			// requests then take up to a second): a live node or
			// controller must not expire.
			c, err := Start(ctx, Config{
				Member:             etcdmember.Config{Name: fmt.Sprint(i + 1), Dir: t.TempDir(), Peers: peers},
				Address:            url,
				NodeSessionTimeout: 6 * time.Second,
				SessionTTL:         6 * time.Second,
				ReconcileInterval:  300 * time.Millisecond,
				WatchKeepAlive:     time.Second,
			})
			if err != nil {
				ln.Close()
				errs[i] = err
				return
			}
			mux := httpMux(c)
			out[i] = &member{c: c, srv: serve.StartServer(ln, mux),
				client: controllerv1connect.NewControllerServiceClient(serve.NewHTTPClient(), url)}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range out {
			if m != nil {
				m.srv.Close()
				m.c.Close()
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, timeout, what, func() error { return testwait.True(cond()) })
}

func activeOf(ms []*member) (active []*member, agreed string) {
	ids := map[string]bool{}
	for _, m := range ms {
		if m.c.IsActive() {
			active = append(active, m)
		}
		ids[m.c.Active()] = true
	}
	if len(ids) == 1 {
		for id := range ids {
			agreed = id
		}
	}
	return active, agreed
}

func TestQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ms := startQuorum(t, 3)

	var act *member
	eventually(t, 30*time.Second, "one active controller everyone agrees on", func() bool {
		a, agreed := activeOf(ms)
		if len(a) == 1 && agreed == a[0].c.ID() {
			act = a[0]
			return true
		}
		return false
	})
	var others []*member
	for _, m := range ms {
		if m != act {
			others = append(others, m)
		}
		if err := m.c.Ready(ctx); err != nil {
			t.Errorf("controller %s not ready: %v", m.c.ID(), err)
		}
	}

	// Three storage nodes, registered through a non-active controller and
	// kept alive by heartbeats through another.
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		resp, err := others[0].client.RegisterNode(ctx, connect.NewRequest(&controllerv1.RegisterNodeRequest{
			NodeId: id, Address: fmt.Sprintf("http://127.0.0.1:%d", 9100+id), IncarnationId: fmt.Sprint("inc-", id),
		}))
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = resp.Msg.NodeEpoch
	}
	var hbMu sync.Mutex
	beating := map[int32]bool{1: true, 2: true, 3: true}
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go func() {
		for hbCtx.Err() == nil {
			hbMu.Lock()
			for id, on := range beating {
				if on {
					others[1].client.Heartbeat(hbCtx, connect.NewRequest(&controllerv1.HeartbeatRequest{NodeId: id, NodeEpoch: epochs[id]}))
				}
			}
			hbMu.Unlock()
			time.Sleep(300 * time.Millisecond)
		}
	}()

	// The metadata stream from a non-active controller: snapshot first.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stream, err := others[1].client.WatchMetadata(wctx, connect.NewRequest(&controllerv1.WatchMetadataRequest{NodeId: -1}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetSnapshot() == nil {
		t.Fatalf("first message is not a snapshot: %v %v", stream.Msg(), stream.Err())
	}
	if got := len(stream.Msg().GetSnapshot().GetNodes()); got != 3 {
		t.Fatalf("snapshot has %d nodes", got)
	}
	lastVersion := stream.Msg().Version
	msgs := make(chan *controllerv1.WatchMetadataResponse, 100)
	go func() {
		defer close(msgs)
		for stream.Receive() {
			msgs <- stream.Msg()
		}
	}()
	nextDelta := func(what string, match func(*controllerv1.MetadataDelta) bool) *controllerv1.MetadataDelta {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("stream ended waiting for %s: %v", what, stream.Err())
				}
				if m.Version < lastVersion {
					t.Fatalf("version went back: %d < %d", m.Version, lastVersion)
				}
				lastVersion = m.Version
				if d := m.GetDelta(); d != nil && match(d) {
					return d
				}
			case <-timeout:
				t.Fatalf("no delta for %s", what)
			}
		}
	}

	// A topic created through a non-active member is visible from all.
	cr, err := others[0].client.CreateTopic(ctx, connect.NewRequest(&controllerv1.CreateTopicRequest{Name: "events", Partitions: 1, ReplicationFactor: 3}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		resp, err := m.client.DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{Names: []string{"events"}}))
		if err != nil || resp.Msg.Topics[0].TopicId != cr.Msg.Topic.TopicId {
			t.Fatalf("controller %s: %v %v", m.c.ID(), resp, err)
		}
	}
	d := nextDelta("topic create", func(d *controllerv1.MetadataDelta) bool { return len(d.Topics) == 1 })
	if d.Topics[0].Name != "events" || len(d.Topics[0].Partitions) != 1 {
		t.Fatalf("create delta %v", d)
	}
	p0 := d.Topics[0].Partitions[0]

	// The leader's node stops heartbeating: the active controller elects
	// another leader and the stream carries the change.
	hbMu.Lock()
	beating[p0.LeaderId] = false
	hbMu.Unlock()
	d = nextDelta("leader change", func(d *controllerv1.MetadataDelta) bool {
		for _, pc := range d.Partitions {
			if pc.Topic == "events" && pc.Partition.LeaderId != p0.LeaderId {
				return true
			}
		}
		return false
	})
	for _, pc := range d.Partitions {
		if pc.Partition.LeaderEpoch != p0.LeaderEpoch+1 || pc.Partition.LeaderId < 0 {
			t.Fatalf("leader change %v", pc)
		}
	}

	// Closing the active controller elects another within seconds.
	act.srv.Close()
	act.c.Close()
	eventually(t, 30*time.Second, "a new active controller", func() bool {
		a, agreed := activeOf(others)
		return len(a) == 1 && agreed == a[0].c.ID()
	})
	// The survivors still serve writes.
	if _, err := others[1].client.CreateTopic(ctx, connect.NewRequest(&controllerv1.CreateTopicRequest{Name: "after", Partitions: 2, ReplicationFactor: 2})); err != nil {
		t.Fatal(err)
	}
	dc, err := others[0].client.DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(dc.Msg.Controllers.Members) != 3 || dc.Msg.Controllers.ActiveControllerId == act.c.ID() || len(dc.Msg.Nodes) != 3 {
		t.Fatalf("describe cluster %v", dc.Msg)
	}
}
