//go:build scale

package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/tests/harness"
)

// The heavy elastic-storage tests, built only with the "scale" tag:
// `make test-scale` runs them (with the fast ones of scale_test.go).

var (
	rebalanceMB       = flag.Int("rebalance-mb", 256, "TestMeasureRebalance: megabytes the topic holds before the rebalance")
	rebalanceThrottle = flag.Int64("rebalance-throttle", 10_000_000, "TestMeasureRebalance: bytes per second per node of the throttled run")
)

// moveSetup is a 3-node cluster grown to nodes storage nodes, with a
// gateway and a 3-partition RF=3 topic holding about 1.5 MB per partition
// (so a move throttled to 100 kB/s takes over ten seconds), a steady load
// and a consumer running, and an ISR watch.
type moveSetup struct {
	c     *harness.Cluster
	gw    *harness.Node
	load  *ackedLoad
	tail  *tailer
	watch *isrWatch
}

func setupMove(t *testing.T, ctx context.Context, nodes int) *moveSetup {
	t.Helper()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3})
	c.CreateTopic(ctx, "orders", 3, 3, map[string]string{"min.insync.replicas": "2"})
	c.WaitFullISR(ctx, "orders", 3)
	for len(c.StorageNodes()) < nodes {
		c.AddStorageNode()
	}
	gw := harness.StartGateway(t, c)
	fillTopic(t, ctx, gw.URL, "orders", 3000, 30, 1500)
	s := &moveSetup{c: c, gw: gw, watch: watchISR(c, "orders"), load: startLoad(t, gw.URL, "orders", 50, 30, 100)}
	s.tail = startTailer(t, gw.URL, "orders", 3)
	t.Cleanup(s.tail.close)
	return s
}

// finish stops the load and checks everything: exactly once, the ISR
// watch, converged and byte-identical replicas.
func (s *moveSetup) finish(t *testing.T, ctx context.Context) {
	t.Helper()
	s.load.finish(t)
	s.tail.waitFor(t, ctx, s.load.acked)
	checkExactlyOnce(t, s.load, s.tail)
	s.watch.check(t, 2)
	for p := range int32(3) {
		waitConverged(ctx, t, s.c, "orders", p)
	}
	checkReplicasIdentical(ctx, t, s.c, "orders")
}

// waitCopying waits until the adding replicas hold some of the partition,
// so a kill lands in the middle of the copy, and checks the move still
// runs.
func waitCopying(t *testing.T, ctx context.Context, c *harness.Cluster, topic string, partition int32, node int32) {
	t.Helper()
	for {
		r, err := describeLog(ctx, c.Storage(int(node)), topic, partition)
		if err == nil && r.GetLocalSizeBytes() > 100_000 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %d never started copying %s-%d: %v", node, topic, partition, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if p, err := c.Partition(ctx, topic, partition); err != nil || !harness.Moving(p) {
		t.Fatalf("the move of %s-%d finished before the kill (%v); the throttle did not hold it", topic, partition, err)
	}
}

// TestMoveSurvivesSourceKill SIGKILLs the leader of a partition while it
// is being moved off it (to two new nodes). Another in-sync replica leads,
// the new replicas finish copying from it, the move completes; the ISR
// never drops below min.insync.replicas, nothing acknowledged is lost or
// duplicated, and the killed node deletes its copy when it returns.
func TestMoveSurvivesSourceKill(t *testing.T) {
	ctx := harness.Deadline(t, 6*time.Minute)
	s := setupMove(t, ctx, 5)
	p0 := s.c.WaitPartition(ctx, "orders", 0, "a leader", func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() >= 0 })
	source := p0.GetLeaderId()
	var keep int32 = -1
	for _, r := range p0.GetReplicas() {
		if r != source && keep < 0 {
			keep = r
		}
	}
	target := []int32{4, 5, keep}
	s.c.Move(ctx, "orders", 0, 100_000, target...)
	waitCopying(t, ctx, s.c, "orders", 0, 4)
	s.c.Storage(int(source)).Kill()
	got := waitMoveDone(ctx, s.c, "orders", 0, target...)
	t.Logf("move completed with its source node %d killed: %s", source, harness.FormatPartition(got))
	s.c.Storage(int(source)).Restart()
	dir := filepath.Join(s.c.Storage(int(source)).DataDir, "orders-0")
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("restarted node %d kept its copy of orders-0 at %s", source, dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
	s.finish(t, ctx)
}

