package server

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// A partition move as the controller drives it (KIP-455), seen from the
// storage nodes: the adding replica opens, catches up from the leader and
// is put in the ISR by the leader; leadership moves to it; the removed
// replica closes and deletes its copy. Everything acknowledged before and
// during the move is on the new replicas.
func TestPartitionMoveOnStorageNodes(t *testing.T) {
	c := newCluster(t, 3, 2*time.Second)
	c.createTopic("orders", 2, 2) // replicas 1, 2; leader 1
	var want []string
	send := func(id int32, epoch int32, n int) {
		t.Helper()
		var vs []string
		for i := range n {
			vs = append(vs, fmt.Sprintf("v%d", len(want)+i))
		}
		if _, err := produce(c.storage(id), "orders", commonv1.Acks_ACKS_ALL, epoch, batch(t, vs...), 10*time.Second); err != nil {
			t.Fatalf("produce to %d: %v", id, err)
		}
		want = append(want, vs...)
	}
	send(1, 1, 50)

	// Grow: node 3 added, node 1 to be removed.
	c.ctrl.UpdatePartition("orders", 0, func(p *commonv1.PartitionMetadata) {
		p.Replicas, p.AddingReplicas, p.RemovingReplicas = []int32{3, 2, 1}, []int32{3}, []int32{1}
	})
	send(1, 1, 20)
	c.eventually("node 3 in the ISR", func() bool { return slices.Contains(c.ctrl.Partition("orders", 0).GetIsr(), 3) })
	send(1, 1, 20)

	// Lead, then shrink.
	c.ctrl.UpdatePartition("orders", 0, func(p *commonv1.PartitionMetadata) { p.LeaderId, p.LeaderEpoch = 3, 2 })
	c.eventually("node 3 leads", func() bool {
		r := c.node(3).node.replica("orders", 0)
		return r != nil && r.View().Role == replica.RoleLeader
	})
	c.ctrl.UpdatePartition("orders", 0, func(p *commonv1.PartitionMetadata) {
		p.Replicas, p.AddingReplicas, p.RemovingReplicas = []int32{3, 2}, nil, nil
		p.Isr = slices.DeleteFunc(p.Isr, func(r int32) bool { return r == 1 })
	})
	dir := replica.Dir(c.dirs[1], "orders", 0)
	c.eventually("node 1 deleted its copy", func() bool {
		_, err := os.Stat(dir)
		return c.node(1).node.replica("orders", 0) == nil && os.IsNotExist(err)
	})
	send(3, 2, 10)

	got := values(t, fetch(t, c.storage(3), "orders", 0, time.Second).GetRecords())
	if !slices.Equal(got, want) {
		t.Fatalf("new leader holds %d records, want %d acknowledged: %v", len(got), len(want), got)
	}
	c.eventually("node 2 caught up with the new leader", func() bool {
		r := c.node(2).node.replica("orders", 0)
		return r != nil && r.Log().LogEndOffset() == int64(len(want))
	})
}

// A node that was down while a partition moved off it finds its old copy
// on disk when it starts again: it deletes it (a stray, as Kafka calls
// it) and keeps the replicas it still has.
func TestRestartedNodeDeletesStrayReplica(t *testing.T) {
	c := newCluster(t, 3, 2*time.Second)
	c.createTopic("orders", 2, 1) // replicas 1, 2
	c.createTopic("kept", 2, 1)
	for _, topic := range []string{"orders", "kept"} {
		if _, err := produce(c.storage(1), topic, commonv1.Acks_ACKS_ALL, 1, batch(t, "a", "b"), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually("node 2 holds both copies", func() bool {
		for _, topic := range []string{"orders", "kept"} {
			r := c.node(2).node.replica(topic, 0)
			if r == nil || r.Log().LogEndOffset() != 2 {
				return false
			}
		}
		return true
	})
	c.stop(2)
	// orders moves off node 2 (to 1 and 3) while it is down.
	c.ctrl.UpdatePartition("orders", 0, func(p *commonv1.PartitionMetadata) {
		p.Replicas, p.Isr = []int32{1, 3}, []int32{1}
	})
	c.start(2)
	stray, kept := replica.Dir(c.dirs[2], "orders", 0), replica.Dir(c.dirs[2], "kept", 0)
	c.eventually("node 2 deleted its stray copy of orders-0", func() bool {
		_, err := os.Stat(stray)
		return os.IsNotExist(err)
	})
	c.eventually("node 2 still hosts kept-0", func() bool {
		r := c.node(2).node.replica("kept", 0)
		return r != nil && r.Log().LogEndOffset() == 2
	})
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("kept-0's directory: %v", err)
	}
}
