package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// Tiered topics in these tests roll a segment every 4 KiB, so a few dozen
// 200-byte records make several sealed segments to tier.
const tierSegmentBytes = "4096"

func tieredConfigs(extra ...string) map[string]string {
	m := map[string]string{"remote.storage.enable": "true", "segment.bytes": tierSegmentBytes, "local.retention.ms": "3600000"}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// tierValues are n distinct ~200-byte values.
func tierValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d-%s", prefix, i, strings.Repeat("x", 190))
	}
	return out
}

// alterTopic sets topic configs through the controller.
func alterTopic(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, kv map[string]string) {
	t.Helper()
	if _, err := c.Ctl().AlterTopicConfig(ctx, connect.NewRequest(&controllerv1.AlterTopicConfigRequest{Name: topic, SetConfigs: kv})); err != nil {
		t.Fatalf("alter %s %v: %v", topic, kv, err)
	}
}

// readRaw fetches a partition from its leader from offset 0 to the high
// watermark and returns the batch bytes exactly as served, concatenated.
// Each fetch must start on a batch boundary.
func readRaw(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, partition int32) []byte {
	t.Helper()
	var out []byte
	next := int64(0)
	fetchBatches(ctx, t, c, topic, partition, 64<<10, func(h recordbatch.Header, b []byte, _ int64) {
		if h.BaseOffset != next {
			t.Fatalf("fetch %s-%d at %d: batch starts at %d", topic, partition, next, h.BaseOffset)
		}
		out = append(out, b...)
		next = h.NextOffset()
	})
	return out
}

// sealedEnd is the base offset of a node's active (last) local segment of
// a partition: every offset below it is in sealed segments.
func sealedEnd(t *testing.T, n *harness.Node, topic string, partition int32) int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(n.DataDir, fmt.Sprintf("%s-%d", topic, partition)))
	if err != nil {
		t.Fatal(err)
	}
	last := int64(-1)
	for _, e := range ents {
		var base int64
		if _, err := fmt.Sscanf(e.Name(), "%020d.log", &base); err == nil && strings.HasSuffix(e.Name(), ".log") {
			last = max(last, base)
		}
	}
	if last <= 0 {
		t.Fatalf("%s holds no sealed segment of %s-%d", n.Name(), topic, partition)
	}
	return last
}

