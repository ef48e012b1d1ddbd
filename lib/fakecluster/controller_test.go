package fakecluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/testwait"
)

// The controller's fencing rules on AlterPartition: the sender's node
// epoch, leadership, leader and partition epochs, and added ISR members at
// their current node epoch.
func TestAlterPartitionFencing(t *testing.T) {
	c := New(0)
	defer c.Close()
	ctl := controllerv1connect.NewControllerServiceClient(http.DefaultClient, c.ControllerURL())
	ctx := context.Background()
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		r, err := ctl.RegisterNode(ctx, connect.NewRequest(&controllerv1.RegisterNodeRequest{NodeId: id, Address: fmt.Sprintf("http://n%d", id), IncarnationId: fmt.Sprint(id)}))
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = r.Msg.GetNodeEpoch()
	}
	c.SetTopic(&commonv1.TopicMetadata{Name: "t", TopicId: "t1", Partitions: []*commonv1.PartitionMetadata{
		{Partition: 0, LeaderId: 1, LeaderEpoch: 3, PartitionEpoch: 5, Replicas: []int32{1, 2, 3}, Isr: []int32{1}},
	}})
	item := func(mod func(*controllerv1.AlterPartitionItem)) *controllerv1.AlterPartitionItem {
		it := &controllerv1.AlterPartitionItem{Topic: "t", Partition: 0, LeaderEpoch: 3, PartitionEpoch: 5, NewIsr: []int32{1, 2},
			NewIsrMembers: []*controllerv1.IsrMember{{NodeId: 2, NodeEpoch: epochs[2]}}}
		if mod != nil {
			mod(it)
		}
		return it
	}
	tests := []struct {
		name   string
		node   int32
		epoch  int64
		item   *controllerv1.AlterPartitionItem
		reason commonv1.Reason
	}{
		{"not the leader", 2, epochs[2], item(nil), commonv1.Reason_REASON_NOT_LEADER},
		{"stale leader epoch", 1, epochs[1], item(func(it *controllerv1.AlterPartitionItem) { it.LeaderEpoch = 2 }), commonv1.Reason_REASON_FENCED_LEADER_EPOCH},
		{"stale partition epoch", 1, epochs[1], item(func(it *controllerv1.AlterPartitionItem) { it.PartitionEpoch = 4 }), commonv1.Reason_REASON_STALE_PARTITION_EPOCH},
		{"not a replica", 1, epochs[1], item(func(it *controllerv1.AlterPartitionItem) { it.NewIsr = []int32{1, 4} }), commonv1.Reason_REASON_INELIGIBLE_REPLICA},
		{"added member at an old node epoch", 1, epochs[1], item(func(it *controllerv1.AlterPartitionItem) { it.NewIsrMembers[0].NodeEpoch-- }), commonv1.Reason_REASON_INELIGIBLE_REPLICA},
		{"accepted", 1, epochs[1], item(nil), commonv1.Reason_REASON_UNSPECIFIED},
	}
	for _, tc := range tests {
		r, err := ctl.AlterPartition(ctx, connect.NewRequest(&controllerv1.AlterPartitionRequest{NodeId: tc.node, NodeEpoch: tc.epoch, Partitions: []*controllerv1.AlterPartitionItem{tc.item}}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := r.Msg.GetPartitions()[0].GetError().GetReason(); got != tc.reason {
			t.Errorf("%s: reason %v; want %v", tc.name, got, tc.reason)
		}
	}
	if p := c.Partition("t", 0); c.Alters() != 1 || p.GetPartitionEpoch() != 6 || len(p.GetIsr()) != 2 {
		t.Errorf("after one accepted change: alters %d, partition %v", c.Alters(), p)
	}
	if _, err := ctl.AlterPartition(ctx, connect.NewRequest(&controllerv1.AlterPartitionRequest{NodeId: 1, NodeEpoch: epochs[1] - 1})); connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("stale node epoch: %v; want ABORTED", err)
	}
	f := c.AddFault(&Fault{Method: "Heartbeat", Partition: -1, Code: connect.CodeUnavailable, Count: 1})
	if _, err := ctl.Heartbeat(ctx, connect.NewRequest(&controllerv1.HeartbeatRequest{NodeId: 1, NodeEpoch: epochs[1]})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("heartbeat with a fault: %v; want UNAVAILABLE", err)
	}
	if _, err := ctl.Heartbeat(ctx, connect.NewRequest(&controllerv1.HeartbeatRequest{NodeId: 1, NodeEpoch: epochs[1]})); err != nil || c.Fired(f) != 1 {
		t.Errorf("heartbeat after the fault's budget: %v, fired %d", err, c.Fired(f))
	}
}

// The fake controller's stream keeps a metaview.Cache equal to what the
// fake gateway answers, deletions and re-creations included.
func TestWatchMetadataFollowsTheCluster(t *testing.T) {
	c := New(2)
	defer c.Close()
	cache := metaview.NewCache()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		metaview.Watch(ctx, cache, metaview.WatchConfig{
			Controllers: []controllerv1connect.ControllerServiceClient{controllerv1connect.NewControllerServiceClient(http.DefaultClient, c.ControllerURL())},
			NodeID:      metaview.NotANode, Logger: slog.New(slog.DiscardHandler),
		})
	}()
	defer func() { cancel(); <-done }()
	gw := gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, c.GatewayURL())
	if err := c.CreateTopic("a", 2, 2); err != nil {
		t.Fatal(err)
	}
	c.MoveLeader("a", 1, 1)
	if _, err := gw.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: "a"})); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("a", 3, 1); err != nil {
		t.Fatal(err)
	}
	c.SetNodeDead(2, true)
	testwait.Until(t, 30*time.Second, "the view to match the cluster", func() error {
		v := cache.Load()
		if v == nil {
			return testwait.ErrNotYet
		}
		a := v.Topics["a"]
		if len(a.GetPartitions()) != 3 || v.Nodes[2].GetState() != controllerv1.NodeState_NODE_STATE_DEAD {
			return fmt.Errorf("topic a %v, node 2 %v", a, v.Nodes[2])
		}
		if _, ok := v.NodeAddress(1); !ok {
			return fmt.Errorf("node 1 not routable: %v", v.Nodes[1])
		}
		return nil
	})
}

// SetSecurity reaches watchers whole, and clearing it sends an empty
// state rather than nothing, so a revoke of the last ACL applies.
func TestWatchMetadataCarriesSecurity(t *testing.T) {
	c := New(0)
	defer c.Close()
	cache := metaview.NewCache()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		metaview.Watch(ctx, cache, metaview.WatchConfig{
			Controllers: []controllerv1connect.ControllerServiceClient{controllerv1connect.NewControllerServiceClient(http.DefaultClient, c.ControllerURL())},
			NodeID:      metaview.NotANode, Logger: slog.New(slog.DiscardHandler),
		})
	}()
	defer func() { cancel(); <-done }()
	c.SetSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{{Principal: "User:alice", ResourceName: "orders"}}})
	testwait.Until(t, 30*time.Second, "the ACL in the view", func() error {
		if v := cache.Load(); v == nil || len(v.Security.GetAcls()) != 1 {
			return fmt.Errorf("view %v", v)
		}
		return nil
	})
	c.SetSecurity(nil)
	testwait.Until(t, 30*time.Second, "the ACL gone from the view", func() error {
		if v := cache.Load(); v.Security == nil || len(v.Security.GetAcls()) != 0 {
			return fmt.Errorf("security %v", v.Security)
		}
		return nil
	})
}
