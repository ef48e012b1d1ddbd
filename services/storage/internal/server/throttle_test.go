package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/metaview"
)

// throttleView is node 2's view: partition t-0 moving to add node 3 (not
// in sync yet) and node 4 (in sync), throttle rate bytes/s on node 2.
func throttleView(rate int64, isr ...int32) *metaview.View {
	return &metaview.View{
		Topics: map[string]*commonv1.TopicMetadata{"t": {Name: "t", Partitions: []*commonv1.PartitionMetadata{{
			Partition: 0, LeaderId: 1, Replicas: []int32{3, 4, 2, 1}, Isr: isr,
			AddingReplicas: []int32{3, 4}, RemovingReplicas: []int32{1},
		}}}},
		Nodes: map[int32]*controllerv1.NodeStatus{2: {Node: &commonv1.Node{NodeId: 2}, ReplicationThrottleBytesPerSecond: rate}},
	}
}

// Only adding replicas outside the ISR are throttled, and only while a
// throttle is set.
func TestMoveThrottleAppliesToAddingReplicasOutOfSync(t *testing.T) {
	th := newMoveThrottle(2)
	k := tpKey{"t", 0}
	th.update(throttleView(1000, 1, 2, 4), viewChange{all: true})
	for _, tc := range []struct {
		node int32
		want bool
	}{{3, true}, {4, false}, {1, false}, {2, false}} {
		if got, _ := th.throttled(k, tc.node); got != tc.want {
			t.Errorf("node %d throttled %v, want %v", tc.node, got, tc.want)
		}
	}
	if got := th.capReplicate(k, 3, 10<<20); got != minChunk {
		t.Errorf("capped fetch %d, want %d", got, minChunk)
	}
	if got := th.capReplicate(k, 4, 10<<20); got != 10<<20 {
		t.Errorf("in-sync replica's fetch capped to %d", got)
	}
	th.update(throttleView(1000, 1, 2, 3, 4), viewChange{all: true}) // node 3 joined the ISR
	if ok, _ := th.throttled(k, 3); ok {
		t.Error("in-sync adding replica still throttled")
	}
	th.update(throttleView(0, 1, 2, 4), viewChange{all: true}) // throttle lifted
	if ok, _ := th.throttled(k, 3); ok {
		t.Error("throttled without a throttle")
	}
}

// A leader's answer to a throttled follower takes its bytes from the
// node's outbound budget.
func TestMoveThrottleChargesLeaderAnswers(t *testing.T) {
	th := newMoveThrottle(2)
	th.update(throttleView(1000, 1, 2, 4), viewChange{all: true})
	res := &storagev1.ReplicateResponse{Partitions: []*storagev1.ReplicatePartitionResult{{Topic: "t", Partition: 0, Records: make([]byte, 20000)}}}
	th.delayReplicate(context.Background(), 4, res) // in sync: free
	if tok := th.limitersOut().Tokens(); tok < minChunk-100 {
		t.Fatalf("an in-sync follower's answer used the budget: %.0f tokens left of %d", tok, minChunk)
	}
	th.delayReplicate(context.Background(), 3, res)
	// The refill is 1000 bytes a second: far less than the 20000 taken,
	// however slow the machine.
	if tok := th.limitersOut().Tokens(); tok > minChunk-10000 {
		t.Fatalf("%.0f tokens left after charging 20000 of %d", tok, minChunk)
	}
}

type recordingClient struct {
	storagev1connect.StorageServiceClient
	got *storagev1.ReplicateRequest
}

func (c *recordingClient) Replicate(_ context.Context, req *connect.Request[storagev1.ReplicateRequest]) (*connect.Response[storagev1.ReplicateResponse], error) {
	c.got = req.Msg
	return connect.NewResponse(&storagev1.ReplicateResponse{Partitions: []*storagev1.ReplicatePartitionResult{{Topic: "t", Partition: 0, Records: make([]byte, 5000)}}}), nil
}

// A follower fetching as a throttled adding replica asks for at most a
// chunk and pays for what it gets from the inbound budget.
func TestMoveThrottleFollowerSide(t *testing.T) {
	th := newMoveThrottle(3)
	v := throttleView(0, 1, 2, 4)
	v.Nodes[3] = &controllerv1.NodeStatus{Node: &commonv1.Node{NodeId: 3}, ReplicationThrottleBytesPerSecond: 1000}
	th.update(v, viewChange{all: true})
	rc := &recordingClient{}
	c := th.follower(rc)
	if _, err := c.Replicate(context.Background(), connect.NewRequest(&storagev1.ReplicateRequest{
		MaxBytes: 10 << 20, Partitions: []*storagev1.ReplicatePartition{{Topic: "t", Partition: 0, MaxBytes: 10 << 20}},
	})); err != nil {
		t.Fatal(err)
	}
	if rc.got.GetMaxBytes() != minChunk || rc.got.GetPartitions()[0].GetMaxBytes() != minChunk {
		t.Fatalf("fetch asked for %d / %d bytes, want %d", rc.got.GetMaxBytes(), rc.got.GetPartitions()[0].GetMaxBytes(), minChunk)
	}
	if tok := th.limitersIn().Tokens(); tok > minChunk-4000 {
		t.Fatalf("%.0f inbound tokens left after 5000 bytes of %d", tok, minChunk)
	}
}

func (t *moveThrottle) limitersOut() interface{ Tokens() float64 } { o, _ := t.limiters(); return o }
func (t *moveThrottle) limitersIn() interface{ Tokens() float64 }  { _, i := t.limiters(); return i }
