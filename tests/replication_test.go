package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/tests/harness"
)

// follower returns a replica of p other than its leader.
func follower(c *harness.Cluster, p *commonv1.PartitionMetadata) *harness.Node {
	for _, id := range p.GetReplicas() {
		if id != p.GetLeaderId() {
			return c.Storage(int(id))
		}
	}
	return nil
}

// produceValues sends each value as its own acks=all batch through the
// current leader (following leader changes) and fails the test unless every
// one is acknowledged. It returns the acknowledged offsets.
func produceValues(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, partition int32, values ...string) []int64 {
	t.Helper()
	var offs []int64
	for _, v := range values {
		off, err := produceToLeader(ctx, t, c, topic, partition, textBatch(t, "", []string{v}, -1, 0))
		if err != nil {
			t.Fatalf("produce %q with acks=all: %v", v, describeErr(err))
		}
		offs = append(offs, off)
	}
	return offs
}

func seqValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// requireValuesAt fails the test unless records holds value values[i] at
// offset offs[i] for every i.
func requireValuesAt(t *testing.T, records []recordbatch.Record, values []string, offs []int64) {
	t.Helper()
	at := make(map[int64]string, len(records))
	for _, r := range records {
		at[r.Offset] = string(r.Value)
	}
	for i, v := range values {
		if got, ok := at[offs[i]]; !ok || got != v {
			t.Errorf("acknowledged %q at offset %d; the log holds %q there (present %v)", v, offs[i], got, ok)
		}
	}
}

// TestReplicaRestartCatchesUp proves that a killed follower does not stop
// acks=all writes while min.insync.replicas still holds, and that it
// catches up when restarted: with RF 3 and min.insync.replicas 2, after
// SIGKILL of a follower every acks=all produce is still acknowledged and
// the controller's ISR drops to the two live replicas; after a restart with
// the same argv the follower is back in the ISR within 45 s, and then all
// three replicas hold byte-identical logs containing every acknowledged
// record at its acknowledged offset.
func TestReplicaRestartCatchesUp(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3})
	ctx := harness.Deadline(t, 120*time.Second)
	const topic = "catchup"
	c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	p := c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)
	rc := checkReplication(t, c, topic, 1)

	var values []string
	var offs []int64
	before := seqValues("before", 20)
	values, offs = append(values, before...), append(offs, rc.produceValues(ctx, t, 0, before...)...)

	f := follower(c, p)
	f.Kill()
	during := seqValues("during", 20)
	values, offs = append(values, during...), append(offs, rc.produceValues(ctx, t, 0, during...)...)
	shrunk := c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "the ISR without the killed follower",
		func(p *commonv1.PartitionMetadata) bool {
			return len(p.GetIsr()) == 2 && !slices.Contains(p.GetIsr(), int32(f.ID))
		})
	t.Logf("ISR after killing %s: %s", f.Name(), harness.FormatPartition(shrunk))
	more := seqValues("shrunk", 20)
	values, offs = append(values, more...), append(offs, rc.produceValues(ctx, t, 0, more...)...)

	f.Restart()
	start := time.Now()
	c.WaitPartition(harness.Deadline(t, 45*time.Second), topic, 0, "the restarted follower back in the ISR", harness.FullISR)
	t.Logf("%s back in the ISR %v after its restart", f.Name(), time.Since(start).Round(time.Millisecond))

	end := waitConverged(harness.Deadline(t, 30*time.Second), t, c, topic, 0)
	records := readPartition(ctx, t, c, topic, 0)
	if int64(len(records)) != end || len(records) != len(values) {
		t.Errorf("log holds %d records (end offset %d); %d were acknowledged", len(records), end, len(values))
	}
	requireValuesAt(t, records, values, offs)
	rc.finish(ctx)
	checkReplicasIdentical(ctx, t, c, topic)
}

