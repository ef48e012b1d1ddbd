package tests

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// Real-process proofs of the log cleaner beyond cleaner_test.go: a
// compacted partition moved to another node after cleaning, and a storage
// node killed in the middle of a cleaning pass. Both write the same
// workload (compactedWorkload): keyed rounds, some keys deleted with a
// tombstone that the cleaner then removes (delete.retention.ms=1000), and
// check what is read back against every acknowledged record.

// compactedTopicConfigs are the configs of the proofs' topic: 4 KiB
// segments (one round of keys rolls a segment), any dirty byte starts a
// pass, and a tombstone goes one second after the pass that first keeps it.
var compactedTopicConfigs = map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096",
	"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}

// cleanerProofKeys is the key space of compactedWorkload; the first
// cleanerProofDeleted keys are deleted.
const cleanerProofKeys, cleanerProofDeleted = 40, 4

// producedRecord is one acknowledged record of a compactedWorkload.
type producedRecord struct {
	key   string
	value []byte // nil: a tombstone
}

// readRecord is one record read back, by either client.
type readRecord struct {
	offset int64
	key    string
	value  []byte
}

// compactedWorkload produces to partition 0 of a compacted topic through
// the Connect client and remembers every acknowledged record by offset,
// the newest value of every live key, and the keys deleted.
type compactedWorkload struct {
	t        *testing.T
	p        *client.Producer
	topic    string
	produced map[int64]producedRecord
	want     map[string]string // live key -> newest value
	deleted  []string
	ticks    int
}

