package server

import (
	"context"
	"fmt"
	stdmaps "maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// keyedBatch is one record with a key and a value.
func keyedBatch(t *testing.T, key, value string) []byte {
	t.Helper()
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Key: []byte(key), Value: []byte(value), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// liveKeys reads a log from its start to its high watermark and returns
// the newest value of each key, and how many records it read.
func liveKeys(t *testing.T, l *partlog.Log) (map[string]string, int) {
	t.Helper()
	out, n := map[string]string{}, 0
	for next := l.LogStartOffset(); next < l.HighWatermark(); {
		res, err := l.Read(next, 1<<20, l.HighWatermark())
		if err != nil {
			t.Fatalf("read at %d: %v", next, err)
		}
		if len(res.Batches) == 0 {
			t.Fatalf("empty read at %d below the high watermark %d", next, l.HighWatermark())
		}
		it := recordbatch.NewIter(res.Batches, true)
		for _, raw, ok := it.Next(); ok; _, raw, ok = it.Next() {
			dec, err := recordbatch.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range dec.Records {
				out[string(r.Key)] = string(r.Value)
				n++
			}
		}
		next = res.NextOffset
	}
	return out, n
}

// A storage node cleans the replicas of a compacted topic: the leader's
// log keeps the newest value of every key; a replica added afterwards
// copies the cleaned log, gaps and all, from the leader; and it cleans its
// own copy independently. A topic with the delete policy beside it is
// left alone.
func TestNodeCleansCompactedTopics(t *testing.T) {
	c := newCluster(t, 2, 2*time.Second)
	pad := strings.Repeat("x", 200)
	for _, topic := range []string{"state", "events"} {
		policy := map[string]string{"state": "compact", "events": "delete"}[topic]
		c.ctrl.SetTopic(&commonv1.TopicMetadata{
			Name: topic, TopicId: topic + "-id",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
				Replicas: []int32{1}, Isr: []int32{1}}},
			Configs: map[string]string{"min.insync.replicas": "1", "segment.bytes": "2048",
				"cleanup.policy": policy, "min.cleanable.dirty.ratio": "0.1"},
		})
		c.eventually("topic "+topic+" hosted", func() bool {
			r := c.node(1).node.replica(topic, 0)
			return r != nil && r.View().State.LeaderEpoch == 1
		})
	}
	want := map[string]string{}
	for v := range 10 {
		for k := range 8 {
			key, val := fmt.Sprintf("key-%d", k), fmt.Sprintf("v%d-%s", v, pad)
			for _, topic := range []string{"state", "events"} {
				if _, err := produce(c.storage(1), topic, commonv1.Acks_ACKS_ALL, 1, keyedBatch(t, key, val), 10*time.Second); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
			want[key] = val
		}
	}
	n1 := c.node(1).node
	leader := n1.replica("state", 0).Log()
	appended := leader.LogEndOffset()
	before := leader.Stats()
	// Sealed segments are fsynced in the background after each roll; the
	// cleaner takes only what is.
	c.eventually("the leader cleans the compacted topic", func() bool {
		n1.cleanerRound(context.Background(), nil)
		r, ok := n1.DirtyRatio("state", 0)
		_, n := liveKeys(t, leader)
		return ok && r < 0.1 && n < int(appended)/2
	})
	if got, _ := liveKeys(t, leader); !stdmaps.Equal(got, want) {
		t.Fatalf("leader's live keys %v, want %v", got, want)
	}
	if after := leader.Stats(); after.Bytes >= before.Bytes || after.LogEnd != appended {
		t.Fatalf("leader stats before %+v after %+v", before, after)
	}
	if _, ok := n1.DirtyRatio("events", 0); ok {
		t.Fatal("the cleaner looks after a topic with the delete policy")
	}
	if _, n := liveKeys(t, n1.replica("events", 0).Log()); n != int(appended) {
		t.Fatalf("the delete topic holds %d records, %d appended", n, appended)
	}

	// A replica added now copies what the leader holds: the follower's
	// appends accept the gaps.
	c.ctrl.UpdatePartition("state", 0, func(p *commonv1.PartitionMetadata) {
		p.Replicas, p.AddingReplicas = []int32{1, 2}, []int32{2}
	})
	c.eventually("node 2 in the ISR", func() bool { return slices.Contains(c.ctrl.Partition("state", 0).GetIsr(), 2) })
	follower := c.node(2).node.replica("state", 0).Log()
	c.eventually("node 2 caught up", func() bool {
		return follower.LogEndOffset() == appended && follower.HighWatermark() == appended
	})
	got, n := liveKeys(t, follower)
	_, leaderN := liveKeys(t, leader)
	if !stdmaps.Equal(got, want) || n != leaderN {
		t.Fatalf("follower holds %d records %v; the leader %d", n, got, leaderN)
	}

	// More overwrites; each replica cleans on its own.
	for k := range 8 {
		key := fmt.Sprintf("key-%d", k)
		for v := range 4 {
			val := fmt.Sprintf("again%d-%s", v, pad)
			if _, err := produce(c.storage(1), "state", commonv1.Acks_ACKS_ALL, 1, keyedBatch(t, key, val), 10*time.Second); err != nil {
				t.Fatalf("produce: %v", err)
			}
			want[key] = val
		}
	}
	n2 := c.node(2).node
	c.eventually("both replicas clean the new overwrites", func() bool {
		n1.cleanerRound(context.Background(), nil)
		n2.cleanerRound(context.Background(), nil)
		r1, ok1 := n1.DirtyRatio("state", 0)
		r2, ok2 := n2.DirtyRatio("state", 0)
		return ok1 && ok2 && r1 < 0.1 && r2 < 0.1 && follower.HighWatermark() == leader.LogEndOffset()
	})
	for id, l := range map[int32]*partlog.Log{1: leader, 2: follower} {
		if got, _ := liveKeys(t, l); !stdmaps.Equal(got, want) {
			t.Fatalf("node %d live keys %v, want %v", id, got, want)
		}
	}
}

// cleanConfig reads the cleaner's configs by their Kafka names, with
// Kafka's defaults and saturating millisecond counts.
func TestCleanConfig(t *testing.T) {
	cc := cleanConfig(map[string]string{})
	if cc.DeleteRetention != 24*time.Hour || cc.MinCompactionLag != 0 || cc.MaxCompactionLag != math.MaxInt64 || cc.MinCleanableDirtyRatio != 0.5 {
		t.Fatalf("defaults %+v", cc)
	}
	cc = cleanConfig(map[string]string{"delete.retention.ms": "1000", "min.compaction.lag.ms": "2000",
		"max.compaction.lag.ms": "9223372036854775807", "min.cleanable.dirty.ratio": "0.25"})
	if cc.DeleteRetention != time.Second || cc.MinCompactionLag != 2*time.Second || cc.MaxCompactionLag != math.MaxInt64 || cc.MinCleanableDirtyRatio != 0.25 {
		t.Fatalf("set %+v", cc)
	}
}

// The throttle holds the cleaner to its rate, in pieces no larger than
// its burst.
func TestCleanerThrottle(t *testing.T) {
	if cleanerThrottle(0) != nil {
		t.Fatal("a zero rate throttles")
	}
	th := cleanerThrottle(1000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := th(ctx, 5000); err == nil {
		t.Fatal("a wait for more than the burst on a cancelled context returned no error")
	}
	if err := th(context.Background(), 1000); err != nil {
		t.Fatalf("one burst: %v", err)
	}
}
