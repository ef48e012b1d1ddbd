package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// TopicConfig applies retention.ms and retention.bytes only to a topic
// whose cleanup.policy includes delete, as Kafka's log manager does; every
// millisecond count saturates instead of wrapping into a short Duration.
func TestTopicConfigRetentionByPolicy(t *testing.T) {
	const forever, week = time.Duration(-1), 7 * 24 * time.Hour
	for _, tc := range []struct {
		name  string
		cfg   map[string]string
		age   time.Duration
		bytes int64
	}{
		{"delete", map[string]string{"cleanup.policy": "delete", "retention.ms": "60000", "retention.bytes": "1000"}, time.Minute, 1000},
		{"unset policy is delete", map[string]string{"retention.ms": "60000"}, time.Minute, -1},
		{"compact", map[string]string{"cleanup.policy": "compact", "retention.ms": "60000", "retention.bytes": "1000"}, forever, -1},
		{"compact with defaults", map[string]string{"cleanup.policy": "compact"}, forever, -1},
		{"compact,delete", map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "60000", "retention.bytes": "1000"}, time.Minute, 1000},
		{"delete,compact", map[string]string{"cleanup.policy": "delete, compact", "retention.ms": "60000"}, time.Minute, -1},
		// Edges of retention.ms: -1, 0, the largest Duration in ms, the
		// first ms that overflows it, a value that once wrapped to under a
		// millisecond, and Long.MAX_VALUE.
		{"retention.ms -1", map[string]string{"retention.ms": "-1"}, forever, -1},
		{"retention.ms 0", map[string]string{"retention.ms": "0"}, 1, -1},
		{"retention.ms largest", map[string]string{"retention.ms": "9223372036854"}, 9223372036854 * time.Millisecond, -1},
		{"retention.ms first overflow", map[string]string{"retention.ms": "9223372036855"}, math.MaxInt64, -1},
		{"retention.ms 18446744073710", map[string]string{"retention.ms": "18446744073710"}, math.MaxInt64, -1},
		{"retention.ms Long.MAX_VALUE", map[string]string{"retention.ms": "9223372036854775807"}, math.MaxInt64, -1},
		// Edges of retention.bytes: -1 no limit, 0 keeps no closed segment.
		{"retention.bytes -1", map[string]string{"retention.bytes": "-1"}, week, -1},
		{"retention.bytes 0", map[string]string{"retention.bytes": "0"}, week, retainNoBytes},
		{"retention.bytes Long.MAX_VALUE", map[string]string{"retention.bytes": "9223372036854775807"}, week, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := TopicConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Log.RetentionAge != tc.age || cfg.Log.RetentionBytes != tc.bytes {
				t.Fatalf("retention age %v bytes %d, want %v and %d", cfg.Log.RetentionAge, cfg.Log.RetentionBytes, tc.age, tc.bytes)
			}
		})
	}
}

