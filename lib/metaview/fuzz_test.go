package metaview

import (
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// FuzzApplyDelta applies two fuzzed deltas (protobuf-encoded
// MetadataDelta) at fuzzed versions on top of a fixed snapshot and checks
// every step against model, a deliberately naive re-statement of the rules
// on deep copies: the same result, no earlier view modified, stale deltas
// skipped, partitions a change touched kept in index order. make test runs
// the seed corpus; make test-long fuzzes.
func FuzzApplyDelta(f *testing.F) {
	seed := func(d *controllerv1.MetadataDelta) []byte {
		b, err := proto.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	empty := seed(&controllerv1.MetadataDelta{})
	move := seed(&controllerv1.MetadataDelta{Partitions: []*controllerv1.PartitionChange{
		{Topic: "a", TopicId: "a1", Partition: &commonv1.PartitionMetadata{Partition: 1, LeaderId: 1, LeaderEpoch: 2}},
		{Topic: "a", TopicId: "a0", Partition: &commonv1.PartitionMetadata{Partition: 0, LeaderId: 9}},
		{Topic: "a", Partition: &commonv1.PartitionMetadata{Partition: 5, LeaderId: 3}},
		{Topic: "zz", Partition: &commonv1.PartitionMetadata{Partition: 0}},
		{Topic: "b", TopicId: "b1"},
	}})
	recreate := seed(&controllerv1.MetadataDelta{
		Topics:        []*commonv1.TopicMetadata{{Name: "b", TopicId: "b2", Partitions: []*commonv1.PartitionMetadata{{Partition: 0}}}},
		DeletedTopics: []*controllerv1.DeletedTopic{{Name: "b"}, {Name: "a", TopicId: "a0"}},
		Partitions:    []*controllerv1.PartitionChange{{Topic: "b", TopicId: "b1", Partition: &commonv1.PartitionMetadata{Partition: 0, LeaderId: 4}}},
	})
	nodes := seed(&controllerv1.MetadataDelta{
		Nodes:          []*controllerv1.NodeStatus{{Node: &commonv1.Node{NodeId: 3, Address: "http://n3"}}, {}},
		RemovedNodeIds: []int32{1, 42},
		Controllers:    &controllerv1.ControllerQuorum{ActiveControllerId: "2"},
	})
	f.Add(int64(11), move, int64(12), recreate)
	f.Add(int64(11), recreate, int64(11), move)
	f.Add(int64(9), nodes, int64(13), empty)
	f.Add(int64(10), empty, int64(20), nodes)
	f.Add(int64(11), []byte{0xff}, int64(12), move)
	f.Fuzz(func(t *testing.T, v1 int64, d1 []byte, v2 int64, d2 []byte) {
		view, err := (*View)(nil).Apply(snap(10))
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			version int64
			raw     []byte
		}{{v1, d1}, {v2, d2}} {
			// A topic rebuilt by a partition change keeps the fields this
			// build knows, not unknown ones a newer controller may send.
			d := &controllerv1.MetadataDelta{}
			if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(step.raw, d) != nil {
				return
			}
			before := cloneView(view)
			next, err := view.Apply(delta(step.version, d))
			if err != nil {
				t.Fatalf("delta at %d: %v", step.version, err)
			}
			if !equalViews(view, before) {
				t.Fatalf("applying a delta changed the view it was applied to")
			}
			want := model(before, step.version, d)
			if !equalViews(next, want) {
				t.Fatalf("after delta %v at %d:\n got %+v\nwant %+v", d, step.version, next, want)
			}
			if step.version <= before.Version && next != view {
				t.Fatalf("a stale delta (%d after %d) built a new view", step.version, before.Version)
			}
			for _, pc := range d.GetPartitions() {
				ps := next.Topics[pc.GetTopic()].GetPartitions()
				for i := 1; i < len(ps) && next != view; i++ {
					if pc.GetTopicId() == next.Topics[pc.GetTopic()].GetTopicId() && ps[i-1].GetPartition() >= ps[i].GetPartition() && isOrdered(before.Topics[pc.GetTopic()]) {
						t.Fatalf("partitions of %q out of order: %v", pc.GetTopic(), ps)
					}
				}
			}
			view = next
		}
	})
}

func isOrdered(t *commonv1.TopicMetadata) bool {
	ps := t.GetPartitions()
	for i := 1; i < len(ps); i++ {
		if ps[i-1].GetPartition() >= ps[i].GetPartition() {
			return false
		}
	}
	return true
}

// model applies d to a deep copy of v by the package's rules, written as
// plainly as possible.
func model(v *View, version int64, d *controllerv1.MetadataDelta) *View {
	out := cloneView(v)
	if version <= v.Version {
		return out
	}
	out.Version = version
	for _, dt := range d.GetDeletedTopics() {
		if t, ok := out.Topics[dt.GetName()]; ok && (dt.GetTopicId() == "" || dt.GetTopicId() == t.GetTopicId()) {
			delete(out.Topics, dt.GetName())
		}
	}
	for _, t := range d.GetTopics() {
		out.Topics[t.GetName()] = proto.Clone(t).(*commonv1.TopicMetadata)
	}
	for _, pc := range d.GetPartitions() {
		t, ok := out.Topics[pc.GetTopic()]
		if !ok || pc.GetPartition() == nil || (pc.GetTopicId() != "" && pc.GetTopicId() != t.GetTopicId()) {
			continue
		}
		p := proto.Clone(pc.GetPartition()).(*commonv1.PartitionMetadata)
		replaced := false
		// The first partition of that index is replaced (the view's fast
		// path looks at the index's position first; a duplicate index
		// only arises from a hand-built topic).
		at := -1
		if idx := p.GetPartition(); idx >= 0 && int(idx) < len(t.Partitions) && t.Partitions[idx].GetPartition() == idx {
			at = int(idx)
		} else {
			for i, q := range t.Partitions {
				if q.GetPartition() == idx {
					at = i
					break
				}
			}
		}
		if at >= 0 {
			t.Partitions[at] = p
			replaced = true
		}
		if !replaced {
			i := 0
			for i < len(t.Partitions) && t.Partitions[i].GetPartition() <= p.GetPartition() {
				i++
			}
			t.Partitions = append(t.Partitions[:i], append([]*commonv1.PartitionMetadata{p}, t.Partitions[i:]...)...)
		}
	}
	for _, n := range d.GetNodes() {
		out.Nodes[n.GetNode().GetNodeId()] = proto.Clone(n).(*controllerv1.NodeStatus)
	}
	for _, id := range d.GetRemovedNodeIds() {
		delete(out.Nodes, id)
	}
	if d.GetControllers() != nil {
		out.Controllers = proto.Clone(d.GetControllers()).(*controllerv1.ControllerQuorum)
	}
	return out
}

func cloneView(v *View) *View {
	out := &View{Version: v.Version, ClusterID: v.ClusterID, Topics: map[string]*commonv1.TopicMetadata{}, Nodes: map[int32]*controllerv1.NodeStatus{}}
	for k, t := range v.Topics {
		out.Topics[k] = proto.Clone(t).(*commonv1.TopicMetadata)
	}
	for k, n := range v.Nodes {
		out.Nodes[k] = proto.Clone(n).(*controllerv1.NodeStatus)
	}
	if v.Controllers != nil {
		out.Controllers = proto.Clone(v.Controllers).(*controllerv1.ControllerQuorum)
	}
	return out
}

func equalViews(a, b *View) bool {
	if a.Version != b.Version || a.ClusterID != b.ClusterID || len(a.Topics) != len(b.Topics) || len(a.Nodes) != len(b.Nodes) ||
		!proto.Equal(a.Controllers, b.Controllers) {
		return false
	}
	for k, t := range a.Topics {
		if u, ok := b.Topics[k]; !ok || !proto.Equal(t, u) {
			return false
		}
	}
	for k, n := range a.Nodes {
		if m, ok := b.Nodes[k]; !ok || !proto.Equal(n, m) {
			return false
		}
	}
	return true
}
