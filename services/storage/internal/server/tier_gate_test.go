package server

import (
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// TestProduceWaitsForTierStateWithEmptyLog: with the tiering service
// unreachable, the leader of a tiered topic whose log is empty at offset 0
// (it may have lost a directory whose offsets the tier holds) refuses
// produce with the retriable NOT_LEADER instead of assigning offsets from 0.
// A tiered topic whose log is not empty, and a topic without remote
// storage, are never held back by tiering being down.
func TestProduceWaitsForTierStateWithEmptyLog(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(t, 0, 5*time.Second)
	c.dirs[1] = dir
	topic := func(name string, tiered bool) *commonv1.TopicMetadata {
		cfg := map[string]string{"min.insync.replicas": "1", "segment.bytes": "1048576"}
		if tiered {
			cfg["remote.storage.enable"] = "true"
		}
		return &commonv1.TopicMetadata{
			Name: name, TopicId: name + "-id",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
				Replicas: []int32{1}, Isr: []int32{1}}},
			Configs: cfg,
		}
	}
	hosted := func(names ...string) func() bool {
		return func() bool {
			for _, name := range names {
				if r := c.node(1).node.replica(name, 0); r == nil || r.View().State.LeaderEpoch != 1 {
					return false
				}
			}
			return true
		}
	}

	// Written while this node runs without tiering: the log is not empty.
	c.start(1)
	c.ctrl.SetTopic(topic("kept", true))
	c.eventually("kept hosted", hosted("kept"))
	if _, err := produce(c.storage(1), "kept", commonv1.Acks_ACKS_ALL, -1, batch(t, "k0"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.stop(1)

	startTieredNode(c, 1, "http://"+freeAddr(t)) // nothing listens there
	c.ctrl.SetTopic(topic("fresh", true))
	c.ctrl.SetTopic(topic("plain", false))
	c.eventually("topics hosted", hosted("kept", "fresh", "plain"))
	if res, err := produce(c.storage(1), "kept", commonv1.Acks_ACKS_ALL, -1, batch(t, "k1"), 5*time.Second); err != nil || res.GetBaseOffset() != 1 {
		t.Fatalf("tiered topic with a non-empty log, tiering down: %v %v", res, err)
	}
	if _, err := produce(c.storage(1), "plain", commonv1.Acks_ACKS_ALL, -1, batch(t, "p0"), 5*time.Second); err != nil {
		t.Fatalf("topic without remote storage, tiering down: %v", err)
	}
	// A window, not a wait: the refusal must hold across several tier
	// rounds (100ms each); a slower machine gives fewer rounds, never a
	// false failure, since tiering stays unreachable.
	for range 5 {
		_, err := produce(c.storage(1), "fresh", commonv1.Acks_ACKS_ALL, -1, batch(t, "f0"), 5*time.Second)
		if reason(err) != commonv1.Reason_REASON_NOT_LEADER {
			t.Fatalf("tiered topic with an empty log, tier state unknown: got %v, want NOT_LEADER", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if leo := c.node(1).node.replica("fresh", 0).Log().LogEndOffset(); leo != 0 {
		t.Fatalf("refused produce appended: log end %d", leo)
	}
}
