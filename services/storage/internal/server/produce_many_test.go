package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// createTopicOn creates a one-partition topic led by leader over
// replicas, with isr in sync.
func (c *testCluster) createTopicOn(name string, leader int32, replicas, isr []int32, minISR int) {
	c.ctrl.SetTopic(&commonv1.TopicMetadata{
		Name: name, TopicId: name + "-id",
		Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: leader, LeaderEpoch: 1, PartitionEpoch: 1,
			Replicas: replicas, Isr: isr}},
		Configs: map[string]string{"min.insync.replicas": fmt.Sprint(minISR), "segment.bytes": "1048576"},
	})
	c.eventually(fmt.Sprintf("topic %s hosted", name), func() bool {
		for _, id := range replicas {
			if n := c.node(id); n != nil {
				if r := n.node.replica(name, 0); r == nil || r.View().State.LeaderEpoch != 1 {
					return false
				}
			}
		}
		return true
	})
}

func produceMany(c storagev1connect.StorageServiceClient, acks commonv1.Acks, parts ...*storagev1.ProducePartition) (*storagev1.ProducePartitionsResponse, error) {
	resp, err := c.ProducePartitions(context.Background(), connect.NewRequest(&storagev1.ProducePartitionsRequest{
		Acks: acks, TimeoutMs: 10000, Partitions: parts,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// One Produce carrying several partitions appends to each and answers
// each on its own: a partition this node does not lead, one short of
// in-sync replicas and one with a corrupt batch fail alone, with the
// error a single-partition Produce would have had, and the others are
// appended and acknowledged (acks=all).
func TestProduceManyPartitionsAnswersEach(t *testing.T) {
	c := newCluster(t, 2, 10*time.Second)
	c.createTopicOn("a", 1, []int32{1, 2}, []int32{1, 2}, 2)
	c.createTopicOn("b", 1, []int32{1}, []int32{1}, 1)
	c.createTopicOn("elsewhere", 2, []int32{2, 1}, []int32{2, 1}, 1)
	// thin's second replica is a node that does not exist, so it can
	// never catch up and join the ISR before the produce arrives.
	c.createTopicOn("thin", 1, []int32{1, 3}, []int32{1}, 2)
	c.createTopicOn("corrupt", 1, []int32{1}, []int32{1}, 1)
	bad := batch(t, "x")
	bad[len(bad)-1] ^= 0xff

	resp, err := produceMany(c.storage(1), acksAll,
		&storagev1.ProducePartition{Topic: "a", LeaderEpoch: 1, Records: batch(t, "a1", "a2")},
		&storagev1.ProducePartition{Topic: "elsewhere", LeaderEpoch: 1, Records: batch(t, "e")},
		&storagev1.ProducePartition{Topic: "b", LeaderEpoch: -1, Records: batch(t, "b1")},
		&storagev1.ProducePartition{Topic: "thin", LeaderEpoch: 1, Records: batch(t, "t")},
		&storagev1.ProducePartition{Topic: "corrupt", LeaderEpoch: 1, Records: bad},
	)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := resp.GetPartitions()
	if len(got) != 5 {
		t.Fatalf("%d results, want 5", len(got))
	}
	for i, want := range []string{"a", "elsewhere", "b", "thin", "corrupt"} {
		if got[i].GetTopic() != want {
			t.Fatalf("result %d is for %q, want %q (request order)", i, got[i].GetTopic(), want)
		}
	}
	if got[0].GetError() != nil || got[0].GetBaseOffset() != 0 || got[2].GetError() != nil || got[2].GetBaseOffset() != 0 {
		t.Fatalf("a and b: %v / %v, want appended at 0", got[0], got[2])
	}
	if d := got[1].GetError(); d.GetReason() != commonv1.Reason_REASON_NOT_LEADER || d.GetLeader().GetLeaderId() != 2 || got[1].GetBaseOffset() != -1 {
		t.Fatalf("elsewhere: %v, want NOT_LEADER naming node 2", got[1])
	}
	if d := got[3].GetError(); d.GetReason() != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
		t.Fatalf("thin: %v, want NOT_ENOUGH_REPLICAS", got[3])
	}
	if d := got[4].GetError(); d.GetReason() != commonv1.Reason_REASON_CORRUPT_RECORD {
		t.Fatalf("corrupt: %v, want CORRUPT_RECORD", got[4])
	}
	// acks=all: a's batch is committed on both replicas when the call answers.
	if hw := c.node(1).node.replica("a", 0).Log().HighWatermark(); hw != 2 {
		t.Fatalf("a's high watermark %d after acks=all, want 2", hw)
	}
	if got := values(t, logBytes(t, c.node(2).node, "a")); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("a on the follower: %q", got)
	}
	for _, topic := range []string{"thin", "corrupt"} {
		if leo := c.node(1).node.replica(topic, 0).Log().LogEndOffset(); leo != 0 {
			t.Fatalf("%s: log end %d after a refused partition, want 0", topic, leo)
		}
	}
	for id := int32(1); id <= 2; id++ {
		if leo := c.node(id).node.replica("elsewhere", 0).Log().LogEndOffset(); leo != 0 {
			t.Fatalf("elsewhere: log end %d on node %d, want 0", leo, id)
		}
	}
}

// An idempotent producer's duplicate is recognized per partition: a call
// that retries one partition's batch and carries another partition's next
// batch answers the first with its original offsets and appends the
// second, and an out-of-order sequence fails its partition only.
func TestProduceManyPartitionsIdempotentPerPartition(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopicOn("x", 1, []int32{1}, []int32{1}, 1)
	c.createTopicOn("y", 1, []int32{1}, []int32{1}, 1)
	c.createTopicOn("z", 1, []int32{1}, []int32{1}, 1)
	mk := func(seq int32, n int) []byte {
		return batchtest.Build(t, recordbatch.BuildOptions{Idempotent: true, ProducerID: 7, BaseSequence: seq}, batchtest.Records(n))
	}
	resp, err := produceMany(c.storage(1), acksAll,
		&storagev1.ProducePartition{Topic: "x", LeaderEpoch: 1, Records: mk(0, 2)},
		&storagev1.ProducePartition{Topic: "y", LeaderEpoch: 1, Records: mk(0, 3)},
		&storagev1.ProducePartition{Topic: "z", LeaderEpoch: 1, Records: mk(0, 1)},
	)
	if err != nil || resp.GetPartitions()[0].GetError() != nil || resp.GetPartitions()[1].GetError() != nil || resp.GetPartitions()[2].GetError() != nil {
		t.Fatalf("first call: %v %v", resp, err)
	}
	resp, err = produceMany(c.storage(1), acksAll,
		&storagev1.ProducePartition{Topic: "x", LeaderEpoch: 1, Records: mk(0, 2)}, // retry
		&storagev1.ProducePartition{Topic: "y", LeaderEpoch: 1, Records: mk(3, 1)}, // next
		&storagev1.ProducePartition{Topic: "z", LeaderEpoch: 1, Records: mk(5, 1)}, // gap
	)
	if err != nil {
		t.Fatal(err)
	}
	x, y, z := resp.GetPartitions()[0], resp.GetPartitions()[1], resp.GetPartitions()[2]
	if x.GetError() != nil || !x.GetDuplicate() || x.GetBaseOffset() != 0 {
		t.Fatalf("x: %v, want a duplicate at 0", x)
	}
	if y.GetError() != nil || y.GetDuplicate() || y.GetBaseOffset() != 3 {
		t.Fatalf("y: %v, want appended at 3", y)
	}
	if z.GetError().GetReason() != commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE {
		t.Fatalf("z: %v, want OUT_OF_ORDER_SEQUENCE", z)
	}
	for topic, want := range map[string]int64{"x": 2, "y": 4, "z": 1} {
		if leo := c.node(1).node.replica(topic, 0).Log().LogEndOffset(); leo != want {
			t.Fatalf("%s: log end %d, want %d", topic, leo, want)
		}
	}
}

// A call must name a partition, and each at most once (two batches of one
// partition in one call would have no order).
func TestProduceManyPartitionsRefusesAmbiguousRequests(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopicOn("x", 1, []int32{1}, []int32{1}, 1)
	_, err := produceMany(c.storage(1), acksAll,
		&storagev1.ProducePartition{Topic: "x", LeaderEpoch: 1, Records: batch(t, "1")},
		&storagev1.ProducePartition{Topic: "x", LeaderEpoch: 1, Records: batch(t, "2")},
	)
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("partition twice: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := produceMany(c.storage(1), acksAll); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("no partitions: %v, want INVALID_ARGUMENT", err)
	}
	if leo := c.node(1).node.replica("x", 0).Log().LogEndOffset(); leo != 0 {
		t.Fatalf("log end %d after refused calls, want 0", leo)
	}
}

// Each partition of a multi-partition call needs write on its topic; a
// refused topic is answered PERMISSION_DENIED and the others appended.
func TestProduceManyPartitionsNeedsWritePerTopic(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("orders", 1, 1)
	c.createTopic("secret", 1, 1)
	s := c.handler(1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{allow("User:alice", acl.Write, acl.Topic, "orders")}})
	resp, err := s.ProducePartitions(as(t, "User:alice"), connect.NewRequest(&storagev1.ProducePartitionsRequest{
		Partitions: []*storagev1.ProducePartition{
			{Topic: "secret", LeaderEpoch: -1, Records: batch(t, "s")},
			{Topic: "orders", LeaderEpoch: -1, Records: batch(t, "o")},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	checkDenied(t, "secret", resp.Msg.GetPartitions()[0].GetError(), "User:alice", "write", "secret")
	if o := resp.Msg.GetPartitions()[1]; o.GetError() != nil || o.GetBaseOffset() != 0 {
		t.Fatalf("orders: %v, want appended at 0", o)
	}
	if leo := c.node(1).node.replica("secret", 0).Log().LogEndOffset(); leo != 0 {
		t.Fatalf("secret: log end %d, want 0", leo)
	}
}
