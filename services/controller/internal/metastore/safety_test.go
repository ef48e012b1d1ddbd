package metastore

import (
	"context"
	"slices"
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"google.golang.org/protobuf/proto"
)

// Regression tests for ways partition moves and elections could lose
// acknowledged records (docs/design/rebalance.md, "Safety").

// putPartition writes a partition record as is (the test plays whoever
// wrote it).
func putPartition(t *testing.T, s *Store, topic string, p *commonv1.PartitionMetadata) {
	t.Helper()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cl.Put(context.Background(), partitionKey(topic, p.GetPartition()), string(b)); err != nil {
		t.Fatal(err)
	}
}

// expire makes node id's lease gone, as when its process died, without
// the liveness pass (Reconcile) that would react to it.
func expire(t *testing.T, s *Store, ids ...int32) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.cl.Delete(context.Background(), liveKey(id)); err != nil {
			t.Fatal(err)
		}
	}
}

// An explicit unclean election applies only when no ISR member is alive.
// With the leader dead and another ISR member alive it elects that member
// cleanly; it once took the first live replica (here 3, out of sync) and
// made it the whole ISR, truncating away what only 1 and 2 had.
func TestUncleanElectionPrefersALiveInSyncReplica(t *testing.T) {
	s, p := oneTopic(t, 3)
	p = proto.Clone(p).(*commonv1.PartitionMetadata)
	p.Replicas = []int32{1, 3, 2}
	assignISR(p, p, []int32{1, 2}, noEpoch)
	putPartition(t, s, "t", p)
	expire(t, s, 1)

	res, err := s.ElectLeaders(context.Background(), controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN,
		[]*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error != nil || res[0].LeaderId != 2 {
		t.Fatalf("unclean election with ISR member 2 alive: leader %d, error %v; want 2", res[0].LeaderId, res[0].Error)
	}
	if got := partition(t, s, "t", 0); got.LeaderId != 2 || !slices.Equal(got.Isr, []int32{2}) {
		t.Fatalf("after the election: %v, want leader 2 with ISR [2]", got)
	}

	// With no ISR member alive, unclean elects the first live replica
	// (not one being added) and starts the ISR over with it.
	expire(t, s, 2)
	res, err = s.ElectLeaders(context.Background(), controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN,
		[]*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Load(context.Background())
	if got := partition(t, s, "t", 0); res[0].Error != nil || got.LeaderId != 3 || !slices.Equal(got.Isr, []int32{3}) ||
		got.IsrNodeEpochs[3] != m.nodeEpoch(3) {
		t.Fatalf("unclean election with no ISR member alive: %v (error %v), want leader 3, ISR [3] at its registration", got, res[0].Error)
	}
}

// The shrink step runs only under a live leader among the targets. With
// the leader and every other target replica dead, the removed replicas
// (the only live copies) must keep theirs.
func TestShrinkWaitsForALiveLeader(t *testing.T) {
	s, _ := oneTopic(t, 5)
	move(t, s, "t", 0, 1, 4, 5)
	setISR(t, s, "t", 0, 1, 2, 3, 4, 5)
	before := partition(t, s, "t", 0)
	expire(t, s, 1, 4, 5)
	if n := step(t, s); n != 0 {
		t.Fatalf("stepped %d partitions with the leader and every target replica dead: %v", n, partition(t, s, "t", 0))
	}
	if got := partition(t, s, "t", 0); !proto.Equal(got, before) {
		t.Fatalf("record changed with the targets dead: %v, was %v", got, before)
	}
}

// A node that registered again (restarted, maybe with an empty or
// shorter log) is not in sync, even before the liveness pass removes it
// from the ISR: the lead, drain and preferred steps must not elect it.
func TestReregisteredNodeIsNotElected(t *testing.T) {
	reregister := func(t *testing.T, s *Store, id int32) {
		t.Helper()
		expire(t, s, id)
		register(t, s, id, "")
	}
	ctx := context.Background()

	t.Run("preferred", func(t *testing.T) {
		s, p := oneTopic(t, 3)
		p = proto.Clone(p).(*commonv1.PartitionMetadata)
		p.Replicas = []int32{2, 1, 3} // 2 preferred, 1 leads
		putPartition(t, s, "t", p)
		reregister(t, s, 2)
		res, err := s.ElectLeaders(ctx, controllerv1.ElectionType_ELECTION_TYPE_PREFERRED, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Error == nil || partition(t, s, "t", 0).LeaderId != 1 {
			t.Fatalf("preferred election of a re-registered node: %v, leader %d", res, partition(t, s, "t", 0).LeaderId)
		}
		if n, err := s.BalanceLeaders(ctx, alwaysActive, 0); err != nil || n != 0 {
			t.Fatalf("automatic leader balance moved %d leaders to a re-registered node (%v)", n, err)
		}
	})
	t.Run("drain", func(t *testing.T) {
		s, _ := oneTopic(t, 3)
		reregister(t, s, 2)
		if _, err := s.DrainNode(ctx, 1, false, 0, nil); err != nil {
			t.Fatal(err)
		}
		step(t, s)
		if got := partition(t, s, "t", 0); got.LeaderId != 3 {
			t.Fatalf("drain of leader 1 with node 2 re-registered: %v, want leader 3", got)
		}
	})
	t.Run("move lead step", func(t *testing.T) {
		s, _ := oneTopic(t, 4)
		move(t, s, "t", 0, 2, 3, 4)
		setISR(t, s, "t", 0, 1, 2, 3, 4)
		reregister(t, s, 2)
		step(t, s)
		if got := partition(t, s, "t", 0); got.LeaderId == 2 {
			t.Fatalf("move elected re-registered node 2: %v", got)
		}
	})
	t.Run("liveness pass", func(t *testing.T) {
		s, _ := oneTopic(t, 3)
		reregister(t, s, 1) // the leader
		if _, err := s.Reconcile(ctx, alwaysActive); err != nil {
			t.Fatal(err)
		}
		if got := partition(t, s, "t", 0); got.LeaderId != 2 || !slices.Equal(got.Isr, []int32{2, 3}) {
			t.Fatalf("liveness pass after leader 1 registered again: %v, want leader 2, ISR [2 3]", got)
		}
	})
}

// min.insync.replicas's default is per partition, from that partition's
// replicas: after a move, partitions of one topic can have different
// replication factors, and a default taken from one of them (once picked
// in map order) flipped between them.
func TestMinInsyncIsPerPartition(t *testing.T) {
	s := startStore(t, 0)
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	ctx := context.Background()
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "t", Partitions: 4, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	// Partition 2 was moved to one replica (as after a move with
	// min.insync.replicas lowered, then raised back to the default).
	p := proto.Clone(partition(t, s, "t", 2)).(*commonv1.PartitionMetadata)
	p.Replicas, p.LeaderId = p.Replicas[:1], p.Replicas[0]
	assignISR(p, p, p.Replicas, noEpoch)
	putPartition(t, s, "t", p)

	for range 20 { // map order varies from call to call
		m, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range m.Topic("t").GetPartitions() {
			want := int32(2)
			if part.GetPartition() == 2 {
				want = 1
			}
			if part.GetMinInsyncReplicas() != want {
				t.Fatalf("partition %d (%d replicas): min.insync.replicas %d, want %d", part.GetPartition(), len(part.GetReplicas()), part.GetMinInsyncReplicas(), want)
			}
		}
		if rf := m.ReplicationFactor("t"); rf != 3 {
			t.Fatalf("replication factor shown %d, want 3 (partition 0's)", rf)
		}
	}
	// An override applies to every partition, whatever its replicas.
	if _, err := s.AlterTopicConfig(ctx, "t", map[string]string{"min.insync.replicas": "3"}, nil, false); err != nil {
		t.Fatal(err)
	}
	m, _ := s.Load(ctx)
	for _, part := range m.Topic("t").GetPartitions() {
		if part.GetMinInsyncReplicas() != 3 {
			t.Fatalf("partition %d: min.insync.replicas %d with the override 3", part.GetPartition(), part.GetMinInsyncReplicas())
		}
	}
}
