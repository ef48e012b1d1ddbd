package metacache

import (
	"errors"
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

func snap(v int64) *controllerv1.WatchMetadataResponse {
	return &controllerv1.WatchMetadataResponse{Version: v, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{
		ClusterId: "c",
		Topics: []*commonv1.TopicMetadata{
			{Name: "a", TopicId: "a1", Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1}, {Partition: 1, LeaderId: 2}}},
			{Name: "b", TopicId: "b1", Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1}}},
		},
		Nodes: []*controllerv1.NodeStatus{
			{Node: &commonv1.Node{NodeId: 1, Address: "http://n1"}, State: controllerv1.NodeState_NODE_STATE_ALIVE},
			{Node: &commonv1.Node{NodeId: 2, Address: "http://n2"}, State: controllerv1.NodeState_NODE_STATE_ALIVE},
		},
	}}}
}

func delta(v int64, d *controllerv1.MetadataDelta) *controllerv1.WatchMetadataResponse {
	return &controllerv1.WatchMetadataResponse{Version: v, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: d}}
}

func TestApply(t *testing.T) {
	c := New()
	if err := c.Apply(delta(1, &controllerv1.MetadataDelta{})); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("delta before snapshot: %v; want ErrNoSnapshot", err)
	}
	if c.Ready() {
		t.Fatal("ready without a snapshot")
	}
	if err := c.Apply(snap(10)); err != nil {
		t.Fatal(err)
	}
	before := c.Load()
	steps := []*controllerv1.WatchMetadataResponse{
		delta(11, &controllerv1.MetadataDelta{
			Partitions: []*controllerv1.PartitionChange{
				{Topic: "a", TopicId: "a1", Partition: &commonv1.PartitionMetadata{Partition: 1, LeaderId: 1, LeaderEpoch: 2}},
				{Topic: "a", TopicId: "stale-id", Partition: &commonv1.PartitionMetadata{Partition: 0, LeaderId: 9}},
			},
			DeletedTopics:  []*controllerv1.DeletedTopic{{Name: "b", TopicId: "b1"}},
			RemovedNodeIds: []int32{2},
		}),
		// Not newer: skipped.
		delta(11, &controllerv1.MetadataDelta{DeletedTopics: []*controllerv1.DeletedTopic{{Name: "a"}}}),
	}
	for _, m := range steps {
		if err := c.Apply(m); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Load()
	if st.Version != 11 || st.Topics["b"] != nil || st.Topics["a"] == nil {
		t.Fatalf("state %+v; want version 11, a kept, b deleted", st)
	}
	if p := st.Partition("a", 1); p.GetLeaderId() != 1 || p.GetLeaderEpoch() != 2 {
		t.Errorf("a-1 = %v; want leader 1 epoch 2", p)
	}
	if p := st.Partition("a", 0); p.GetLeaderId() != 1 {
		t.Errorf("a-0 = %v; a change for another topic id must be ignored", p)
	}
	if _, ok := st.NodeAddress(2); ok {
		t.Error("node 2 still known after removal")
	}
	// Copy-on-write: the earlier state is untouched.
	if before.Topics["b"] == nil || before.Partition("a", 1).GetLeaderId() != 2 || before.Nodes[2] == nil {
		t.Error("applying a delta changed an earlier published state")
	}
	// A snapshot replaces everything.
	if err := c.Apply(&controllerv1.WatchMetadataResponse{Version: 3, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{}}}); err != nil {
		t.Fatal(err)
	}
	if st := c.Load(); st.Version != 3 || len(st.Topics) != 0 {
		t.Errorf("after a new snapshot: %+v; want version 3 and no topics", st)
	}
}
