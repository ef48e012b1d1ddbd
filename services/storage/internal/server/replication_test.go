package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

const (
	acksAll    = commonv1.Acks_ACKS_ALL
	acksLeader = commonv1.Acks_ACKS_LEADER
)

func TestProduceAcksAllFetchAndFencing(t *testing.T) {
	c := newCluster(t, 3, 10*time.Second)
	c.createTopic("t", 3, 2)
	leader := c.storage(1)

	resp, err := produce(leader, "t", acksAll, 1, batch(t, "a", "b"), commitWait)
	if err != nil {
		t.Fatalf("acks=all produce: %v", err)
	}
	if resp.GetBaseOffset() != 0 {
		t.Fatalf("base offset %d, want 0", resp.GetBaseOffset())
	}
	resp, err = produce(leader, "t", acksAll, -1, batch(t, "c"), commitWait)
	if err != nil || resp.GetBaseOffset() != 2 {
		t.Fatalf("second produce: %v %v", resp, err)
	}
	res := fetch(t, leader, "t", 0, time.Second)
	if res.GetError() != nil {
		t.Fatalf("fetch error: %v", res.GetError())
	}
	if got := values(t, res.GetRecords()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("fetched %q", got)
	}
	if res.GetHighWatermark() != 3 {
		t.Fatalf("hw %d, want 3", res.GetHighWatermark())
	}
	// acks=all means every ISR member has the batch.
	for _, id := range []int32{2, 3} {
		if leo := c.node(id).node.replica("t", 0).Log().LogEndOffset(); leo != 3 {
			t.Fatalf("follower %d LEO %d after acks=all", id, leo)
		}
	}

	// Not the leader: the error names the leader and its address.
	_, err = produce(c.storage(2), "t", acksAll, 1, batch(t, "x"), time.Second)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || reason(err) != commonv1.Reason_REASON_NOT_LEADER {
		t.Fatalf("produce to follower: %v", err)
	}
	hint := apierr.DetailOf(err).GetLeader()
	if hint.GetLeaderId() != 1 || hint.GetLeaderAddress() != c.node(1).url || hint.GetLeaderEpoch() != 1 {
		t.Fatalf("leader hint %v", hint)
	}
	fr := fetch(t, c.storage(3), "t", 0, 0)
	if fr.GetError().GetReason() != commonv1.Reason_REASON_NOT_LEADER || fr.GetError().GetLeader().GetLeaderId() != 1 {
		t.Fatalf("fetch from follower: %v", fr.GetError())
	}

	// Epoch fences: older is fenced, newer is unknown.
	c.ctrl.UpdatePartition("t", 0, func(p *commonv1.PartitionMetadata) { p.LeaderEpoch = 2 })
	c.eventually("epoch 2 applied", func() bool { return c.node(1).node.replica("t", 0).View().State.LeaderEpoch == 2 })
	_, err = produce(leader, "t", acksAll, 1, batch(t, "stale"), time.Second)
	if connect.CodeOf(err) != connect.CodeAborted || reason(err) != commonv1.Reason_REASON_FENCED_LEADER_EPOCH {
		t.Fatalf("stale epoch: %v", err)
	}
	_, err = produce(leader, "t", acksAll, 9, batch(t, "future"), time.Second)
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH {
		t.Fatalf("future epoch: %v", err)
	}
	if _, err := produce(leader, "t", acksAll, 2, batch(t, "d"), commitWait); err != nil {
		t.Fatalf("produce at epoch 2: %v", err)
	}
}

func TestConsumerNeverSeesAboveHighWatermark(t *testing.T) {
	c := newCluster(t, 3, time.Hour) // nobody leaves the ISR
	c.createTopic("hw", 3, 2)
	leader := c.storage(1)
	if _, err := produce(leader, "hw", acksAll, 1, batch(t, "committed"), commitWait); err != nil {
		t.Fatal(err)
	}
	c.stop(2)
	c.stop(3)
	// acks=leader appends, but the ISR (still 1,2,3) cannot move the HW.
	if _, err := produce(leader, "hw", acksLeader, 1, batch(t, "uncommitted"), time.Second); err != nil {
		t.Fatal(err)
	}
	// acks=all cannot be answered: it times out, never acks.
	_, err := produce(leader, "hw", acksAll, 1, batch(t, "never-acked"), 300*time.Millisecond)
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || reason(err) != commonv1.Reason_REASON_REQUEST_TIMED_OUT {
		t.Fatalf("acks=all with followers down: %v", err)
	}
	r := c.node(1).node.replica("hw", 0)
	if r.Log().LogEndOffset() != 3 || r.Log().HighWatermark() != 1 {
		t.Fatalf("leo %d hw %d, want 3 and 1", r.Log().LogEndOffset(), r.Log().HighWatermark())
	}
	res := fetch(t, leader, "hw", 0, 200*time.Millisecond)
	if got := values(t, res.GetRecords()); !slices.Equal(got, []string{"committed"}) || res.GetHighWatermark() != 1 {
		t.Fatalf("consumer saw %q hw %d", got, res.GetHighWatermark())
	}
	if res := fetch(t, leader, "hw", 1, 200*time.Millisecond); len(res.GetRecords()) != 0 {
		t.Fatalf("consumer read above the HW")
	}
}