// TestAcksAllTooFewReplicas proves that acks=all refuses, rather than
// acknowledges, a write the ISR is too small for: with RF 3 and
// min.insync.replicas 3, once a killed follower has left the ISR an
// acks=all produce fails with UNAVAILABLE / REASON_NOT_ENOUGH_REPLICAS, a
// NotEnoughReplicasHint of ISR 2 and minimum 3, and a message naming both
// numbers; the leader's log end offset does not move (nothing appended) and
// the record never appears in the log. The same leader still takes an
// acks=1 write, and acks=all works again once the follower is restarted and
// back in the ISR. The acks=1 write is not visible to consumers (the high
// watermark stays below it, although the other ISR member has it) until
// the ISR is back at min.insync.replicas (KIP-966).
func TestAcksAllTooFewReplicas(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3})
	ctx := harness.Deadline(t, 120*time.Second)
	const topic = "too-few"
	c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "3"})
	p := c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)
	rc := checkReplication(t, c, topic, 1)
	okOffs := rc.produceValues(ctx, t, 0, "ok-0")

	f := follower(c, p)
	f.Kill()
	p = c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "the ISR without the killed follower",
		func(p *commonv1.PartitionMetadata) bool {
			return len(p.GetIsr()) == 2 && !slices.Contains(p.GetIsr(), int32(f.ID))
		})
	leader := c.Storage(int(p.GetLeaderId()))

	// The leader learns the shrunk ISR from the controller's answer to its
	// own AlterPartition, before the controller shows it, so its view is
	// current here.
	before, err := describeLog(ctx, leader, topic, 0)
	if err != nil {
		t.Fatalf("describe log on %s: %v", leader.Name(), err)
	}
	_, err = produce(ctx, leader.StorageClient(), topic, 0, p.GetLeaderEpoch(), commonv1.Acks_ACKS_ALL, 5*time.Second,
		textBatch(t, "", []string{"refused"}, -1, 0))
	if err == nil {
		t.Fatalf("acks=all produce with ISR %v below min.insync.replicas 3 was acknowledged", p.GetIsr())
	}
	d := apierr.DetailOf(err)
	if connect.CodeOf(err) != connect.CodeUnavailable || d.GetReason() != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
		t.Fatalf("acks=all produce with ISR %v: got %v, want UNAVAILABLE / REASON_NOT_ENOUGH_REPLICAS", p.GetIsr(), describeErr(err))
	}
	if h := d.GetNotEnoughReplicas(); h.GetIsrSize() != 2 || h.GetMinInsyncReplicas() != 3 {
		t.Errorf("not-enough-replicas hint: isr %d min %d, want 2 and 3", h.GetIsrSize(), h.GetMinInsyncReplicas())
	}
	if msg := d.GetMessage(); !strings.Contains(msg, "2") || !strings.Contains(msg, "min.insync.replicas") || !strings.Contains(msg, "3") {
		t.Errorf("error message %q does not name the ISR size 2 and min.insync.replicas 3", msg)
	}
	after, err := describeLog(ctx, leader, topic, 0)
	if err != nil {
		t.Fatalf("describe log on %s: %v", leader.Name(), err)
	}
	if after.GetLogEndOffset() != before.GetLogEndOffset() {
		t.Errorf("refused produce moved the leader's log end offset from %d to %d", before.GetLogEndOffset(), after.GetLogEndOffset())
	}

	// acks=1 does not depend on the ISR.
	resp, err := produce(ctx, leader.StorageClient(), topic, 0, p.GetLeaderEpoch(), commonv1.Acks_ACKS_LEADER, 5*time.Second,
		textBatch(t, "", []string{"leader-1"}, -1, 0))
	if err != nil {
		t.Fatalf("acks=1 produce with ISR %v: %v", p.GetIsr(), describeErr(err))
	}
	leaderOff := resp.GetBaseOffset()
	// The other ISR member replicates it and the leader learns so; with
	// the ISR below min.insync.replicas it must stay invisible.
	var other *harness.Node
	for _, id := range p.GetIsr() {
		if id != p.GetLeaderId() {
			other = c.Storage(int(id))
		}
	}
	for {
		lv, err := describeLog(ctx, leader, topic, 0)
		if err != nil {
			t.Fatalf("describe log on %s: %v", leader.Name(), err)
		}
		seen := false
		for _, r := range lv.GetReplicas() {
			seen = seen || (r.GetNodeId() == int32(other.ID) && r.GetLogEndOffset() > leaderOff)
		}
		if seen {
			if lv.GetHighWatermark() > leaderOff {
				t.Fatalf("acks=1 record at %d is visible (high watermark %d) with the ISR %v below min.insync.replicas 3",
					leaderOff, lv.GetHighWatermark(), p.GetIsr())
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never replicated the acks=1 record at %d", other.Name(), leaderOff)
		case <-time.After(50 * time.Millisecond):
		}
	}

	f.Restart()
	c.WaitPartition(harness.Deadline(t, 45*time.Second), topic, 0, "the restarted follower back in the ISR", harness.FullISR)
	// The leader may learn the expanded ISR a moment after the controller
	// shows it; produceToLeader retries NOT_ENOUGH_REPLICAS until then.
	okOffs = append(okOffs, rc.produceValues(harness.Deadline(t, 30*time.Second), t, 0, "ok-2")...)

	waitConverged(harness.Deadline(t, 30*time.Second), t, c, topic, 0)
	records := readPartition(ctx, t, c, topic, 0)
	for _, r := range records {
		if string(r.Value) == "refused" {
			t.Errorf("the refused record is in the log at offset %d", r.Offset)
		}
	}
	requireValuesAt(t, records, []string{"ok-0", "leader-1", "ok-2"}, []int64{okOffs[0], leaderOff, okOffs[1]})
	if len(records) != 3 {
		t.Errorf("log holds %d records, want 3 (ok-0, leader-1, ok-2)", len(records))
	}
	rc.finish(ctx)
}
