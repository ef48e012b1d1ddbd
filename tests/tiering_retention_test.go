package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// timedValues produces one record per value to the partition's leader with
// acks=all, the i-th with timestamp ts(i), and returns their offsets.
func timedValues(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, values []string, ts func(i int) int64) []int64 {
	t.Helper()
	offs := make([]int64, len(values))
	for i, v := range values {
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte(v), Timestamp: ts(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if offs[i], err = produceToLeader(ctx, t, c, topic, 0, b); err != nil {
			t.Fatalf("produce %d: %v", i, describeErr(err))
		}
	}
	return offs
}

// consumedLine is one record as `strata consume -f json` prints it.
type consumedLine struct {
	Offset    int64  `json:"offset"`
	Timestamp int64  `json:"timestamp"`
	Value     string `json:"value"`
}

// consumeJSON runs `strata consume topic -f json args...` against the
// gateway and returns the records it printed.
func consumeJSON(ctx context.Context, t *testing.T, strata, gateway, topic string, args ...string) []consumedLine {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, strata, append([]string{"--gateway", gateway, "consume", topic, "-f", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("strata consume %v: %v\n%s", args, err, stderr.String())
	}
	var out []consumedLine
	for dec := json.NewDecoder(&stdout); dec.More(); {
		var l consumedLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestTieredRetentionWhileTieringIsDown runs real processes: a tiered
// topic keeps only its active segment locally (local.retention.bytes=0)
// and three segments in all (retention.bytes). The tiering process is
// killed (SIGKILL) and the topic grows well past retention.bytes while the
// storage node's retention loop runs every 200ms, shown to have run twice
// by a plain topic it trims. No untiered segment may go: the local log
// still starts at the tier's end. Then tiering is restarted, catches up,
// and `strata consume -o start -e` reads every record from offset 0 on, in
// order, without a gap (a consumer given OUT_OF_RANGE there used to fetch
// the same offset forever), and `strata consume -o @TIME` finds a record
// that is only in the tier.
func TestTieredRetentionWhileTieringIsDown(t *testing.T) {
	t.Parallel()
	ctx := harness.Deadline(t, 4*time.Minute)
	// The tier's own retention stays out of the way (1h): the tier keeps
	// everything it receives, so the whole history reads back.
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 1, StorageArgs: []string{"--retention-interval", "200ms"}},
		harness.TieringConfig{Args: []string{"--retention-interval", "1h"}})
	gw := harness.StartGateway(t, c)
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	const topic, plain = "tiered-retention", "plain-retention"
	c.CreateTopic(ctx, topic, 1, 1, tieredConfigs("local.retention.ms=-2", "local.retention.bytes=0", "retention.bytes=12288", "min.insync.replicas=1"))
	c.CreateTopic(ctx, plain, 1, 1, map[string]string{"segment.bytes": tierSegmentBytes, "retention.bytes": "4096", "min.insync.replicas": "1"})
	c.WaitFullISR(ctx, topic, 1)
	c.WaitFullISR(ctx, plain, 1)
	node := c.Storage(1)

	t0 := time.Now().Add(-time.Hour).UnixMilli()
	at := func(i int) int64 { return t0 + int64(i)*1000 }
	values := tierValues("r", 180)
	offs := timedValues(ctx, t, c, topic, values[:60], at)
	sealed := sealedEnd(t, node, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)
	waitLocalStart(ctx, t, node, topic, 0, sealed)
	st, err := tr.State(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	tieredEnd := st.GetTieredEndOffset()

	tr.Kill()
	offs = append(offs, timedValues(ctx, t, c, topic, values[60:], func(i int) int64 { return at(60 + i) })...)
	// Two trims of the plain topic: the second is by a retention round that
	// began after the tiered records were written.
	for round := range 2 {
		d, err := describeLog(ctx, node, plain, 0)
		if err != nil {
			t.Fatal(err)
		}
		produceValues(ctx, t, c, plain, 0, tierValues(fmt.Sprintf("p%d", round), 60)...)
		waitLocalStart(ctx, t, node, plain, 0, d.GetLogEndOffset()+1)
	}
	d, err := describeLog(ctx, node, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetLocalLogStartOffset() > tieredEnd {
		t.Fatalf("retention deleted untiered data while tiering was down: local start %d > tiered end %d", d.GetLocalLogStartOffset(), tieredEnd)
	}

	tr.Restart()
	sealed = sealedEnd(t, node, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)
	waitLocalStart(ctx, t, node, topic, 0, sealed)

	got := consumeJSON(ctx, t, strata, gw.URL, topic, "-o", "start", "-e")
	if len(got) != len(values) {
		t.Fatalf("consumed %d records from the start, want %d", len(got), len(values))
	}
	for i, l := range got {
		if l.Offset != offs[i] || l.Value != values[i] {
			t.Fatalf("record %d: offset %d value %.12q, want offset %d value %.12q", i, l.Offset, l.Value, offs[i], values[i])
		}
	}
	// Offset 20 is only in the tier: ListOffsets by timestamp finds it there.
	if l := consumeJSON(ctx, t, strata, gw.URL, topic, "-o", "@"+strconv.FormatInt(at(20), 10), "-n", "1"); len(l) != 1 || l[0].Offset != offs[20] {
		t.Fatalf("consume from the time of record 20: %+v, want offset %d", l, offs[20])
	}
}

// TestTieredRetentionExpiringTheWholeTier runs real processes: the tier's
// total retention expires every tiered segment of a partition while its
// only storage node is down, so the node comes back with local copies of
// all of them. The tier must keep its extent (an empty tier starting past
// the expired range, not "nothing tiered"), and the node must treat the
// expired segments as gone: its local log start moves past them, it never
// uploads them again (it used to, every tier round, and never deleted
// them), and a consumer from the start reads from the new log start on.
func TestTieredRetentionExpiringTheWholeTier(t *testing.T) {
	t.Parallel()
	ctx := harness.Deadline(t, 4*time.Minute)
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 1},
		harness.TieringConfig{Args: []string{"--retention-interval", "200ms"}})
	gw := harness.StartGateway(t, c)
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	const topic = "tier-expires-all"
	// Nothing expires at first: the tier and local disk keep everything.
	c.CreateTopic(ctx, topic, 1, 1, tieredConfigs("retention.ms=-1", "local.retention.ms=-1", "min.insync.replicas=1"))
	c.WaitFullISR(ctx, topic, 1)
	node := c.Storage(1)

	byOffset := map[int64]string{}
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	values := tierValues("old", 60)
	for i, off := range timedValues(ctx, t, c, topic, values, func(int) int64 { return old }) {
		byOffset[off] = values[i]
	}
	sealed := sealedEnd(t, node, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, sealed)

	node.Kill()
	alterTopic(ctx, t, c, topic, map[string]string{"retention.ms": "3600000"})
	var st *tieringv1.TieredPartitionState
	testwait.Until(t, 2*time.Minute, "the tier's retention to expire every segment", func() error {
		var err error
		if st, err = tr.State(ctx, topic, 0); err == nil && st.GetObjectCount() != 0 {
			err = fmt.Errorf("tier holds [%d, %d) in %d objects", st.GetLogStartOffset(), st.GetTieredEndOffset(), st.GetObjectCount())
		}
		return err
	})
	if st.GetLogStartOffset() != sealed || st.GetTieredEndOffset() != sealed {
		t.Fatalf("emptied tier reports [%d, %d), want an empty tier at %d", st.GetLogStartOffset(), st.GetTieredEndOffset(), sealed)
	}

	node.Restart()
	waitLocalStart(ctx, t, node, topic, 0, sealed)
	values = tierValues("new", 60)
	for i, off := range timedValues(ctx, t, c, topic, values, func(int) int64 { return time.Now().UnixMilli() }) {
		byOffset[off] = values[i]
	}
	end := sealedEnd(t, node, topic, 0)
	tr.WaitTieredEnd(ctx, topic, 0, end)
	segs, err := tr.Segments(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.GetBaseOffset() < sealed {
			t.Fatalf("expired offsets uploaded again: the tier holds %d..%d, its log start was %d", s.GetBaseOffset(), s.GetLastOffset(), sealed)
		}
	}
	d, err := describeLog(ctx, node, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := d.GetLogStartOffset()
	if start < sealed || d.GetLocalLogStartOffset() < sealed {
		t.Fatalf("log start %d (local %d), want at least %d, past the expired segments", start, d.GetLocalLogStartOffset(), sealed)
	}

	got := consumeJSON(ctx, t, strata, gw.URL, topic, "-o", "start", "-e")
	if len(got) == 0 || got[0].Offset != start {
		t.Fatalf("consume from the start read %d records, first %+v; want them from the log start %d", len(got), got, start)
	}
	for i, l := range got {
		if want := start + int64(i); l.Offset != want || l.Value != byOffset[want] {
			t.Fatalf("record %d: offset %d value %.12q, want offset %d value %.12q", i, l.Offset, l.Value, want, byOffset[want])
		}
	}
	if last := got[len(got)-1].Offset; last != d.GetHighWatermark()-1 {
		t.Fatalf("consume from the start ended at %d, want %d", last, d.GetHighWatermark()-1)
	}
}