// lagTime is the replica lag time of the tests that wait for a follower
// to leave the ISR: short, to keep them quick, yet ten long polls
// (200ms), so that a live follower on a loaded machine is not dropped.
const lagTime = 2 * time.Second

// commitWait bounds an acks=all produce that must be acknowledged: the
// wait for the followers to copy it, which on a machine busy with make
// test's other packages took over 5 s for a cluster just started.
const commitWait = 30 * time.Second

func TestISRShrinkAndNotEnoughReplicas(t *testing.T) {
	c := newCluster(t, 3, lagTime)
	c.createTopic("two", 3, 2)
	c.createTopic("three", 3, 3)
	leader := c.storage(1)
	for _, topic := range []string{"two", "three"} {
		if _, err := produce(leader, topic, acksAll, 1, batch(t, "first"), commitWait); err != nil {
			t.Fatalf("%s: %v", topic, err)
		}
	}
	c.stop(3)
	// While node 3 is still in the ISR, min.insync=3 cannot commit: the
	// produce must fail (after append, or timeout) and never ack. Should
	// the ISR already have shrunk when it arrives, it is refused up front.
	_, err := produce(leader, "three", acksAll, 1, batch(t, "pending"), 5*time.Second)
	if err == nil {
		t.Fatal("acks=all acknowledged with a follower gone and min.insync.replicas=3")
	}
	switch reason(err) {
	case commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND, commonv1.Reason_REASON_REQUEST_TIMED_OUT, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS:
	default:
		t.Fatalf("pending produce: %v", err)
	}
	c.eventually("node 3 leaves both ISRs", func() bool {
		return slices.Equal(isr(c, "two"), []int32{1, 2}) && slices.Equal(isr(c, "three"), []int32{1, 2})
	})
	if c.ctrl.Alters() < 2 {
		t.Fatalf("ISR changed without AlterPartition")
	}
	if _, err := produce(leader, "two", acksAll, 1, batch(t, "with-two"), commitWait); err != nil {
		t.Fatalf("acks=all with ISR of 2 and min 2: %v", err)
	}
	_, err = produce(leader, "three", acksAll, 1, batch(t, "refused"), 5*time.Second)
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
		t.Fatalf("min.insync=3 with ISR 2: %v", err)
	}
	if h := apierr.DetailOf(err).GetNotEnoughReplicas(); h.GetIsrSize() != 2 || h.GetMinInsyncReplicas() != 3 {
		t.Fatalf("hint %v", h)
	}
}

func TestRestartedFollowerCatchesUpAndRejoins(t *testing.T) {
	c := newCluster(t, 3, lagTime)
	c.createTopic("r", 3, 2)
	leader := c.storage(1)
	c.stop(3)
	c.eventually("node 3 leaves the ISR", func() bool { return slices.Equal(isr(c, "r"), []int32{1, 2}) })
	for i := range 20 {
		if _, err := produce(leader, "r", acksAll, 1, batch(t, "v", string(rune('a'+i))), commitWait); err != nil {
			t.Fatal(err)
		}
	}
	c.start(3)
	c.eventually("node 3 rejoins the ISR", func() bool { return slices.Equal(isr(c, "r"), []int32{1, 2, 3}) })
	c.eventually("node 3 caught up", func() bool {
		return c.node(3).node.replica("r", 0).Log().LogEndOffset() == c.node(1).node.replica("r", 0).Log().LogEndOffset()
	})
	if !bytes.Equal(logBytes(t, c.node(3).node, "r"), logBytes(t, c.node(1).node, "r")) {
		t.Fatal("restarted follower's log differs from the leader's")
	}
}

