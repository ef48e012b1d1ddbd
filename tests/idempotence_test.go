package tests

import (
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/harness"
)

// TestIdempotentRetryAfterLeaderKill: an idempotent producer's batch is
// acknowledged, the partition rolls several segments with other traffic,
// and the leader is killed with SIGKILL and started again. The producer's
// retry of the same bytes (as after a lost response) is recognised as a
// duplicate and answered with the original offsets, and the producer's
// sequence goes on where it was: the restarted leader loaded its producer
// state from its snapshots, however many segments rolled since the batch.
func TestIdempotentRetryAfterLeaderKill(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1})
	ctx := harness.Deadline(t, 90*time.Second)
	const topic = "idem"
	c.CreateTopic(ctx, topic, 1, 1, map[string]string{"segment.bytes": "4096", "min.insync.replicas": "1"})
	rc := checkReplication(t, c, topic, 1)

	const pid = 4242
	first := textBatch(t, "k", []string{"a", "b"}, pid, 0)
	resp, err := produceToLeaderResp(ctx, c, topic, 0, first)
	if err != nil || resp.GetDuplicate() {
		t.Fatalf("first produce: %v %v", resp, err)
	}
	orig := resp.GetBaseOffset()
	rc.ack(0, orig, "a")
	rc.ack(0, orig+1, "b")
	filler := make([]string, 8)
	for i := range filler {
		filler[i] = "filler value of a few dozen bytes, repeated to roll segments"
	}
	for range 40 { // about 20 KiB: five segments of 4 KiB after the first batch
		if _, err := produceToLeader(ctx, t, c, topic, 0, textBatch(t, "", filler, -1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	leader, _ := c.Leader(ctx, topic, 0)
	if r, err := describeLog(ctx, leader, topic, 0); err != nil || r.GetLogEndOffset() < 300 {
		t.Fatalf("log before the kill: %v %v", r, err)
	}

	leader.Kill()
	leader.Restart()

	resp, err = produceToLeaderResp(ctx, c, topic, 0, first)
	if err != nil || !resp.GetDuplicate() || resp.GetBaseOffset() != orig {
		t.Fatalf("retry after the leader restarted: %v %v; want duplicate=true at offset %d", resp, err, orig)
	}
	resp, err = produceToLeaderResp(ctx, c, topic, 0, textBatch(t, "k", []string{"c"}, pid, 2))
	if err != nil || resp.GetDuplicate() {
		t.Fatalf("next sequence after the restart: %v %v", resp, err)
	}
	rc.ack(0, resp.GetBaseOffset(), "c")
	_, err = produceToLeaderResp(ctx, c, topic, 0, textBatch(t, "k", []string{"gap"}, pid, 9))
	if err == nil {
		t.Fatal("a sequence gap after the restart was accepted: the producer's state was lost")
	}
	t.Logf("gap refused: %s", describeErr(err))
	rc.finish(ctx)
}
