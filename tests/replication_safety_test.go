package tests

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/tests/harness"
)

// TestWipedReplicaDoesNotRejoinOnStaleState is KIP-903's scenario with
// real processes. RF 3, min.insync.replicas 2, a replica lag time (20 s)
// longer than the node session timeout (3 s), so the leader's memory of a
// follower outlives the follower's registration.
//
//  1. Records are acknowledged with acks=all; follower F is killed and
//     the controller drops it from the ISR.
//  2. The link to the leader is stalled (its proxy holds every byte), F's
//     partition directory is deleted and F restarts: it registers again,
//     with a new node epoch and an empty log, and cannot fetch.
//  3. The leader must not put F back in the ISR on what it knew of F's
//     previous process: either the controller shows F in the ISR, which
//     fails the test at once when F's log end is below the high
//     watermark, or the leader's view of F is reset (log end -1, the new
//     node epoch), which is what must happen.
//  4. The link is released; F catches up and rejoins; the leader is
//     killed; every acknowledged record is still read back at its offset
//     from the new leader (and the replication check holds throughout).
func TestWipedReplicaDoesNotRejoinOnStaleState(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3, ReplicaLagTime: 20 * time.Second, StorageProxies: true})
	ctx := harness.Deadline(t, 150*time.Second)
	const topic = "wiped"
	c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	p := c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)
	rc := checkReplication(t, c, topic, 1)
	rc.produceValues(ctx, t, 0, seqValues("before", 10)...)

	leader, f := c.Storage(int(p.GetLeaderId())), follower(c, p)
	f.Kill()
	c.WaitPartition(harness.Deadline(t, 20*time.Second), topic, 0, "the killed follower out of the ISR",
		func(p *commonv1.PartitionMetadata) bool { return !slices.Contains(p.GetIsr(), int32(f.ID)) })

	leader.Proxy.Pause(harness.ToServer)
	leader.Proxy.Pause(harness.ToClient)
	if err := os.RemoveAll(fmt.Sprintf("%s/%s-0", f.DataDir, topic)); err != nil {
		t.Fatal(err)
	}
	f.Restart()
	epoch := nodeEpoch(t, c, f.ID)
	t.Logf("%s restarted with an empty partition directory, node epoch %d; the leader %s is unreachable for it", f.Name(), epoch, leader.Name())

	deadline := time.Now().Add(30 * time.Second)
	for {
		lv, err := describeLog(ctx, leader, topic, 0)
		if err != nil {
			t.Fatalf("describe log on the leader %s: %v", leader.Name(), err)
		}
		var fv string
		reset := false
		for _, r := range lv.GetReplicas() {
			if r.GetNodeId() == int32(f.ID) {
				fv = fmt.Sprintf("log end %d, node epoch %d, in sync %v", r.GetLogEndOffset(), r.GetNodeEpoch(), r.GetInSync())
				reset = r.GetLogEndOffset() == -1 && r.GetNodeEpoch() == epoch
			}
		}
		cp, err := c.Partition(ctx, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(cp.GetIsr(), int32(f.ID)) {
			fr, err := describeLog(ctx, f, topic, 0)
			if err != nil || fr.GetLogEndOffset() < lv.GetHighWatermark() {
				t.Fatalf("%s was put back in the ISR %v before fetching: its log end %d (%v), high watermark %d; the leader's view of it: %s",
					f.Name(), cp.GetIsr(), fr.GetLogEndOffset(), err, lv.GetHighWatermark(), fv)
			}
		}
		if reset {
			t.Logf("the leader forgot %s's previous process: %s", f.Name(), fv)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader's view of the restarted %s was never reset: %s", f.Name(), fv)
		}
		time.Sleep(100 * time.Millisecond)
	}

	leader.Proxy.Resume(harness.ToServer)
	leader.Proxy.Resume(harness.ToClient)
	c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "the restarted follower back in the ISR", harness.FullISR)
	rc.produceValues(ctx, t, 0, seqValues("rejoined", 5)...)
	leader.Kill()
	c.WaitPartition(harness.Deadline(t, 20*time.Second), topic, 0, "a new leader",
		func(np *commonv1.PartitionMetadata) bool {
			return np.GetLeaderId() >= 0 && np.GetLeaderId() != int32(leader.ID)
		})
	rc.produceValues(ctx, t, 0, seqValues("after", 5)...)
	rc.finish(ctx)
}

