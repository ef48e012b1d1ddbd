package tests

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/tests/harness"
)

// replicationCheck is the check every real-process replication test runs:
// while the test runs it samples, a few times a second, every partition of
// its topic and records any ISR member that reports a log end below the
// leader's high watermark (a committed record missing from a replica the
// controller may elect); at the end (finish) it samples once more, reads
// every partition back from its leader and requires every acknowledged
// record at its acknowledged offset.
//
// A sample reads the leader's view (high watermark, ISR) first, then each
// ISR member's log end, then the leader's view again, and reports a member
// only if it was in the ISR at both leader reads of the same leader epoch:
// a member's log end never shrinks while it stays in the ISR, so this has
// no false alarm from the reads not being simultaneous. Nodes that do not
// answer (killed, paused) are skipped.
type replicationCheck struct {
	t          *testing.T
	c          *harness.Cluster
	topic      string
	partitions int32

	mu         sync.Mutex
	acked      map[int32]map[int64]string // partition -> offset -> value
	violations []string
	samples    int

	stop chan struct{}
	done chan struct{}
}

// checkReplication starts watching topic's partitions 0..partitions-1.
// Call finish at the end of the test, before anything kills every node.
func checkReplication(t *testing.T, c *harness.Cluster, topic string, partitions int32) *replicationCheck {
	rc := &replicationCheck{t: t, c: c, topic: topic, partitions: partitions, acked: map[int32]map[int64]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go rc.watch()
	t.Cleanup(rc.halt)
	return rc
}

// ack records that the record with value was acknowledged at offset.
func (rc *replicationCheck) ack(partition int32, offset int64, value string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.acked[partition] == nil {
		rc.acked[partition] = map[int64]string{}
	}
	rc.acked[partition][offset] = value
}

// produceValues is the package's produceValues that also records the
// acknowledged offsets.
func (rc *replicationCheck) produceValues(ctx context.Context, t *testing.T, partition int32, values ...string) []int64 {
	t.Helper()
	offs := produceValues(ctx, t, rc.c, rc.topic, partition, values...)
	for i, v := range values {
		rc.ack(partition, offs[i], v)
	}
	return offs
}

func (rc *replicationCheck) halt() {
	select {
	case <-rc.stop:
	default:
		close(rc.stop)
	}
	<-rc.done
}

func (rc *replicationCheck) watch() {
	defer close(rc.done)
	for {
		select {
		case <-rc.stop:
			return
		case <-time.After(250 * time.Millisecond):
		}
		rc.sample(context.Background())
	}
}

// sample checks every partition once.
func (rc *replicationCheck) sample(ctx context.Context) {
	for p := range rc.partitions {
		if v := rc.samplePartition(ctx, p); v != "" {
			rc.mu.Lock()
			rc.violations = append(rc.violations, v)
			rc.mu.Unlock()
		}
	}
	rc.mu.Lock()
	rc.samples++
	rc.mu.Unlock()
}

// leaderView is the leader's DescribeLog of a partition, or nil.
func (rc *replicationCheck) leaderView(ctx context.Context, partition int32) (*harness.Node, *storagev1.DescribeLogPartitionResult) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := rc.c.Partition(ctx, rc.topic, partition)
	if err != nil || p.GetLeaderId() < 0 {
		return nil, nil
	}
	n := rc.c.Storage(int(p.GetLeaderId()))
	if n.Proc.Exited() {
		return nil, nil
	}
	r, err := describeLog(ctx, n, rc.topic, partition)
	if err != nil || !r.GetLeader() {
		return nil, nil
	}
	return n, r
}

func inSync(r *storagev1.DescribeLogPartitionResult) []int32 {
	var ids []int32
	for _, s := range r.GetReplicas() {
		if s.GetInSync() {
			ids = append(ids, s.GetNodeId())
		}
	}
	return ids
}

func (rc *replicationCheck) samplePartition(ctx context.Context, partition int32) string {
	leader, before := rc.leaderView(ctx, partition)
	if before == nil {
		return ""
	}
	hw := before.GetHighWatermark()
	ends := map[int32]int64{}
	for _, id := range inSync(before) {
		n := rc.c.Storage(int(id))
		if n.Proc.Exited() {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := describeLog(dctx, n, rc.topic, partition)
		cancel()
		if err == nil {
			ends[id] = r.GetLogEndOffset()
		}
	}
	_, after := rc.leaderView(ctx, partition)
	if after == nil || after.GetLeaderEpoch() != before.GetLeaderEpoch() {
		return ""
	}
	for id, end := range ends {
		if end < hw && slices.Contains(inSync(after), id) {
			return fmt.Sprintf("%s-%d: ISR member %d reports log end %d, below the high watermark %d of leader %s at epoch %d",
				rc.topic, partition, id, end, hw, leader.Name(), before.GetLeaderEpoch())
		}
	}
	return ""
}

// finish stops the sampling, samples once more, and checks that every
// acknowledged record is read back from the partition's leader at its
// acknowledged offset. It fails the test on any violation.
func (rc *replicationCheck) finish(ctx context.Context) {
	rc.t.Helper()
	rc.halt()
	rc.sample(ctx)
	rc.mu.Lock()
	violations, samples := slices.Clone(rc.violations), rc.samples
	rc.mu.Unlock()
	for _, v := range violations {
		rc.t.Errorf("replication check: %s", v)
	}
	acked := 0
	for p, offs := range rc.acked {
		at := map[int64]string{}
		for _, r := range readPartition(ctx, rc.t, rc.c, rc.topic, p) {
			at[r.Offset] = string(r.Value)
		}
		for off, v := range offs {
			acked++
			if got, ok := at[off]; !ok || got != v {
				rc.t.Errorf("replication check: %s-%d: %q was acknowledged at offset %d; the log holds %q there (present %v)",
					rc.topic, p, v, off, got, ok)
			}
		}
	}
	rc.t.Logf("replication check of %s: %d samples, %d acknowledged records read back", rc.topic, samples, acked)
}