// TestMoveTargetKillRollsBack SIGKILLs the node a partition is moving to.
// The move cannot finish without it, so it is cancelled: the partition
// goes back to its replicas (enough of them are in sync) and the returning
// node deletes its partial copy. The same move then runs again to the end.
// Throughout, the ISR stays at or above min.insync.replicas and nothing
// acknowledged is lost or duplicated.
func TestMoveTargetKillRollsBack(t *testing.T) {
	ctx := harness.Deadline(t, 6*time.Minute)
	s := setupMove(t, ctx, 4)
	p0 := s.c.WaitPartition(ctx, "orders", 0, "a leader", func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() >= 0 })
	before := slices.Clone(p0.GetReplicas())
	target := slices.Clone(before)
	target[2] = 4
	s.c.Move(ctx, "orders", 0, 100_000, target...)
	waitCopying(t, ctx, s.c, "orders", 0, 4)
	s.c.Storage(4).Kill()

	cli := strataCLI(t, s.gw.URL)
	out, err := cli("topic", "move", "orders", "--partition", "0", "--cancel")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strata topic move --cancel: %s", out)
	back := waitMoveDone(ctx, s.c, "orders", 0, before...)
	if !slices.Equal(back.GetReplicas(), before) {
		t.Errorf("after the cancel: replicas %v, want %v in order", back.GetReplicas(), before)
	}
	s.c.Storage(4).Restart()
	dir := filepath.Join(s.c.Storage(4).DataDir, "orders-0")
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node 4 kept its partial copy at %s", dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
	out, err = cli("topic", "move", "orders", "--partition", "0", "--replicas", joinIDs(target), "--wait", "--interval", "1s", "--timeout", "3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strata topic move --wait:\n%s", out)
	waitMoveDone(ctx, s.c, "orders", 0, target...)
	s.finish(t, ctx)
}

func joinIDs(ids []int32) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(id)
	}
	return s
}

// TestMeasureRebalance prints what the issue asks to measure: the time and
// bytes to rebalance a 12-partition RF=3 topic holding -rebalance-mb
// megabytes from 3 to 5 nodes, without and with a throttle
// (-rebalance-throttle bytes/s per node), and the p99 latency of an
// acks=all producer (200 records/s of 1 kB) during the move against
// before it. It asserts only that the rebalance ends balanced with nothing
// lost; the figures are printed.
func TestMeasureRebalance(t *testing.T) {
	for _, throttle := range []int64{0, *rebalanceThrottle} {
		t.Run(fmt.Sprintf("throttle=%d", throttle), func(t *testing.T) { measureRebalance(t, throttle) })
	}
}

func measureRebalance(t *testing.T, throttle int64) {
	ctx := harness.Deadline(t, 40*time.Minute)
	// The rebalance below is the measured one, not the controller's own
	// when the nodes join.
	t.Setenv("STRATA_AUTO_REBALANCE", "false")
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3, ReadyTimeout: 2 * time.Minute})
	c.CreateTopic(ctx, "orders", 12, 3, map[string]string{"min.insync.replicas": "2"})
	c.WaitFullISR(ctx, "orders", 12)
	gw := harness.StartGateway(t, c)

	// Fill: 16 kB records as fast as the cluster takes them.
	const recBytes = 16 << 10
	n := *rebalanceMB << 20 / recBytes
	fillStart := time.Now()
	fillTopic(t, ctx, gw.URL, "orders", n, 120, recBytes, client.Linger(20*time.Millisecond))
	t.Logf("filled %d MB in %s", *rebalanceMB, time.Since(fillStart).Round(time.Second))

	load := startLoad(t, gw.URL, "orders", 200, 48, 1000)
	beforeFrom := time.Now()
	time.Sleep(15 * time.Second)
	beforeTo := time.Now()
	c.AddStorageNode()
	c.AddStorageNode()

	start := time.Now()
	resp, err := c.Ctl().Rebalance(ctx, connect.NewRequest(&controllerv1.RebalanceRequest{ThrottleBytesPerSecond: throttle}))
	if err != nil {
		t.Fatal(err)
	}
	var planned int64
	for _, m := range resp.Msg.GetMoves() {
		for _, r := range m.GetToReplicas() {
			if !slices.Contains(m.GetFromReplicas(), r) {
				planned += max(m.GetSizeBytes(), 0)
			}
		}
	}
	for {
		l, err := c.Ctl().ListPartitionReassignments(ctx, connect.NewRequest(&controllerv1.ListPartitionReassignmentsRequest{}))
		if err == nil && len(l.Msg.GetReassignments()) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("rebalance did not finish")
		case <-time.After(200 * time.Millisecond):
		}
	}
	took := time.Since(start)
	duringTo := time.Now()
	time.Sleep(2 * time.Second)
	load.finish(t)

	var copied int64
	for _, id := range []int{4, 5} {
		resp, err := c.Storage(id).StorageClient().DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.Msg.GetPartitions() {
			copied += p.GetLocalSizeBytes()
		}
	}
	d, err := c.Describe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	replicas, leaders := nodeLoads(d)
	ids := []int32{1, 2, 3, 4, 5}
	if !within(replicas, ids, 36) || !within(leaders, ids, 12) {
		t.Errorf("not balanced after the rebalance: replicas %v, leaders %v", replicas, leaders)
	}
	p99Before, nBefore := load.p99(beforeFrom, beforeTo)
	p99During, nDuring := load.p99(start, duringTo)
	line := fmt.Sprintf("rebalance of a 12-partition RF=3 topic holding %d MB from 3 to 5 nodes, throttle %d B/s per node: "+
		"%d moves in %s, %.1f MB planned, %.1f MB on the new nodes afterwards (%.1f MB/s); "+
		"producer p99 %s before (%d records), %s during (%d records)",
		*rebalanceMB, throttle, len(resp.Msg.GetMoves()), took.Round(100*time.Millisecond), float64(planned)/1e6, float64(copied)/1e6,
		float64(copied)/1e6/took.Seconds(), p99Before.Round(time.Millisecond), nBefore, p99During.Round(time.Millisecond), nDuring)
	t.Log(line)
	fmt.Println("MEASURED:", line)
}