// nodeEpoch returns the node epoch of storage node id's current
// registration.
func nodeEpoch(t *testing.T, c *harness.Cluster, id int) int64 {
	t.Helper()
	resp, err := c.Ctl().DescribeCluster(harness.Deadline(t, 10*time.Second), connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
	if err != nil {
		t.Fatalf("describe cluster: %v", err)
	}
	for _, n := range resp.Msg.GetNodes() {
		if n.GetNode().GetNodeId() == int32(id) {
			return n.GetNodeEpoch()
		}
	}
	t.Fatalf("node %d not registered", id)
	return 0
}

// TestTopicConfigChangeReachesOpenReplicas is the reproduction of
// topic configs not reaching open replicas: RF 3, min.insync.replicas 2,
// one follower killed and the ISR down to 2; "topic alter -c
// min.insync.replicas=3" must make acks=all refuse (NOT_ENOUGH_REPLICAS)
// without any restart, and setting it back to 2 must make acks=all work
// again.
func TestTopicConfigChangeReachesOpenReplicas(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3})
	ctx := harness.Deadline(t, 120*time.Second)
	const topic = "alter-min-isr"
	c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	p := c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)
	rc := checkReplication(t, c, topic, 1)
	rc.produceValues(ctx, t, 0, "first")

	f := follower(c, p)
	f.Kill()
	p = c.WaitPartition(harness.Deadline(t, 15*time.Second), topic, 0, "the ISR without the killed follower",
		func(p *commonv1.PartitionMetadata) bool {
			return len(p.GetIsr()) == 2 && !slices.Contains(p.GetIsr(), int32(f.ID))
		})
	leader := c.Storage(int(p.GetLeaderId()))
	alter := func(minISR string) {
		t.Helper()
		if _, err := c.Ctl().AlterTopicConfig(ctx, connect.NewRequest(&controllerv1.AlterTopicConfigRequest{
			Name: topic, SetConfigs: map[string]string{"min.insync.replicas": minISR},
		})); err != nil {
			t.Fatalf("alter min.insync.replicas=%s: %v", minISR, err)
		}
	}
	alter("3")

	// Until the change reaches the leader acks=all may still succeed; it
	// must start refusing, with the hint naming ISR 2 and minimum 3.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		v := fmt.Sprintf("while-altering-%d", i)
		resp, err := produce(ctx, leader.StorageClient(), topic, 0, p.GetLeaderEpoch(), commonv1.Acks_ACKS_ALL, 5*time.Second,
			textBatch(t, "", []string{v}, -1, 0))
		if err == nil {
			rc.ack(0, resp.GetBaseOffset(), v)
			if time.Now().After(deadline) {
				t.Fatalf("acks=all still acknowledged with ISR %v, 20 s after min.insync.replicas was raised to 3", p.GetIsr())
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		d := apierr.DetailOf(err)
		if d.GetReason() == commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND {
			// Appended under the old minimum, then refused when the change
			// reached the leader while it waited: not acknowledged, and the
			// next produce meets the new minimum before its append.
			t.Logf("acks=all %s refused after its append while the change arrived: %s", v, describeErr(err))
			if time.Now().After(deadline) {
				t.Fatalf("acks=all still appended before refusing, 20 s after min.insync.replicas was raised to 3")
			}
			continue
		}
		if d.GetReason() != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
			t.Fatalf("acks=all after min.insync.replicas=3: %v, want NOT_ENOUGH_REPLICAS", describeErr(err))
		}
		if h := d.GetNotEnoughReplicas(); h.GetIsrSize() != 2 || h.GetMinInsyncReplicas() != 3 {
			t.Errorf("hint: ISR %d, min %d; want 2 and 3", h.GetIsrSize(), h.GetMinInsyncReplicas())
		}
		t.Logf("acks=all refused after %d acknowledged while the change travelled: %s", i, describeErr(err))
		break
	}

	alter("2")
	rc.produceValues(harness.Deadline(t, 20*time.Second), t, 0, "after-lowering")
	f.Restart()
	c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "the follower back in the ISR", harness.FullISR)
	rc.finish(ctx)
}
