package metaview

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	c := NewCache()
	if err := c.Apply(delta(1, &controllerv1.MetadataDelta{})); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("delta before snapshot: %v; want ErrNoSnapshot", err)
	}
	if c.Ready() {
		t.Fatal("ready without a snapshot")
	}
	if err := c.Apply(snap(10)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.ReadyNotify():
	default:
		t.Fatal("ReadyNotify not closed after the first snapshot")
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

// The rules on which the gateway's and storage's former copies disagreed,
// one case each, plus the edges of the protocol.
func TestApplyRules(t *testing.T) {
	base, err := (*View)(nil).Apply(snap(10))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		msg   *controllerv1.WatchMetadataResponse
		check func(t *testing.T, v *View)
	}{
		{
			name: "a stale delta is skipped whole",
			msg:  delta(9, &controllerv1.MetadataDelta{DeletedTopics: []*controllerv1.DeletedTopic{{Name: "a"}}}),
			check: func(t *testing.T, v *View) {
				if v != base {
					t.Errorf("a delta at version 9 after 10 built a new view %+v", v)
				}
			},
		},
		{
			name: "a progress notice at the same version changes nothing",
			msg:  delta(10, &controllerv1.MetadataDelta{}),
			check: func(t *testing.T, v *View) {
				if v != base {
					t.Error("an empty delta at the current version built a new view")
				}
			},
		},
		{
			name: "a partition change for an older incarnation is ignored",
			msg: delta(11, &controllerv1.MetadataDelta{Partitions: []*controllerv1.PartitionChange{
				{Topic: "a", TopicId: "a0", Partition: &commonv1.PartitionMetadata{Partition: 0, LeaderId: 9}},
			}}),
			check: func(t *testing.T, v *View) {
				if p := v.Partition("a", 0); p.GetLeaderId() != 1 {
					t.Errorf("a-0 = %v; a change for topic id a0 landed on a1", p)
				}
			},
		},
		{
			name: "a new partition is inserted in index order",
			msg: delta(11, &controllerv1.MetadataDelta{Partitions: []*controllerv1.PartitionChange{
				{Topic: "a", TopicId: "a1", Partition: &commonv1.PartitionMetadata{Partition: 3, LeaderId: 3}},
				{Topic: "a", TopicId: "a1", Partition: &commonv1.PartitionMetadata{Partition: 2, LeaderId: 2}},
			}}),
			check: func(t *testing.T, v *View) {
				var got []int32
				for _, p := range v.Topics["a"].GetPartitions() {
					got = append(got, p.GetPartition())
				}
				if len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
					t.Errorf("partitions %v; want [0 1 2 3]", got)
				}
				if p := v.Partition("a", 2); p.GetLeaderId() != 2 {
					t.Errorf("a-2 = %v", p)
				}
			},
		},
		{
			name: "a topic deleted and created again in one delta keeps the new incarnation",
			msg: delta(11, &controllerv1.MetadataDelta{
				Topics:        []*commonv1.TopicMetadata{{Name: "b", TopicId: "b2"}},
				DeletedTopics: []*controllerv1.DeletedTopic{{Name: "b"}},
			}),
			check: func(t *testing.T, v *View) {
				if v.Topics["b"].GetTopicId() != "b2" {
					t.Errorf("b = %v; want the new incarnation b2", v.Topics["b"])
				}
			},
		},
		{
			name: "a deletion naming another incarnation keeps the topic",
			msg:  delta(11, &controllerv1.MetadataDelta{DeletedTopics: []*controllerv1.DeletedTopic{{Name: "b", TopicId: "b0"}}}),
			check: func(t *testing.T, v *View) {
				if v.Topics["b"] == nil {
					t.Error("deleting incarnation b0 deleted b1")
				}
			},
		},
		{
			name: "nodes, quorum and cluster id",
			msg: delta(12, &controllerv1.MetadataDelta{
				Nodes:       []*controllerv1.NodeStatus{{Node: &commonv1.Node{NodeId: 2, Address: "http://n2"}, State: controllerv1.NodeState_NODE_STATE_DEAD}},
				Controllers: &controllerv1.ControllerQuorum{ActiveControllerId: "c2"},
			}),
			check: func(t *testing.T, v *View) {
				if _, ok := v.NodeAddress(2); ok {
					t.Error("a dead node is routable")
				}
				if a := v.RegisteredAddress(2); a != "http://n2" {
					t.Errorf("registered address of dead node 2 = %q", a)
				}
				if a, ok := v.NodeAddress(1); !ok || a != "http://n1" {
					t.Errorf("node 1 = %q, %v", a, ok)
				}
				if v.Controllers.GetActiveControllerId() != "c2" || v.ClusterID != "c" || v.Version != 12 {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "coordinator registry replaced whole, kept when not carried",
			msg: delta(12, &controllerv1.MetadataDelta{Coordinators: &controllerv1.CoordinatorRegistry{
				Coordinators: []*controllerv1.CoordinatorRegistration{{CoordinatorId: "c1", KafkaNodeId: 2146435080}},
			}}),
			check: func(t *testing.T, v *View) {
				if r := v.Coordinators.GetCoordinators(); len(r) != 1 || r[0].GetCoordinatorId() != "c1" {
					t.Fatalf("coordinators %v", r)
				}
				v2, _ := v.Apply(delta(13, &controllerv1.MetadataDelta{}))
				if v2.Coordinators != v.Coordinators {
					t.Error("a delta without coordinators changed them")
				}
				v3, _ := v2.Apply(delta(14, &controllerv1.MetadataDelta{Coordinators: &controllerv1.CoordinatorRegistry{}}))
				if v3.Coordinators == nil || len(v3.Coordinators.GetCoordinators()) != 0 {
					t.Errorf("the last coordinator gone: %v", v3.Coordinators)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := base.Apply(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, v)
			if base.Version != 10 || len(base.Topics) != 2 || base.Topics["b"].GetTopicId() != "b1" || len(base.Topics["a"].GetPartitions()) != 2 || len(base.Nodes) != 2 {
				t.Errorf("the view applied to changed: %+v", base)
			}
		})
	}
}

func TestApplyRejects(t *testing.T) {
	if _, err := (*View)(nil).Apply(delta(1, &controllerv1.MetadataDelta{})); !errors.Is(err, ErrNoSnapshot) {
		t.Errorf("delta before a snapshot: %v; want ErrNoSnapshot", err)
	}
	v, _ := (*View)(nil).Apply(snap(1))
	if _, err := v.Apply(&controllerv1.WatchMetadataResponse{Version: 2}); err == nil {
		t.Error("a message with neither snapshot nor delta was accepted")
	}
	c := NewCache()
	_ = c.Apply(snap(5))
	if err := c.Apply(&controllerv1.WatchMetadataResponse{Version: 6}); err == nil || c.Load().Version != 5 {
		t.Errorf("bad message: err %v, version %d; want an error and the view kept", err, c.Load().Version)
	}
}

// withPartition rebuilds a topic field by field; a field added to
// TopicMetadata must be carried over too.
func TestWithPartitionKeepsEveryTopicField(t *testing.T) {
	full := &commonv1.TopicMetadata{}
	fields := full.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			full.ProtoReflect().Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.IsList():
			full.ProtoReflect().Mutable(fd).List().Append(protoreflect.ValueOfMessage((&commonv1.PartitionMetadata{Partition: 0}).ProtoReflect()))
		case fd.Kind() == protoreflect.StringKind:
			full.ProtoReflect().Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BoolKind:
			full.ProtoReflect().Set(fd, protoreflect.ValueOfBool(true))
		default:
			t.Fatalf("field %s of kind %v: teach this test to fill it", fd.Name(), fd.Kind())
		}
	}
	got := withPartition(full, &commonv1.PartitionMetadata{Partition: 0, LeaderId: 7})
	want := proto.Clone(full).(*commonv1.TopicMetadata)
	want.Partitions[0].LeaderId = 7
	if !proto.Equal(got, want) {
		t.Errorf("withPartition = %v; want %v", got, want)
	}
}