// Every millisecond config saturates: segment.ms and flush.ms at
// Long.MAX_VALUE are accepted and mean "never", not a wrapped negative or
// tiny Duration.
func TestTopicConfigMillisSaturate(t *testing.T) {
	cfg, err := TopicConfig(map[string]string{"segment.ms": "9223372036854775807", "flush.ms": "9223372036854775807"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log.SegmentAge != math.MaxInt64 {
		t.Fatalf("segment.ms Long.MAX_VALUE: segment age %v, want the largest Duration", cfg.Log.SegmentAge)
	}
	cfg, err = TopicConfig(map[string]string{"segment.ms": "18446744073710"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log.SegmentAge != math.MaxInt64 {
		t.Fatalf("segment.ms 18446744073710: segment age %v, want the largest Duration", cfg.Log.SegmentAge)
	}
}

// A compacted topic loses nothing to retention: with retention.ms=1 and
// retention.bytes=1, every sealed segment of old records stays. When the
// topic's policy changes to compact,delete while it holds that data, the
// same round deletes them; a delete topic beside it loses them too.
func TestRetentionByPolicyOnANode(t *testing.T) {
	c := newCluster(t, 1, 5*time.Second)
	old := time.Now().Add(-time.Hour).UnixMilli()
	val := strings.Repeat("v", 900)
	for _, topic := range []string{"compacted", "deleted"} {
		policy := "compact"
		if topic == "deleted" {
			policy = "delete"
		}
		c.ctrl.SetTopic(&commonv1.TopicMetadata{
			Name: topic, TopicId: topic + "-id",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
				Replicas: []int32{1}, Isr: []int32{1}}},
			Configs: map[string]string{"min.insync.replicas": "1", "segment.bytes": "16384",
				"cleanup.policy": policy, "retention.ms": "1", "retention.bytes": "1"},
		})
		c.eventually("topic "+topic+" hosted", func() bool {
			r := c.node(1).node.replica(topic, 0)
			return r != nil && r.View().State.LeaderEpoch == 1
		})
		for i := range 40 {
			b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Key: []byte(fmt.Sprint(i)), Value: []byte(val), Timestamp: old}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := produce(c.storage(1), topic, commonv1.Acks_ACKS_ALL, 1, b, 10*time.Second); err != nil {
				t.Fatalf("produce to %s: %v", topic, err)
			}
		}
		if n := len(c.node(1).node.replica(topic, 0).Log().Segments()); n < 2 {
			t.Fatalf("%s has %d segments, want sealed ones", topic, n)
		}
	}
	n := c.node(1).node
	n.retentionRound(context.Background())
	if start := n.replica("compacted", 0).Log().LogStartOffset(); start != 0 {
		t.Fatalf("retention deleted records of a compacted topic: log start %d", start)
	}
	if start := n.replica("deleted", 0).Log().LogStartOffset(); start == 0 {
		t.Fatalf("retention kept the sealed segments of a delete topic")
	}

	c.ctrl.UpdateTopicConfigs("compacted", func(m map[string]string) { m["cleanup.policy"] = "compact,delete" })
	c.eventually("the node applies compact,delete", func() bool {
		return n.replica("compacted", 0).Log().Config().RetentionAge == 1*time.Millisecond
	})
	n.retentionRound(context.Background())
	if start := n.replica("compacted", 0).Log().LogStartOffset(); start == 0 {
		t.Fatalf("retention kept the sealed segments after the policy became compact,delete")
	}
}

// The configs applied by the leader before the append map onto the
// replica's ProduceRules, and the log's index interval and segment jitter
// onto its config.
func TestTopicConfigProduceRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  map[string]string
		want replica.ProduceRules
	}{
		{"defaults", map[string]string{}, replica.ProduceRules{}},
		{"delete", map[string]string{"cleanup.policy": "delete"}, replica.ProduceRules{}},
		{"compact", map[string]string{"cleanup.policy": "compact"}, replica.ProduceRules{RequireKeys: true}},
		{"compact,delete", map[string]string{"cleanup.policy": "delete, compact"}, replica.ProduceRules{RequireKeys: true}},
		{"Kafka 4 timestamp defaults", map[string]string{"message.timestamp.type": "CreateTime",
			"message.timestamp.before.max.ms": "9223372036854775807", "message.timestamp.after.max.ms": "3600000"},
			replica.ProduceRules{LimitTimestamps: true, TimestampBeforeMaxMs: math.MaxInt64, TimestampAfterMaxMs: 3600000}},
		{"LogAppendTime", map[string]string{"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "0"},
			replica.ProduceRules{LogAppendTime: true}},
		{"producer codec", map[string]string{"compression.type": "producer"}, replica.ProduceRules{}},
		{"zstd", map[string]string{"compression.type": "zstd"}, replica.ProduceRules{Recompress: true, Codec: recordbatch.CodecZstd}},
		{"uncompressed", map[string]string{"compression.type": "uncompressed"}, replica.ProduceRules{Recompress: true, Codec: recordbatch.CodecNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := TopicConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Produce != tc.want {
				t.Fatalf("produce rules %+v, want %+v", cfg.Produce, tc.want)
			}
		})
	}
	cfg, err := TopicConfig(map[string]string{"index.interval.bytes": "0", "segment.jitter.ms": "9223372036854775807"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log.IndexIntervalBytes != 1 || cfg.Log.SegmentJitter != math.MaxInt64 {
		t.Fatalf("index interval %d (want 1: every batch) and segment jitter %v (want the largest Duration)", cfg.Log.IndexIntervalBytes, cfg.Log.SegmentJitter)
	}
	if cfg, _ := TopicConfig(map[string]string{"index.interval.bytes": "8192"}); cfg.Log.IndexIntervalBytes != 8192 {
		t.Fatalf("index interval %d, want 8192", cfg.Log.IndexIntervalBytes)
	}
}