func newCompactedWorkload(t *testing.T, gateway, topic string) *compactedWorkload {
	p, err := client.NewProducer(gateway, client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &compactedWorkload{t: t, p: p, topic: topic, produced: map[int64]producedRecord{}, want: map[string]string{}}
}

// produce sends recs and records them at their acknowledged offsets.
func (w *compactedWorkload) produce(ctx context.Context, recs []*client.Record) {
	w.t.Helper()
	if err := w.p.ProduceSync(ctx, recs...); err != nil {
		w.t.Fatalf("produce to %s: %v", w.topic, err)
	}
	for _, r := range recs {
		w.produced[r.Offset] = producedRecord{key: string(r.Key), value: r.Value}
		if r.Value == nil {
			delete(w.want, string(r.Key))
		} else {
			w.want[string(r.Key)] = string(r.Value)
		}
	}
}

// rounds writes n rounds of every key not deleted (about 5 KiB each, so
// each round rolls a 4 KiB segment), values naming the round. When deleteKeys is
// set, the last round writes a tombstone for each of the first
// cleanerProofDeleted keys and one more round of the others follows, so
// the tombstones' segment is sealed and cleanable.
func (w *compactedWorkload) rounds(ctx context.Context, tag string, n int, deleteKeys bool) {
	w.t.Helper()
	pad := strings.Repeat("p", 100)
	for r := range n {
		var recs []*client.Record
		for k := range cleanerProofKeys {
			if slices.Contains(w.deleted, fmt.Sprintf("key-%02d", k)) {
				continue
			}
			rec := &client.Record{Topic: w.topic, Key: []byte(fmt.Sprintf("key-%02d", k)),
				Value: []byte(fmt.Sprintf("%s-%02d-%s", tag, r, pad))}
			if deleteKeys && r == n-1 && k < cleanerProofDeleted {
				rec.Value = nil
			}
			recs = append(recs, rec)
		}
		w.produce(ctx, recs)
	}
	if deleteKeys {
		for k := range cleanerProofDeleted {
			w.deleted = append(w.deleted, fmt.Sprintf("key-%02d", k))
		}
		var recs []*client.Record
		for k := cleanerProofDeleted; k < cleanerProofKeys; k++ {
			recs = append(recs, &client.Record{Topic: w.topic, Key: []byte(fmt.Sprintf("key-%02d", k)),
				Value: []byte(fmt.Sprintf("%s-seal-%s", tag, pad))})
		}
		w.produce(ctx, recs)
	}
}

// tapering writes n rounds, round r (from 0) of the live keys k with
// k%n >= r, so the newest values of the keys end up spread over the
// rounds' segments: whichever segment a cleaning pass rewrites holds some.
// It returns the offset each round began at.
func (w *compactedWorkload) tapering(ctx context.Context, tag string, n int) []int64 {
	w.t.Helper()
	pad := strings.Repeat("p", 100)
	var starts []int64
	for r := range n {
		var recs []*client.Record
		for k := range cleanerProofKeys {
			key := fmt.Sprintf("key-%02d", k)
			if k%n < r || slices.Contains(w.deleted, key) {
				continue
			}
			recs = append(recs, &client.Record{Topic: w.topic, Key: []byte(key), Value: []byte(fmt.Sprintf("%s-%02d-%s", tag, r, pad))})
		}
		w.produce(ctx, recs)
		starts = append(starts, recs[0].Offset)
	}
	return starts
}

// tick writes two records of the key "tick", each over half a segment,
// so the first is sealed: a dirty segment that starts a cleaning pass.
func (w *compactedWorkload) tick(ctx context.Context) {
	w.t.Helper()
	for range 2 {
		w.ticks++
		w.produce(ctx, []*client.Record{{Topic: w.topic, Key: []byte("tick"),
			Value: []byte(fmt.Sprintf("tick-%d-%s", w.ticks, strings.Repeat("t", 2500)))}})
	}
}

// waitTombstonesGone waits until a read from offset 0 (read) holds no
// record of a deleted key: the cleaner stamped the tombstones with their
// delete horizon, and a later pass, after it, removed them. A pass needs
// dirty bytes, so whenever dirty (the replica's dirty ratio as its
// cleaner last saw it) says the last ones were cleaned, one more tick is
// written.
func (w *compactedWorkload) waitTombstonesGone(ctx context.Context, read func() []readRecord, dirty func() (float64, error)) {
	w.t.Helper()
	testwait.Until(w.t, 2*time.Minute, "the cleaner to remove the tombstones of "+strings.Join(w.deleted, ", "), func() error {
		var seen []string
		for _, r := range read() {
			if slices.Contains(w.deleted, r.key) {
				seen = append(seen, fmt.Sprintf("%s@%d", r.key, r.offset))
			}
		}
		if len(seen) == 0 {
			return nil
		}
		ratio, err := dirty()
		if err != nil {
			return err
		}
		if ratio < 0.01 {
			w.tick(ctx)
		}
		return fmt.Errorf("deleted keys still read: %v (dirty ratio %.2f, %d ticks)", seen, ratio, w.ticks)
	})
}

// check asserts what a read from offset 0 to the high watermark returned:
// offsets strictly increasing, each record the one acknowledged at its
// offset byte for byte, the newest value of every live key, no record of
// a deleted key, and fewer records than were produced (the log is
// cleaned).
func (w *compactedWorkload) check(what string, recs []readRecord) {
	w.t.Helper()
	got := map[string]string{}
	prev := int64(-1)
	for _, r := range recs {
		p, ok := w.produced[r.offset]
		switch {
		case r.offset <= prev:
			w.t.Fatalf("%s: offset %d after %d", what, r.offset, prev)
		case !ok:
			w.t.Fatalf("%s: offset %d (key %q) was never acknowledged", what, r.offset, r.key)
		case p.key != r.key || !bytes.Equal(p.value, r.value) || (p.value == nil) != (r.value == nil):
			w.t.Fatalf("%s: offset %d holds key %q value %.40q, acknowledged key %q value %.40q", what, r.offset, r.key, r.value, p.key, p.value)
		case slices.Contains(w.deleted, r.key):
			w.t.Fatalf("%s: deleted key %s came back at offset %d", what, r.key, r.offset)
		}
		prev = r.offset
		if r.value == nil {
			delete(got, r.key)
		} else {
			got[r.key] = string(r.value)
		}
	}
	if !maps.Equal(got, w.want) {
		for k, v := range w.want {
			if got[k] != v {
				w.t.Errorf("%s: key %s: read %.40q, newest acknowledged %.40q", what, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := w.want[k]; !ok {
				w.t.Errorf("%s: key %s read, but it is not live", what, k)
			}
		}
		w.t.FailNow()
	}
	if len(recs) >= len(w.produced) {
		w.t.Fatalf("%s: read %d records of %d produced: nothing was cleaned", what, len(recs), len(w.produced))
	}
	w.t.Logf("%s: %d live keys in %d records (%d produced)", what, len(got), len(recs), len(w.produced))
}

// readConnect reads partition 0 of topic from its start to its high
// watermark through the gateway with the Connect client.
func readConnect(ctx context.Context, t *testing.T, gateway, topic string) []readRecord {
	t.Helper()
	c, err := client.NewConsumer(gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	end, err := c.ListOffsets(ctx, topic, []int32{0}, client.EndOffset())
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	c.Assign(map[string]map[int32]client.Offset{topic: {0: client.StartOffset()}})
	var out []readRecord
	for {
		if pos, ok := c.Position(topic, 0); ok && pos >= end[0] {
			return out
		}
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("poll %s: %v", topic, err)
		}
		for _, r := range recs {
			out = append(out, readRecord{offset: r.Offset, key: string(r.Key), value: r.Value})
		}
	}
}

// readFranz reads partition 0 of topic from its start to its high
// watermark with franz-go at the dev cluster's Kafka listener.
func readFranz(ctx context.Context, t *testing.T, d *harness.Dev, adm *kadm.Client, topic string) []readRecord {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	end, _ := ends.Lookup(topic, 0)
	recs := consumeUntil(t, d, topic, fmt.Sprintf("offset %d", end.Offset-1), func(got []*kgo.Record) bool {
		return len(got) > 0 && got[len(got)-1].Offset >= end.Offset-1
	})
	out := make([]readRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, readRecord{offset: r.Offset, key: string(r.Key), value: r.Value})
	}
	return out
}

// describeLogAt is describeLog for a storage node known by its URL.
func describeLogAt(ctx context.Context, url, topic string, partition int32) (*storagev1.DescribeLogPartitionResult, error) {
	return describeLogWith(ctx, storagev1connect.NewStorageServiceClient(harness.H2CClient(), url), topic, partition)
}

// dirtyRatio returns the dirty ratio a replica's cleaner last saw.
func dirtyRatio(ctx context.Context, describe func(ctx context.Context) (*storagev1.DescribeLogPartitionResult, error)) func() (float64, error) {
	return func() (float64, error) {
		d, err := describe(ctx)
		if err != nil {
			return 0, err
		}
		if d.CleanerDirtyRatio == nil {
			return 0, fmt.Errorf("no dirty ratio reported yet")
		}
		return d.GetCleanerDirtyRatio(), nil
	}
}

// TestCompactedTopicSurvivesReplicaMove runs strata dev with the cleaner's
// backoff at 200ms. A compacted partition with one replica is written,
// cleaned, and its deleted keys' tombstones removed; then `strata topic
// move --wait` moves it to another node, which copies the cleaned log,
// offset gaps included, while the old replica is removed. From the new
// node, read from offset 0 through the Connect client and through
// franz-go at the Kafka listener, every live key has its newest value,
// every record is the one acknowledged at its offset, and no deleted key
// comes back.
func TestCompactedTopicSurvivesReplicaMove(t *testing.T) {
	t.Parallel()
	d, _ := kafkaDev(t, "STRATA_CLEANER_BACKOFF=200ms")
	ctx := harness.Deadline(t, 5*time.Minute)
	cli := strataCLI(t, d.Gateways[0])
	const topic = "moved-state"
	args := []string{"topic", "create", topic, "-p", "1", "-r", "1"}
	for k, v := range compactedTopicConfigs {
		args = append(args, "-c", k+"="+v)
	}
	if _, err := cli(args...); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(kafkaClient(t, d))
	replicas := func() (leader int32, on []int32) {
		t.Helper()
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		p := md.Topics[topic].Partitions[0]
		return p.Leader, p.Replicas
	}
	var source int32 = -1
	testwait.Until(t, time.Minute, topic+" to have a leader", func() error {
		source, _ = replicas()
		return testwait.True(source >= 0)
	})
	storageURL := func(id int32) string { return d.Process(t, "storage", int(id)).URL }
	describeOn := func(id int32) func(context.Context) (*storagev1.DescribeLogPartitionResult, error) {
		return func(ctx context.Context) (*storagev1.DescribeLogPartitionResult, error) {
			return describeLogAt(ctx, storageURL(id), topic, 0)
		}
	}

	w := newCompactedWorkload(t, d.Gateways[0], topic)
	w.rounds(ctx, "a", 8, true)
	w.tapering(ctx, "b", 8) // newest values in several cleaned segments
	w.waitTombstonesGone(ctx, func() []readRecord { return readConnect(ctx, t, d.Gateways[0], topic) }, dirtyRatio(ctx, describeOn(source)))
	w.check("from the source node "+strconv.Itoa(int(source)), readConnect(ctx, t, d.Gateways[0], topic))

	target := source%3 + 1
	out, err := cli("topic", "move", topic, "--partition", "0", "--replicas", strconv.Itoa(int(target)),
		"--wait", "--interval", "1s", "--timeout", "3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strata topic move:\n%s", out)
	testwait.Until(t, time.Minute, fmt.Sprintf("%s led by node %d, its only replica", topic, target), func() error {
		leader, on := replicas()
		if leader != target || !slices.Equal(on, []int32{target}) {
			return fmt.Errorf("leader %d, replicas %v", leader, on)
		}
		return nil
	})
	testwait.Until(t, time.Minute, fmt.Sprintf("node %d to drop its replica of %s", source, topic), func() error {
		if _, err := describeOn(source)(ctx); err == nil {
			return fmt.Errorf("node %d still hosts it", source)
		}
		return nil
	})
	// The new replica holds the cleaned log: starting at offset 0, to the
	// same end, in far fewer bytes than were produced.
	moved, err := describeOn(target)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved.GetLogStartOffset() != 0 || moved.GetLogEndOffset() != int64(len(w.produced)) {
		t.Fatalf("node %d's replica: log start %d end %d, want 0 and %d", target, moved.GetLogStartOffset(), moved.GetLogEndOffset(), len(w.produced))
	}
	t.Logf("node %d's replica: %d bytes, %d segments", target, moved.GetLocalSizeBytes(), moved.GetLocalSegmentCount())

	w.check(fmt.Sprintf("from node %d through the Connect client", target), readConnect(ctx, t, d.Gateways[0], topic))
	w.check(fmt.Sprintf("from node %d through franz-go", target), readFranz(ctx, t, d, adm, topic))
}

// TestCompactedTopicSurvivesKillDuringCleaning runs one storage node whose
// cleaner is throttled to 16 KB/s, so a pass over the ~40 KiB written at
// once takes seconds. Once the tombstones of the deleted keys are gone, a
// burst of rounds is written, and the node is SIGKILLed while a cleaned
// segment is being written (a .cleaned file in the partition directory).
// After the restart, and again once the cleaner has finished what the
// kill cut short, a read from offset 0 returns every live key's newest
// value, each record exactly as acknowledged at its offset, and no deleted
// key.
func TestCompactedTopicSurvivesKillDuringCleaning(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1,
		StorageArgs: []string{"--cleaner-backoff", "200ms", "--cleaner-io-max-bytes-per-second", "16384"}})
	gw := harness.StartGateway(t, c)
	ctx := harness.Deadline(t, 5*time.Minute)
	const topic = "killed-state"
	c.CreateTopic(ctx, topic, 1, 1, compactedTopicConfigs)
	c.WaitPartition(ctx, topic, 0, "a leader", harness.FullISR)
	node := c.Storage(1)
	describe := func(ctx context.Context) (*storagev1.DescribeLogPartitionResult, error) {
		return describeLog(ctx, node, topic, 0)
	}
	read := func() []readRecord { return readConnect(ctx, t, gw.URL, topic) }

	w := newCompactedWorkload(t, gw.URL, topic)
	w.rounds(ctx, "a", 6, true)
	w.waitTombstonesGone(ctx, read, dirtyRatio(ctx, describe))
	w.check("before the kill", read())

	// The newest values of the keys spread over about 40 KiB, in segments
	// a pass rewrites one by one, each in a fraction of a second at
	// 16 KB/s. The node is killed while a pass writes the cleaned form of
	// one of the later ones, past the segments the pass rewrote before.
	starts := w.tapering(ctx, "b", 16)
	dir := filepath.Join(node.DataDir, topic+"-0")
	var cleaning []string
	testwait.Until(t, 2*time.Minute, fmt.Sprintf("a cleaned segment from offset %d being written in %s", starts[4], dir), func() error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		cleaning = cleaning[:0]
		for _, e := range ents {
			base, ok := strings.CutSuffix(e.Name(), ".cleaned")
			if !ok {
				continue
			}
			if b, err := strconv.ParseInt(base, 10, 64); err == nil && b >= starts[4] {
				cleaning = append(cleaning, e.Name())
			}
		}
		if len(cleaning) > 0 {
			return nil
		}
		// Every pass rewrites the segments from the log start: should the
		// passes have ended unseen, a tick starts another.
		if ratio, err := dirtyRatio(ctx, describe)(); err == nil && ratio < 0.01 {
			w.tick(ctx)
		}
		return testwait.ErrNotYet
	})
	node.Kill()
	t.Logf("killed %s while it wrote %v", node.Name(), cleaning)
	node.Restart()
	c.WaitPartition(ctx, topic, 0, "node 1 leading again", func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() == 1 })
	w.check("after the restart", read())

	// The cleaner goes on from where the kill stopped it.
	testwait.Until(t, 2*time.Minute, "the cleaner to finish after the restart", func() error {
		ratio, err := dirtyRatio(ctx, describe)()
		if err != nil {
			return err
		}
		return testwait.True(ratio < 0.01)
	})
	w.check("after cleaning again", read())
}