func TestLeaderChangeTruncatesDivergentTail(t *testing.T) {
	c := newCluster(t, 3, time.Hour)
	c.createTopic("d", 3, 2)
	old := c.storage(1)
	if _, err := produce(old, "d", acksAll, 1, batch(t, "kept-1", "kept-2"), commitWait); err != nil {
		t.Fatal(err)
	}
	// Followers go away; the old leader takes writes it can never commit.
	c.stop(2)
	c.stop(3)
	for _, v := range []string{"divergent-1", "divergent-2"} {
		if _, err := produce(old, "d", acksLeader, 1, batch(t, v), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if leo := c.node(1).node.replica("d", 0).Log().LogEndOffset(); leo != 4 {
		t.Fatalf("old leader LEO %d, want 4", leo)
	}
	// The controller elects node 2 (in the ISR) at epoch 2.
	c.ctrl.UpdatePartition("d", 0, func(p *commonv1.PartitionMetadata) {
		p.LeaderId, p.LeaderEpoch, p.Isr = 2, 2, []int32{2, 3}
	})
	c.start(2)
	c.start(3)
	// Node 3, restarted, leaves the ISR once the leader learns of its new
	// incarnation and rejoins through an expansion when it has caught up
	// (KIP-903): wait until the leader has seen the new incarnation fetch
	// to its log end with node 3 in the ISR, or the acks=all produce may
	// meet the shrink and be refused NOT_ENOUGH_REPLICAS on a loaded
	// machine (an ISR of 2 seen before the shrink is not enough).
	c.eventually("node 2 leads with node 3's new incarnation caught up and in its ISR", func() bool {
		r := c.node(2).node.replica("d", 0)
		if r == nil {
			return false
		}
		v := r.View()
		f, ok := v.Followers[3]
		return v.State.LeaderEpoch == 2 && slices.Contains(v.State.ISR, 3) && ok &&
			f.NodeEpoch == c.node(3).node.meta.NodeEpoch() && f.LEO >= r.Log().LogEndOffset()
	})
	if _, err := produce(c.storage(2), "d", acksAll, 2, batch(t, "new-1"), commitWait); err != nil {
		t.Fatal(err)
	}
	// The old leader is now a follower: the divergent tail is gone and
	// its log equals the new leader's.
	c.eventually("old leader converges", func() bool {
		return bytes.Equal(logBytes(t, c.node(1).node, "d"), logBytes(t, c.node(2).node, "d"))
	})
	got := values(t, logBytes(t, c.node(1).node, "d"))
	if !slices.Equal(got, []string{"kept-1", "kept-2", "new-1"}) {
		t.Fatalf("old leader log %q", got)
	}
	_, err := produce(old, "d", acksLeader, 1, batch(t, "zombie"), time.Second)
	if reason(err) != commonv1.Reason_REASON_FENCED_LEADER_EPOCH {
		t.Fatalf("write to old leader at old epoch: %v", err)
	}
}

func TestIdempotentDuplicateGetsOriginalOffsets(t *testing.T) {
	c := newCluster(t, 3, 10*time.Second)
	c.createTopic("idem", 3, 2)
	leader := c.storage(1)
	mk := func(seq int32, vals ...string) []byte {
		var recs []recordbatch.Record
		for _, v := range vals {
			recs = append(recs, recordbatch.Record{Value: []byte(v), Timestamp: time.Now().UnixMilli()})
		}
		b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := produce(leader, "idem", acksAll, 1, batch(t, "plain"), commitWait); err != nil {
		t.Fatal(err)
	}
	first := mk(0, "a", "b")
	r1, err := produce(leader, "idem", acksAll, 1, bytes.Clone(first), commitWait)
	if err != nil || r1.GetBaseOffset() != 1 || r1.GetDuplicate() {
		t.Fatalf("first: %v %v", r1, err)
	}
	r2, err := produce(leader, "idem", acksAll, 1, mk(2, "c"), commitWait)
	if err != nil || r2.GetBaseOffset() != 3 {
		t.Fatalf("second: %v %v", r2, err)
	}
	dup, err := produce(leader, "idem", acksAll, 1, bytes.Clone(first), commitWait)
	if err != nil || !dup.GetDuplicate() || dup.GetBaseOffset() != 1 {
		t.Fatalf("duplicate: %v %v", dup, err)
	}
	_, err = produce(leader, "idem", acksAll, 1, mk(9, "gap"), 5*time.Second)
	if reason(err) != commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE {
		t.Fatalf("out of order: %v", err)
	}
	if leo := c.node(1).node.replica("idem", 0).Log().LogEndOffset(); leo != 4 {
		t.Fatalf("LEO %d, want 4 (duplicate appended?)", leo)
	}
	// State is rebuilt from the log: a restarted leader still knows.
	c.stop(1)
	c.start(1)
	c.eventually("leader back", func() bool {
		n := c.node(1)
		return n != nil && n.node.replica("idem", 0) != nil && n.node.replica("idem", 0).View().State.LeaderEpoch == 1
	})
	dup, err = produce(c.storage(1), "idem", acksAll, 1, bytes.Clone(first), commitWait)
	if err != nil || !dup.GetDuplicate() || dup.GetBaseOffset() != 1 {
		t.Fatalf("duplicate after restart: %v %v", dup, err)
	}
}

// Topic configs changed while replicas are open take effect at once
// (min.insync.replicas, flush policy, retention), on the leader and on
// followers: with RF 3, one follower down and the ISR at 2, raising
// min.insync.replicas to 3 makes acks=all refuse, and lowering it again
// makes acks=all succeed, without reopening anything.
func TestTopicConfigChangesApplyLive(t *testing.T) {
	c := newCluster(t, 3, 500*time.Millisecond)
	c.createTopic("live", 3, 2)
	leader := c.storage(1)
	if _, err := produce(leader, "live", acksAll, 1, batch(t, "a"), commitWait); err != nil {
		t.Fatalf("acks=all produce: %v", err)
	}
	c.stop(3)
	c.eventually("ISR without node 3", func() bool { return slices.Equal(isr(c, "live"), []int32{1, 2}) })
	c.eventually("leader sees ISR {1,2}", func() bool { return len(c.node(1).node.replica("live", 0).View().State.ISR) == 2 })

	c.ctrl.UpdateTopicConfigs("live", func(m map[string]string) {
		m["min.insync.replicas"] = "3"
		m["flush.messages"] = "1"
		m["retention.ms"] = "60000"
	})
	for _, id := range []int32{1, 2} {
		c.eventually(fmt.Sprintf("node %d applies the new topic configs", id), func() bool {
			cfg := c.node(id).node.replica("live", 0).Config()
			return cfg.MinISR == 3 && cfg.Log.Flush.Mode == partlog.FlushSync
		})
		if got := c.node(id).node.replica("live", 0).Log().Config(); got.Flush.Mode != partlog.FlushSync || got.RetentionAge != time.Minute {
			t.Errorf("node %d log config: flush %v retention %v, want sync and 1m", id, got.Flush.Mode, got.RetentionAge)
		}
	}
	_, err := produce(leader, "live", acksAll, 1, batch(t, "refused"), 5*time.Second)
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
		t.Fatalf("acks=all with ISR 2 after min.insync.replicas was raised to 3: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if h := apierr.DetailOf(err).GetNotEnoughReplicas(); h.GetIsrSize() != 2 || h.GetMinInsyncReplicas() != 3 {
		t.Errorf("hint: ISR %d min %d, want 2 and 3", h.GetIsrSize(), h.GetMinInsyncReplicas())
	}

	c.ctrl.UpdateTopicConfigs("live", func(m map[string]string) { m["min.insync.replicas"] = "2" })
	c.eventually("leader applies min.insync.replicas 2", func() bool { return c.node(1).node.replica("live", 0).Config().MinISR == 2 })
	if _, err := produce(leader, "live", acksAll, 1, batch(t, "b"), commitWait); err != nil {
		t.Fatalf("acks=all after min.insync.replicas went back to 2: %v", err)
	}
}

// min.insync.replicas is per partition: the controller sends each
// partition's own (its default follows that partition's replicas), and a
// node applies it, rather than one value for the whole topic.
func TestMinInsyncPerPartition(t *testing.T) {
	c := newCluster(t, 2, 5*time.Second)
	c.ctrl.SetTopic(&commonv1.TopicMetadata{
		Name: "mixed", TopicId: "mixed-id",
		Partitions: []*commonv1.PartitionMetadata{
			{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, Isr: []int32{1, 2}, MinInsyncReplicas: 2},
			{Partition: 1, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, Isr: []int32{1}, MinInsyncReplicas: 1},
		},
		Configs: map[string]string{"segment.bytes": "1048576"},
	})
	c.eventually("partitions hosted with their own min.insync.replicas", func() bool {
		p0, p1 := c.node(1).node.replica("mixed", 0), c.node(1).node.replica("mixed", 1)
		return p0 != nil && p1 != nil && p0.Config().MinISR == 2 && p1.Config().MinISR == 1
	})
	resp, err := c.node(1).node.storageClient(c.node(1).url).Produce(context.Background(), connect.NewRequest(&storagev1.ProduceRequest{
		Topic: "mixed", Partition: 1, Acks: commonv1.Acks_ACKS_ALL, LeaderEpoch: 1, Records: batch(t, "a"), TimeoutMs: 10000,
	}))
	if err != nil {
		t.Fatalf("acks=all to the one-replica partition: %v", err)
	}
	if resp.Msg.GetBaseOffset() != 0 {
		t.Fatalf("base offset %d", resp.Msg.GetBaseOffset())
	}
	// A change of one partition's value reaches its replica alone.
	c.ctrl.UpdatePartition("mixed", 1, func(p *commonv1.PartitionMetadata) { p.MinInsyncReplicas = 3 })
	c.eventually("partition 1 applies min.insync.replicas 3", func() bool {
		return c.node(1).node.replica("mixed", 1).Config().MinISR == 3
	})
	if got := c.node(1).node.replica("mixed", 0).Config().MinISR; got != 2 {
		t.Fatalf("partition 0's min.insync.replicas changed to %d with partition 1's", got)
	}
}
