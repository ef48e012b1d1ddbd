package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// Elastic storage with real processes: scale-out under load, drain under
// load, leader balance after a restart, and a move surviving the death of
// the active controller. The heavier ones (killing a move's source or
// target, the rebalance measurement) are in scale_long_test.go behind the
// "scale" build tag: make test-scale runs them.

// maxStall is how long a consumer may go without a record while producers
// write and partitions move: the few seconds of a leader change, plus
// slack for this machine's load.
const maxStall = 10 * time.Second

// strataCLI returns a function running the strata binary against gateway:
// its stdout, or an error with its stderr.
func strataCLI(t *testing.T, gateway string) func(args ...string) (string, error) {
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	return func(args ...string) (string, error) {
		cmd := exec.Command(strata, append([]string{"--gateway", gateway}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("strata %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
}

// TestScaleOutUnderLoad is the scale-out: a 3-node strata dev, a
// 12-partition RF=3 topic with acks=all producers and a consumer running,
// `strata dev scale --storage-nodes 5` and `strata cluster rebalance
// --wait`. Every node ends within one replica and one leader of even (7 or
// 8 replicas, 2 or 3 leaders), no acknowledged record is lost or
// duplicated (each is read once, where it was acknowledged), and the
// consumer never goes more than maxStall without records.
func TestScaleOutUnderLoad(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--ready-timeout", "3m")
	strata, dir, base := d.Strata, d.Dir, d.BasePort
	ctx := harness.Deadline(t, 6*time.Minute)
	gateway := fmt.Sprintf("http://127.0.0.1:%d", base)
	cli := strataCLI(t, gateway)
	if _, err := cli("topic", "create", "orders", "-p", "12", "-r", "3", "-c", "min.insync.replicas=2"); err != nil {
		t.Fatal(err)
	}

	load := startLoad(t, gateway, "orders", 200, 48, 200)
	tail := startTailer(t, gateway, "orders", 12)
	defer tail.close()
	for load.ackedCount() < 400 {
		select {
		case <-ctx.Done():
			t.Fatalf("producers got only %d acknowledgements", load.ackedCount())
		case <-time.After(200 * time.Millisecond):
		}
	}
	tail.watch(true)

	scale := exec.Command(strata, "dev", "scale", "--dir", dir, "--storage-nodes", "5", "--timeout", "3m")
	if out, err := scale.CombinedOutput(); err != nil {
		t.Fatalf("strata dev scale: %v\n%s", err, out)
	} else {
		t.Logf("strata dev scale:\n%s", out)
	}
	out, err := cli("cluster", "rebalance", "--wait", "--interval", "1s", "--timeout", "4m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strata cluster rebalance --wait:\n%s", out)

	// Whatever started the moves (this rebalance or the controller's own
	// after the nodes joined), none runs now; the nodes are even.
	var nodes []struct {
		ID       int32  `json:"id"`
		State    string `json:"state"`
		Replicas int    `json:"replicas"`
		Leaders  int    `json:"leaders"`
		Adding   int    `json:"adding"`
		Removing int    `json:"removing"`
	}
	out, err = cli("cluster", "nodes", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || len(nodes) != 5 {
		t.Fatalf("cluster nodes: %v: %s", err, out)
	}
	for _, n := range nodes {
		if n.State != "alive" || n.Replicas < 7 || n.Replicas > 8 || n.Leaders < 2 || n.Leaders > 3 || n.Adding+n.Removing != 0 {
			t.Errorf("node %d: %+v; want alive with 7..8 replicas and 2..3 leaders, nothing moving", n.ID, n)
		}
	}
	t.Logf("cluster nodes: %s", out)

	load.waitMoreAcks(t, ctx, 300) // the load runs on the new placement a while
	tail.watch(false)
	load.finish(t)
	tail.waitFor(t, ctx, load.acked)
	checkExactlyOnce(t, load, tail)
	if g := tail.gap(); g > maxStall {
		t.Errorf("the consumer went %s without a record during the scale-out; at most %s allowed", g, maxStall)
	} else {
		t.Logf("longest consumer stall during the scale-out: %s", g)
	}
}

// TestDrainUnderLoad drains a node with `strata node drain --wait` while
// producers and a consumer run, then kills it: nothing acknowledged is
// lost or duplicated, no partition is ever without a leader or below
// min.insync.replicas, and the cluster is healthy afterwards with the
// drained node retired.
func TestDrainUnderLoad(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 4})
	gw := harness.StartGateway(t, c)
	ctx := harness.Deadline(t, 4*time.Minute)
	c.CreateTopic(ctx, "orders", 8, 3, map[string]string{"min.insync.replicas": "2"})
	c.WaitFullISR(ctx, "orders", 8)
	watch := watchISR(c, "orders")
	load := startLoad(t, gw.URL, "orders", 150, 32, 200)
	tail := startTailer(t, gw.URL, "orders", 8)
	defer tail.close()
	for load.ackedCount() < 300 {
		select {
		case <-ctx.Done():
			t.Fatalf("producers got only %d acknowledgements", load.ackedCount())
		case <-time.After(200 * time.Millisecond):
		}
	}
	tail.watch(true)

	cli := strataCLI(t, gw.URL)
	out, err := cli("node", "drain", "4", "--wait", "--interval", "1s", "--timeout", "3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strata node drain 4 --wait:\n%s", out)
	if !strings.Contains(out, "node 4 holds nothing: safe to stop") {
		t.Fatalf("drain --wait did not report the node empty:\n%s", out)
	}
	d, err := c.Describe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.GetPartitions() {
		if slices.Contains(p.GetReplicas(), 4) || p.GetLeaderId() == 4 {
			t.Errorf("partition %d still on drained node 4: %s", p.GetPartition(), harness.FormatPartition(p))
		}
	}
	c.Storage(4).Kill()
	load.waitMoreAcks(t, ctx, 300) // the load runs without node 4 a while
	if _, err := cli("cluster", "status", "--exit-when-healthy", "--timeout", "60s"); err != nil {
		t.Errorf("cluster not healthy with the drained node stopped: %v", err)
	}
	tail.watch(false)
	load.finish(t)
	tail.waitFor(t, ctx, load.acked)
	checkExactlyOnce(t, load, tail)
	watch.check(t, 2)
	if g := tail.gap(); g > maxStall {
		t.Errorf("the consumer went %s without a record during the drain", g)
	}
}

// TestLeadersReturnToPreferred: after a node restarts, the automatic
// leader balance gives it back the leadership of the partitions it is the
// preferred replica of (Kafka's auto.leader.rebalance.enable), once it is
// back in their ISR.
func TestLeadersReturnToPreferred(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3,
		Env: []string{"STRATA_LEADER_BALANCE_INTERVAL=1s"}}) // read by every controller
	ctx := harness.Deadline(t, 3*time.Minute)
	c.CreateTopic(ctx, "orders", 6, 3, nil)
	c.WaitFullISR(ctx, "orders", 6)
	d, err := c.Describe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var led []int32
	for _, p := range d.GetPartitions() {
		if p.GetReplicas()[0] == 1 {
			led = append(led, p.GetPartition())
		}
	}
	if len(led) == 0 {
		t.Fatal("node 1 is the preferred leader of no partition")
	}
	c.Storage(1).Kill()
	for _, p := range led {
		c.WaitPartition(ctx, "orders", p, "a leader other than node 1", func(p *commonv1.PartitionMetadata) bool {
			return p.GetLeaderId() >= 0 && p.GetLeaderId() != 1
		})
	}
	// Data written while node 1 is down: it must catch up before it may
	// lead again.
	for i := range 20 {
		for _, p := range led {
			if _, err := produceToLeader(ctx, t, c, "orders", p, textBatch(t, "k", []string{fmt.Sprint(i)}, -1, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Storage(1).Restart()
	for _, p := range led {
		got := c.WaitPartition(ctx, "orders", p, "node 1 leading again", func(p *commonv1.PartitionMetadata) bool {
			return p.GetLeaderId() == 1
		})
		if !slices.Contains(got.GetIsr(), 1) {
			t.Errorf("partition %d led by node 1 outside the ISR: %s", p, harness.FormatPartition(got))
		}
	}
	for p := range int32(6) {
		waitConverged(ctx, t, c, "orders", p)
	}
}

// TestMoveSurvivesControllerKill SIGKILLs the active controller while a
// throttled partition move runs under load. Another controller takes over
// and finishes the move from the partition record; the ISR never drops
// below min.insync.replicas, no partition is without a leader, nothing
// acknowledged is lost or duplicated, and the replicas end byte-identical.
func TestMoveSurvivesControllerKill(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{Controllers: 3, StorageNodes: 3})
	ctx := harness.Deadline(t, 5*time.Minute)
	c.CreateTopic(ctx, "orders", 3, 3, map[string]string{"min.insync.replicas": "2"})
	c.WaitFullISR(ctx, "orders", 3)
	c.AddStorageNode()
	gw := harness.StartGateway(t, c)

	// About 1.5 MB per partition, so the move below, throttled to 100
	// kB/s, takes well over ten seconds.
	fillTopic(t, ctx, gw.URL, "orders", 3000, 30, 1500)

	watch := watchISR(c, "orders")
	load := startLoad(t, gw.URL, "orders", 50, 30, 100)
	tail := startTailer(t, gw.URL, "orders", 3)
	defer tail.close()
	p0 := c.WaitPartition(ctx, "orders", 0, "a leader", func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() >= 0 })
	target := slices.Clone(p0.GetReplicas())
	target[slices.Index(target, p0.GetLeaderId())] = 4 // the leader's replica moves to node 4
	c.Move(ctx, "orders", 0, 100_000, target...)
	c.WaitPartition(ctx, "orders", 0, "node 4 catching up", func(p *commonv1.PartitionMetadata) bool {
		return slices.Contains(p.GetAddingReplicas(), 4)
	})
	// The copy is under way: node 4's replica holds some of the partition.
	testwait.Until(t, time.Minute, "node 4's replica of orders/0 to hold records", func() error {
		r, err := describeLog(ctx, c.Storage(4), "orders", 0)
		if err != nil {
			return err
		}
		return testwait.True(r.GetLogEndOffset() > 0)
	})
	if p, err := c.Partition(ctx, "orders", 0); err != nil || !harness.Moving(p) {
		t.Fatalf("the move finished before the controller was killed (%v): the throttle did not hold it", err)
	}
	active := c.ActiveController(ctx)
	active.Kill()
	got := waitMoveDone(ctx, c, "orders", 0, target...)
	t.Logf("move completed after the active controller-%d was killed: %s", active.ID, harness.FormatPartition(got))
	if got.GetLeaderId() != target[0] {
		t.Errorf("leader %d, want the target's preferred replica %d", got.GetLeaderId(), target[0])
	}

	load.finish(t)
	tail.waitFor(t, ctx, load.acked)
	checkExactlyOnce(t, load, tail)
	watch.check(t, 2)
	// The throttle was lifted with the last move.
	resp, err := c.Ctl().ListPartitionReassignments(ctx, connect.NewRequest(&controllerv1.ListPartitionReassignmentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetReassignments()) != 0 || resp.Msg.GetThrottleBytesPerSecond() != 0 {
		t.Errorf("after the move: %d moves, throttle %d", len(resp.Msg.GetReassignments()), resp.Msg.GetThrottleBytesPerSecond())
	}
	for p := range int32(3) {
		waitConverged(ctx, t, c, "orders", p)
	}
	checkReplicasIdentical(ctx, t, c, "orders")
}