// waitLocalStart waits until a node's local log start of a partition is at
// least min and returns its DescribeLog.
func waitLocalStart(ctx context.Context, t *testing.T, n *harness.Node, topic string, partition int32, min int64) *storagev1.DescribeLogPartitionResult {
	t.Helper()
	var last string
	for {
		r, err := describeLog(ctx, n, topic, partition)
		if err == nil && r.GetLocalLogStartOffset() >= min {
			return r
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("local start %d, tiered end %d", r.GetLocalLogStartOffset(), r.GetTieredEndOffset())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s-%d local log start never reached %d: last %s", n.Name(), topic, partition, min, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkManifest fails the test unless the partition's manifest entries are
// contiguous from offset 0 up to end, each naming a .log object that exists
// with exactly the entry's size, and index objects that exist.
func checkManifest(ctx context.Context, t *testing.T, tr *harness.Tiering, topic string, partition int32) []*tieringv1.SegmentEntry {
	t.Helper()
	segs, err := tr.Segments(ctx, topic, partition)
	if err != nil {
		t.Fatalf("list segments: %v", err)
	}
	next := int64(0)
	for _, s := range segs {
		if s.GetBaseOffset() != next || s.GetLastOffset() < s.GetBaseOffset() {
			t.Errorf("manifest entry [%d, %d] does not follow %d", s.GetBaseOffset(), s.GetLastOffset(), next)
		}
		next = s.GetLastOffset() + 1
		size, err := tr.ObjectSize(ctx, s.GetObjectKey())
		if err != nil || size != s.GetSizeBytes() {
			t.Errorf("object %s: size %d (err %v), manifest says %d", s.GetObjectKey(), size, err, s.GetSizeBytes())
		}
		for _, k := range []string{s.GetOffsetIndexKey(), s.GetTimeIndexKey()} {
			if k == "" {
				continue
			}
			if size, err := tr.ObjectSize(ctx, k); err != nil || size < 0 {
				t.Errorf("index object %s: size %d (err %v)", k, size, err)
			}
		}
	}
	return segs
}

// TestTieredReadsMatchLocal proves that a read served from the tier gives
// the very bytes the local log served: everything is read once while local
// retention keeps it on disk, then local.retention.ms=0 lets every node
// delete its tiered segments, and a second read from offset 0 (now mostly
// from the tier) is byte-for-byte identical. DescribeLog reports the
// tiered start 0 below the moved local start. It runs on a plain cluster
// and on a secure one, where storage nodes upload to and read from tiering
// over mutual TLS.
func TestTieredReadsMatchLocal(t *testing.T) {
	t.Parallel()
	plainAndSecure(t, testTieredReadsMatchLocal)
}

func testTieredReadsMatchLocal(t *testing.T, secure bool) {
	ctx := harness.Deadline(t, 120*time.Second)
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 2, Secure: secure}, harness.TieringConfig{})
	const topic = "tiered-reads"
	c.CreateTopic(ctx, topic, 1, 2, tieredConfigs())
	c.WaitFullISR(ctx, topic, 1)
	values := tierValues("r", 120)
	offs := produceValues(ctx, t, c, topic, 0, values...)
	waitConverged(ctx, t, c, topic, 0)
	leader, _ := c.Leader(ctx, topic, 0)
	sealed := sealedEnd(t, leader, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)

	before := readRaw(ctx, t, c, topic, 0)
	if r, _ := describeLog(ctx, leader, topic, 0); r.GetLocalLogStartOffset() != 0 {
		t.Fatalf("local log start %d before local retention allowed deletion", r.GetLocalLogStartOffset())
	}
	alterTopic(ctx, t, c, topic, map[string]string{"local.retention.ms": "0"})
	for _, n := range c.StorageNodes() {
		r := waitLocalStart(ctx, t, n, topic, 0, sealed)
		if r.GetLogStartOffset() != 0 || r.GetTieredEndOffset() < sealed {
			t.Errorf("%s: DescribeLog log start %d tiered end %d, want 0 and >= %d", n.Name(), r.GetLogStartOffset(), r.GetTieredEndOffset(), sealed)
		}
	}
	after := readRaw(ctx, t, c, topic, 0)
	if !bytes.Equal(before, after) {
		t.Fatalf("tiered read differs from local read: %d vs %d bytes, first difference at byte %d", len(before), len(after), firstDiff(before, after))
	}
	requireValuesAt(t, readPartition(ctx, t, c, topic, 0), values, offs)
	checkManifest(ctx, t, tr, topic, 0)
}

// TestTieringLeaderKilledMidUpload kills (SIGKILL) the only replica while
// its first segment upload is stuck in a slow object store
// (--fault-upload-delay on the first .log upload). The manifest never names
// a partial object: right after the kill it is empty, and after a restart
// the upload is redone, the tier passes the offset the node had reached
// when killed, and every manifest entry is contiguous and names complete
// objects; all records read back.
func TestTieringLeaderKilledMidUpload(t *testing.T) {
	t.Parallel()
	ctx := harness.Deadline(t, 120*time.Second)
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 1},
		harness.TieringConfig{Args: []string{"--fault-upload-delay", "4s", "--fault-upload-count", "1"}})
	const topic = "tiered-kill"
	c.CreateTopic(ctx, topic, 1, 1, tieredConfigs())
	c.WaitFullISR(ctx, topic, 1)
	values := tierValues("k", 80)
	offs := produceValues(ctx, t, c, topic, 0, values...)
	leader, _ := c.Leader(ctx, topic, 0)
	killedAt := sealedEnd(t, leader, topic, 0)
	// The tiering service spools an upload to a file in its spool
	// directory and removes it when the upload ends, however it ends; the
	// first .log upload then sits in the 4s delay. So a spool file means
	// an upload is under way.
	spooled := func() []string {
		files, err := filepath.Glob(filepath.Join(tr.DataDir, "strata-upload-*.log"))
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	testwait.Until(t, 30*time.Second, "the first segment upload to be under way at the tiering service", func() error {
		if len(spooled()) == 0 {
			return errors.New("no upload spooled")
		}
		return nil
	})
	if st, err := tr.State(ctx, topic, 0); err != nil || st.GetObjectCount() != 0 {
		t.Fatalf("before the kill: tiered state %v (err %v), want nothing tiered yet", st, err)
	}
	leader.Kill()
	// The interrupted upload ends (its spool file goes) when the tiering
	// service notices the node is gone, or at the latest after the delay.
	testwait.Until(t, 30*time.Second, "the interrupted upload to end at the tiering service", func() error {
		if files := spooled(); len(files) > 0 {
			return fmt.Errorf("still spooled: %v", files)
		}
		return nil
	})
	if segs := checkManifest(ctx, t, tr, topic, 0); len(segs) > 0 {
		t.Logf("the interrupted upload completed on the tiering side: %d entries", len(segs))
	}
	leader.Restart()
	st := tr.WaitTieredEnd(ctx, topic, 0, killedAt)
	t.Logf("after restart: tiered [%d, %d) in %d objects; node had sealed up to %d when killed", st.GetLogStartOffset(), st.GetTieredEndOffset(), st.GetObjectCount(), killedAt)
	if segs := checkManifest(ctx, t, tr, topic, 0); len(segs) == 0 || segs[len(segs)-1].GetLastOffset()+1 < killedAt {
		t.Fatalf("manifest ends short of %d: %d entries", killedAt, len(segs))
	}
	// Every acknowledged record is readable right after the restart (a
	// sole-ISR leader commits its whole log when it takes the role), and
	// produce works again.
	requireValuesAt(t, readPartition(ctx, t, c, topic, 0), values, offs)
	more := tierValues("k2", 1)
	offs = append(offs, produceValues(ctx, t, c, topic, 0, more...)...)
	requireValuesAt(t, readPartition(ctx, t, c, topic, 0), append(values, more...), offs)
}

