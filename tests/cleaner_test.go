package tests

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestCompactedTopicKeepsEveryLiveKey proves the storage nodes' log
// cleaner with real processes: a compacted topic (RF 2) whose 40 keys are
// each overwritten 15 times, one of them last with a tombstone, is cleaned
// on both replicas (their local bytes fall, the cleaner's backoff shortened
// with --cleaner-backoff); a consumer reading through the Connect client
// from the start then sees, for every key, its newest value (the tombstone
// included, delete.retention.ms not having passed) and fewer records than
// were produced; and after the leader is killed, the follower's own cleaned
// copy gives the same answer.
func TestCompactedTopicKeepsEveryLiveKey(t *testing.T) {
	t.Parallel()
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 2, StorageArgs: []string{"--cleaner-backoff", "200ms"}})
	gw := harness.StartGateway(t, c)
	ctx := harness.Deadline(t, 150*time.Second)
	const topic, keys, rounds = "state", 40, 15
	c.CreateTopic(ctx, topic, 1, 2, map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096",
		"min.cleanable.dirty.ratio": "0.1", "min.insync.replicas": "2"})
	c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)

	p, err := client.NewProducer(gw.URL, client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := map[string]string{}
	pad := strings.Repeat("p", 100)
	payload := int64(0) // key and value bytes produced
	for r := range rounds {
		var recs []*client.Record
		for k := range keys {
			key, val := fmt.Sprintf("key-%02d", k), fmt.Sprintf("r%02d-%s", r, pad)
			rec := &client.Record{Topic: topic, Key: []byte(key), Value: []byte(val)}
			if k == 0 && r == rounds-1 {
				rec.Value, val = nil, "<tombstone>"
			}
			recs = append(recs, rec)
			want[key] = val
			payload += int64(len(rec.Key) + len(rec.Value))
		}
		if err := p.ProduceSync(ctx, recs...); err != nil {
			t.Fatalf("produce round %d: %v", r, err)
		}
	}
	produced := int64(keys * rounds)

	// Both replicas clean their own copy (the cleaner runs while the
	// records arrive): each one's local bytes fall well below the bytes
	// produced.
	testwait.Until(t, 60*time.Second, "both replicas cleaned", func() error {
		for _, n := range c.StorageNodes() {
			d, err := describeLog(ctx, n, topic, 0)
			if err != nil {
				return err
			}
			if d.GetLocalSizeBytes() > payload/3 {
				return fmt.Errorf("%s holds %d bytes; %d bytes of keys and values were produced", n.Name(), d.GetLocalSizeBytes(), payload)
			}
			// DescribeLog (strata topic describe's source) reports the
			// cleaner's dirty ratio of a compacted topic.
			if d.CleanerDirtyRatio == nil || d.GetCleanerDirtyRatio() >= 0.1 {
				return fmt.Errorf("%s reports a dirty ratio of %v", n.Name(), d.CleanerDirtyRatio)
			}
		}
		return nil
	})

	read := func(what string) {
		t.Helper()
		got, n := consumeLatest(ctx, t, gw.URL, topic)
		if !maps.Equal(got, want) {
			t.Fatalf("%s: live keys %v, want %v", what, got, want)
		}
		if n >= produced {
			t.Fatalf("%s: read %d records of %d produced; nothing was cleaned", what, n, produced)
		}
		t.Logf("%s: %d live keys in %d records (%d produced)", what, len(got), n, produced)
	}
	read("from the leader")

	leader, _ := c.Leader(ctx, topic, 0)
	leader.Kill()
	c.WaitPartition(harness.Deadline(t, 60*time.Second), topic, 0, "a new leader", func(p *commonv1.PartitionMetadata) bool {
		return p.GetLeaderId() >= 0 && p.GetLeaderId() != int32(leader.ID)
	})
	read("from the follower, after the leader was killed")
}

// consumeLatest reads a partition from its start to its high watermark
// through the gateway with the Connect client (readConnect) and returns
// the newest value of each key ("<tombstone>" for a null value) and how
// many records it read.
func consumeLatest(ctx context.Context, t *testing.T, gateway, topic string) (map[string]string, int64) {
	t.Helper()
	recs := readConnect(ctx, t, gateway, topic)
	out := map[string]string{}
	for _, r := range recs {
		v := string(r.value)
		if r.value == nil {
			v = "<tombstone>"
		}
		out[r.key] = v
	}
	return out, int64(len(recs))
}
