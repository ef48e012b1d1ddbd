package server

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// The storage API refuses what a topic's rules refuse with a reason a
// client acts on and one line a person can: a record without a key in a
// compacted topic (INVALID_RECORD) and a timestamp out of the window
// (INVALID_TIMESTAMP). A LogAppendTime topic answers with the time.
func TestProduceRulesAtTheStorageAPI(t *testing.T) {
	c := newCluster(t, 1, 5*time.Second)
	for name, cfg := range map[string]map[string]string{
		"compacted": {"cleanup.policy": "compact"},
		"window":    {"message.timestamp.type": "CreateTime", "message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "3600000"},
		"stamped":   {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"},
	} {
		cfg["min.insync.replicas"] = "1"
		c.ctrl.SetTopic(&commonv1.TopicMetadata{
			Name: name, TopicId: name + "-id",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
				Replicas: []int32{1}, Isr: []int32{1}}},
			Configs: cfg,
		})
		c.eventually("topic "+name+" hosted", func() bool {
			r := c.node(1).node.replica(name, 0)
			return r != nil && r.View().State.LeaderEpoch == 1 && r.Config().Produce != (replica.ProduceRules{})
		})
	}
	s := c.storage(1)

	_, err := produce(s, "compacted", commonv1.Acks_ACKS_ALL, 1, batch(t, "no key"), 5*time.Second)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != commonv1.Reason_REASON_INVALID_RECORD {
		t.Fatalf("a record without a key in a compacted topic: %v, want INVALID_ARGUMENT with INVALID_RECORD", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "topic compacted is compacted") || !strings.Contains(msg, "every record needs a key") {
		t.Fatalf("message %q does not say what to change", msg)
	}
	keyed, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Key: []byte("k"), Value: []byte("v"), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := produce(s, "compacted", commonv1.Acks_ACKS_ALL, 1, keyed, 5*time.Second); err != nil {
		t.Fatalf("a keyed record: %v", err)
	}

	_, err = produce(s, "window", commonv1.Acks_ACKS_ALL, 1, batchAt(t, "an hour old", time.Now().Add(-time.Hour).UnixMilli()), 5*time.Second)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != commonv1.Reason_REASON_INVALID_TIMESTAMP {
		t.Fatalf("an hour-old timestamp with before.max.ms=60000: %v, want INVALID_TIMESTAMP", err)
	}
	_, err = produce(s, "window", commonv1.Acks_ACKS_ALL, 1, batchAt(t, "two hours ahead", time.Now().Add(2*time.Hour).UnixMilli()), 5*time.Second)
	if reason(err) != commonv1.Reason_REASON_INVALID_TIMESTAMP {
		t.Fatalf("a timestamp two hours ahead with after.max.ms=3600000: %v, want INVALID_TIMESTAMP", err)
	}

	before := time.Now().UnixMilli()
	res, err := produce(s, "stamped", commonv1.Acks_ACKS_ALL, 1, batchAt(t, "old", 1000), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetLogAppendTimeMs() < before {
		t.Fatalf("log append time %d, want the broker's time (at least %d)", res.GetLogAppendTimeMs(), before)
	}
	got := fetch(t, s, "stamped", 0, time.Second)
	h, err := recordbatch.Verify(got.GetRecords())
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || h.MaxTimestamp != res.GetLogAppendTimeMs() || h.Codec() != recordbatch.CodecLZ4 {
		t.Fatalf("fetched header %+v, want log-append time %d and lz4", h, res.GetLogAppendTimeMs())
	}
}
