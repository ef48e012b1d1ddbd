package replica

import (
	"context"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// A leader restarted with acknowledged records above its checkpointed high
// watermark must make them visible as soon as it leads with an ISR of one,
// not only after the next append.
func TestLeaderAloneInISRCommitsOnRoleChange(t *testing.T) {
	dir := t.TempDir()
	open := func() *Replica {
		r, err := Open(dir, "orders", "id", 0, Config{MinISR: 1}, Options{NodeID: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	batch, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	r := open()
	for range 4 {
		if _, err := r.Log().AppendAsLeader(context.Background(), batch, 0); err != nil {
			t.Fatal(err)
		}
	}
	r.Log().SetHighWatermark(2) // as if the process died before the HW moved on
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	r = open()
	defer r.Close()
	if hw := r.Log().HighWatermark(); hw != 2 {
		t.Fatalf("reopened high watermark %d, want the checkpointed 2", hw)
	}
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
	if hw, leo := r.Log().HighWatermark(), r.Log().LogEndOffset(); hw != leo {
		t.Fatalf("leader alone in the ISR: high watermark %d, log end %d", hw, leo)
	}

	// With a follower in the ISR the high watermark waits for its fetch.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	if _, err := r.Log().AppendAsLeader(context.Background(), batch, 2); err != nil {
		t.Fatal(err)
	}
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 3, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("with a follower that has not fetched: high watermark %d, want 4", hw)
	}
	// The controller shrinks the ISR to the leader: the high watermark moves.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 4, Replicas: []int32{1, 2}, ISR: []int32{1}})
	if hw, leo := r.Log().HighWatermark(), r.Log().LogEndOffset(); hw != leo {
		t.Fatalf("after the ISR shrank to the leader: high watermark %d, log end %d", hw, leo)
	}
}