// TestTieringPausedDelaysButLosesNothing pauses (SIGSTOP) the tiering
// process, with its embedded S3, for several tier intervals: acks=all
// produce keeps being acknowledged quickly, no node deletes a local
// segment that is not tiered, and after SIGCONT the tier catches up,
// local segments go, and every record reads back from offset 0.
func TestTieringPausedDelaysButLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := harness.Deadline(t, 120*time.Second)
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 2}, harness.TieringConfig{})
	const topic = "tiered-pause"
	c.CreateTopic(ctx, topic, 1, 2, tieredConfigs("local.retention.ms=0"))
	c.WaitFullISR(ctx, topic, 1)
	v1 := tierValues("a", 60)
	offs := produceValues(ctx, t, c, topic, 0, v1...)
	waitConverged(ctx, t, c, topic, 0)
	leader, _ := c.Leader(ctx, topic, 0)
	sealed := sealedEnd(t, leader, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)
	waitLocalStart(ctx, t, leader, topic, 0, sealed)
	st, err := tr.State(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	tieredBefore := st.GetTieredEndOffset()

	tr.Stop()
	stopped := true
	defer func() {
		if stopped {
			tr.Continue()
		}
	}()
	v2 := tierValues("b", 100)
	var slowest time.Duration
	for _, v := range v2 {
		start := time.Now()
		off := produceValues(ctx, t, c, topic, 0, v)
		slowest = max(slowest, time.Since(start))
		offs = append(offs, off...)
	}
	// Every produce was acknowledged, which a produce waiting on the
	// paused service could not be. A node's calls to tiering time out
	// after 10s, so one that waited on a call and then went on would take
	// that long; the bound is not a speed target.
	if slowest >= 10*time.Second {
		t.Errorf("slowest acks=all produce while tiering was paused took %v, as long as a node's call to tiering", slowest)
	}
	t.Logf("slowest acks=all produce while tiering was paused: %v", slowest)
	// A window, not a wait: nodes must not delete untiered segments while
	// tiering is unreachable, and the check below looks after several tier
	// intervals (500ms) have passed. A slower machine gives fewer chances
	// to misbehave, never a false failure.
	time.Sleep(2 * time.Second)
	for _, n := range c.StorageNodes() {
		r, err := describeLog(ctx, n, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetLocalLogStartOffset() > tieredBefore {
			t.Errorf("%s deleted untiered data while tiering was paused: local start %d > tiered end %d", n.Name(), r.GetLocalLogStartOffset(), tieredBefore)
		}
	}
	newSealed := sealedEnd(t, leader, topic, 0)
	if newSealed <= tieredBefore {
		t.Fatalf("no new sealed segment while paused (sealed %d, tiered %d)", newSealed, tieredBefore)
	}

	tr.Continue()
	stopped = false
	tr.WaitTieredEnd(ctx, topic, 0, newSealed)
	for _, n := range c.StorageNodes() {
		waitLocalStart(ctx, t, n, topic, 0, newSealed)
	}
	requireValuesAt(t, readPartition(ctx, t, c, topic, 0), append(v1, v2...), offs)
	checkManifest(ctx, t, tr, topic, 0)
}

// TestTieredHistorySurvivesLosingEveryDisk tiers a partition, kills every
// storage node, deletes each node's partition directory, and starts them
// again: a new consumer reading from offset 0 gets the tiered history,
// byte for byte what was read before: each restarted replica's empty log
// restarts at the tiered end offset, so reads below it go to the tier and
// new records never reuse tiered offsets.
func TestTieredHistorySurvivesLosingEveryDisk(t *testing.T) {
	t.Parallel()
	ctx := harness.Deadline(t, 120*time.Second)
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 2}, harness.TieringConfig{})
	const topic = "tiered-disks"
	c.CreateTopic(ctx, topic, 1, 2, tieredConfigs())
	c.WaitFullISR(ctx, topic, 1)
	values := tierValues("d", 100)
	produceValues(ctx, t, c, topic, 0, values...)
	waitConverged(ctx, t, c, topic, 0)
	leader, _ := c.Leader(ctx, topic, 0)
	sealed := sealedEnd(t, leader, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)
	before := readRaw(ctx, t, c, topic, 0)
	tiered := before[:tieredPrefix(t, before, sealed)]

	for _, n := range c.StorageNodes() {
		n.Kill()
		if err := os.RemoveAll(filepath.Join(n.DataDir, fmt.Sprintf("%s-%d", topic, 0))); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.StorageNodes() {
		n.Proc.Restart()
	}
	for _, n := range c.StorageNodes() {
		n.WaitReady()
	}
	var got []byte
	testwait.Until(t, 45*time.Second, "a read from offset 0 to return the tiered history", func() error {
		got = readRawUpTo(ctx, t, c, topic, 0)
		if len(got) < len(tiered) {
			return fmt.Errorf("%d of %d bytes read", len(got), len(tiered))
		}
		return nil
	})
	if !bytes.HasPrefix(got, tiered) {
		t.Fatalf("after losing every disk a read from 0 got %d bytes; the tier held %d (first difference at byte %d)", len(got), len(tiered), firstDiff(got, tiered))
	}
	// New records go after the tier, never onto offsets it already holds.
	if offs := produceValues(ctx, t, c, topic, 0, "after-disk-loss"); offs[0] < sealed {
		t.Fatalf("produce after losing every disk got offset %d, below the tiered end %d", offs[0], sealed)
	}
}

