package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// reconcileNode is a storage node whose controller never answers, so only
// the test calls reconcile, with views it builds from stream messages as a
// real node's metadata client does.
func reconcileNode(t *testing.T) *Node {
	t.Helper()
	n, err := Start(context.Background(), Config{
		NodeID: 1, Advertise: "http://127.0.0.1:1", DataDir: t.TempDir(), Controllers: []string{"http://127.0.0.1:1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func onNode1(topic string, partitions int) *commonv1.TopicMetadata {
	tm := &commonv1.TopicMetadata{Name: topic, TopicId: topic + "-id"}
	for i := range partitions {
		tm.Partitions = append(tm.Partitions, &commonv1.PartitionMetadata{
			Partition: int32(i), LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, Isr: []int32{1},
		})
	}
	return tm
}

func node(id int32, epoch int64) *controllerv1.NodeStatus {
	return &controllerv1.NodeStatus{Node: &commonv1.Node{NodeId: id, Address: fmt.Sprintf("http://127.0.0.1:%d", id)}, NodeEpoch: epoch}
}

func apply(t *testing.T, v *metaview.View, version int64, d *controllerv1.MetadataDelta) *metaview.View {
	t.Helper()
	next, err := v.Apply(&controllerv1.WatchMetadataResponse{Version: version, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: d}})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// A delta costs the partitions it changed, not every partition the node
// hosts: at thousands of partitions a pass over all of them on each ISR
// change kept a node busy. What changed is still applied, a deleted topic's
// replicas are dropped, a node record change visits everything again, and a
// replica that could not be opened is tried again on the next view.
func TestReconcileVisitsWhatChanged(t *testing.T) {
	n := reconcileNode(t)
	v, err := (*metaview.View)(nil).Apply(&controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Snapshot{
		Snapshot: &controllerv1.MetadataSnapshot{
			Topics: []*commonv1.TopicMetadata{onNode1("a", 20), onNode1("b", 1)},
			Nodes:  []*controllerv1.NodeStatus{node(1, 7)},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	n.reconcile(v)
	if got := n.passes.visits; got != 21 {
		t.Fatalf("first view visited %d partitions, want all 21", got)
	}
	for i := range int32(20) {
		if n.replica("a", i) == nil {
			t.Fatalf("a-%d not opened", i)
		}
	}

	// One partition's leader epoch moves: only it is visited, and applied.
	b0 := onNode1("b", 1).GetPartitions()[0]
	b0.LeaderEpoch, b0.PartitionEpoch = 2, 2
	v = apply(t, v, 2, &controllerv1.MetadataDelta{Partitions: []*controllerv1.PartitionChange{{Topic: "b", TopicId: "b-id", Partition: b0}}})
	n.reconcile(v)
	if got := n.passes.visits; got != 22 {
		t.Fatalf("a delta of one partition visited %d partitions, want 1", got-21)
	}
	if e := n.replica("b", 0).View().State.LeaderEpoch; e != 2 {
		t.Fatalf("b-0 runs leader epoch %d after the delta, want 2", e)
	}

	// A progress notice (the same view again) visits nothing.
	n.reconcile(v)
	if got := n.passes.visits; got != 22 {
		t.Fatalf("a progress notice visited %d partitions", got-22)
	}

	// A deleted topic's replicas are closed and their directories removed.
	dirA0 := n.replica("a", 0).Log().Dir()
	v = apply(t, v, 3, &controllerv1.MetadataDelta{DeletedTopics: []*controllerv1.DeletedTopic{{Name: "a", TopicId: "a-id"}}})
	n.reconcile(v)
	for i := range int32(20) {
		if n.replica("a", i) != nil {
			t.Fatalf("a-%d still hosted after the topic was deleted", i)
		}
	}
	if _, err := os.Stat(dirA0); !os.IsNotExist(err) {
		t.Fatalf("a-0's directory after the topic was deleted: %v", err)
	}
	if got := n.passes.visits; got != 22 {
		t.Fatalf("deleting a topic visited %d partitions", got-22)
	}

	// A node record change reaches every replica (node epochs, addresses).
	v = apply(t, v, 4, &controllerv1.MetadataDelta{Nodes: []*controllerv1.NodeStatus{node(2, 9)}})
	n.reconcile(v)
	if got := n.passes.visits; got != 23 {
		t.Fatalf("a node change visited %d partitions, want the 1 hosted", got-22)
	}

	// A replica that cannot be opened (a file where its directory goes) is
	// tried again on the next view, a progress notice included.
	dir := replica.Dir(n.cfg.DataDir, "c", 0)
	if err := os.WriteFile(dir, []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	v = apply(t, v, 5, &controllerv1.MetadataDelta{Topics: []*commonv1.TopicMetadata{onNode1("c", 1)}})
	n.reconcile(v)
	if n.replica("c", 0) != nil {
		t.Fatal("c-0 opened over a file in the way")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	n.reconcile(v)
	if n.replica("c", 0) == nil {
		t.Fatal("c-0 not opened on the next view once its directory could be made")
	}
	if n.replica("b", 0) == nil {
		t.Fatal("b-0 dropped")
	}
}
