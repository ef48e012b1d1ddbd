package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/kafka/kafkatest"
)

// TestFranzGoOnFakeCluster: an idempotent acks=all franz-go producer and
// a consumer, through three bridges on a fake cluster: every record is
// acknowledged and read back at its offset, across a leader move that the
// producer learns of from NOT_LEADER_OR_FOLLOWER and a Metadata refresh.
func TestFranzGoOnFakeCluster(t *testing.T) {
	fc := fakecluster.New(3)
	t.Cleanup(fc.Close)
	seeds := kafkatest.Listeners(t, fc, 3)
	if err := fc.CreateTopic("orders", 3, 3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	acked := map[string]int64{} // "partition/value" -> offset
	produce := func(from, to int) {
		t.Helper()
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Partition: int32(i % 3), Value: []byte(fmt.Sprint(i))})
		}
		for _, r := range pr.ProduceSync(ctx, rs...) {
			if r.Err != nil {
				t.Fatalf("record %s: %v", r.Record.Value, r.Err)
			}
			acked[fmt.Sprintf("%d/%s", r.Record.Partition, r.Record.Value)] = r.Record.Offset
		}
	}
	produce(0, 30)
	leader, _ := fc.Leader("orders", 0)
	fc.MoveLeader("orders", 0, leader%3+1)
	produce(30, 60)
	if now, _ := fc.Leader("orders", 0); now == leader {
		t.Fatalf("orders-0 still led by %d", now)
	}

	co, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	read := map[string]int64{}
	testwait.Until(t, time.Minute, "every acknowledged record read back", func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		fs := co.PollFetches(pctx)
		fs.EachRecord(func(r *kgo.Record) { read[fmt.Sprintf("%d/%s", r.Partition, r.Value)] = r.Offset })
		if len(read) < len(acked) {
			return fmt.Errorf("%d of %d read", len(read), len(acked))
		}
		return nil
	})
	for k, off := range acked {
		if got, ok := read[k]; !ok || got != off {
			t.Errorf("record %s acknowledged at offset %d, read at %d (%v)", k, off, got, ok)
		}
	}
}
