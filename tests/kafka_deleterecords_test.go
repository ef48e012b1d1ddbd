package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/tests/harness"
)

// testKafkaDeleteRecords runs, on TestKafkaClients' cluster,
// DescribeProducers as kafka-transactions.sh sends it (each leader lists
// the producer that wrote), then DeleteRecords as Kafka Streams purges a
// repartition topic and kafka-delete-records.sh sends it: the log start moves on every in-sync replica before the
// answer (its low watermark), a consumer from the start begins there, -1
// deletes up to the high watermark, and Kafka's refusals hold (an offset
// past the high watermark, a compacted topic).
func testKafkaDeleteRecords(t *testing.T, ctx context.Context, d *harness.Dev, adm *kadm.Client) {
	if _, err := adm.CreateTopic(ctx, 2, 3, nil, "purged"); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"cleanup.policy": &compact}, "purged-compact"); err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for i := range 20 {
		rs = append(rs, &kgo.Record{Topic: "purged", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)},
			&kgo.Record{Topic: "purged-compact", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)})
	}
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// The producer (idempotent, franz-go's default) as each leader
	// remembers it: 10 records on each partition of purged, 20 on
	// purged-compact, sequences from 0.
	pid, epoch, err := pr.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	described, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"purged": nil, "purged-compact": nil})
	if err != nil {
		t.Fatal(err)
	}
	for topic, last := range map[string]int32{"purged": 9, "purged-compact": 19} {
		for _, dp := range described[topic].Partitions.Sorted() {
			p, ok := dp.ActiveProducers[pid]
			if dp.Err != nil || !ok || len(dp.ActiveProducers) != 1 || p.ProducerEpoch != epoch || p.LastSequence != last || p.LastTimestamp <= 0 {
				t.Fatalf("describe producers of %s/%d: %+v (err %v), want producer %d epoch %d at sequence %d", topic, dp.Partition, dp.ActiveProducers, dp.Err, pid, epoch, last)
			}
		}
		if n := len(described[topic].Partitions); n != map[string]int{"purged": 2, "purged-compact": 1}[topic] {
			t.Fatalf("%s: %d partitions described", topic, n)
		}
	}

	del := func(topic string, p int32, at int64) kadm.DeleteRecordsResponse {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		resp, err := adm.DeleteRecords(ctx, os)
		if err != nil {
			t.Fatalf("delete records of %s/%d before %d: %v", topic, p, at, err)
		}
		r, ok := resp.Lookup(topic, p)
		if !ok {
			t.Fatalf("no answer for %s/%d: %v", topic, p, resp)
		}
		return r
	}
	// Partition 0 holds v0, v2, ... v18 at offsets 0..9.
	if r := del("purged", 0, 6); r.Err != nil || r.LowWatermark != 6 {
		t.Fatalf("delete before 6: low watermark %d, %v; want 6 on every in-sync replica", r.LowWatermark, r.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, "purged")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("purged", 0); o.Offset != 6 {
		t.Fatalf("start offset of purged/0 is %d, want 6", o.Offset)
	}
	if o, _ := starts.Lookup("purged", 1); o.Offset != 0 {
		t.Fatalf("start offset of purged/1 is %d, want 0 (untouched)", o.Offset)
	}
	cl := kafkaClient(t, d, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"purged": {0: kgo.NewOffset().AtStart()}}))
	fs := cl.PollRecords(ctx, 100)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 6 || string(recs[0].Value) != "v12" {
		t.Fatalf("a consumer from the start read %v first, want v12 at offset 6", recs)
	}

	// -1: everything committed so far.
	if r := del("purged", 1, -1); r.Err != nil || r.LowWatermark != 10 {
		t.Fatalf("delete before the high watermark: low watermark %d, %v; want 10", r.LowWatermark, r.Err)
	}
	if r := del("purged", 0, 11); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete past the high watermark 10: %v, want OFFSET_OUT_OF_RANGE", r.Err)
	}
	if r := del("purged-compact", 0, 5); !errors.Is(r.Err, kerr.PolicyViolation) {
		t.Fatalf("delete on a compacted topic: %v, want POLICY_VIOLATION", r.Err)
	}

	// A tiered topic: the tier deletes too (services/storage's
	// TestDeleteRecordsOnATieredTopic reads from the tier around it).
	tiered := "true"
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"remote.storage.enable": &tiered}, "purged-tiered"); err != nil {
		t.Fatal(err)
	}
	rs = rs[:0]
	for i := range 10 {
		rs = append(rs, &kgo.Record{Topic: "purged-tiered", Value: fmt.Appendf(nil, "t%d", i)})
	}
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to the tiered topic: %v", err)
	}
	if r := del("purged-tiered", 0, 4); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("delete before 4 on a tiered topic: low watermark %d, %v; want 4", r.LowWatermark, r.Err)
	}
	if starts, err := adm.ListStartOffsets(ctx, "purged-tiered"); err != nil {
		t.Fatal(err)
	} else if o, _ := starts.Lookup("purged-tiered", 0); o.Offset != 4 {
		t.Fatalf("start offset of purged-tiered/0 is %d, want 4", o.Offset)
	}
}