// tieredPrefix returns the length of the batches of b below offset end.
func tieredPrefix(t *testing.T, b []byte, end int64) int {
	it := recordbatch.NewIter(b, false)
	n := 0
	for {
		h, raw, ok := it.Next()
		if !ok || h.BaseOffset >= end {
			return n
		}
		n += len(raw)
	}
}

// readRawUpTo is readRaw that returns what it got on any error instead of
// failing: the partition may not have a leader yet.
func readRawUpTo(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, partition int32) []byte {
	p, err := c.Partition(ctx, topic, partition)
	if err != nil || p.GetLeaderId() < 0 {
		return nil
	}
	cl := c.Storage(int(p.GetLeaderId())).StorageClient()
	var out []byte
	next := int64(0)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.Fetch(cctx, connect.NewRequest(&storagev1.FetchRequest{
			Partitions: []*storagev1.FetchPartition{{Topic: topic, Partition: partition, FetchOffset: next, CurrentLeaderEpoch: p.GetLeaderEpoch(), MaxBytes: 64 << 10}},
		}))
		cancel()
		if err != nil {
			return out
		}
		r := resp.Msg.GetPartitions()[0]
		if r.GetError() != nil || len(r.GetRecords()) == 0 {
			if r.GetError() != nil {
				t.Logf("fetch at %d: %v %s", next, r.GetError().GetReason(), r.GetError().GetMessage())
			}
			return out
		}
		it := recordbatch.NewIter(r.GetRecords(), true)
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			out = append(out, b...)
			next = h.NextOffset()
		}
		if it.Err() != nil {
			return out
		}
	}
}
