//go:build kafka

package tests

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// The Kafka protocol's long suite (make test-kafka, build tag kafka):
// failover under a producer and consumer groups with a member killed.

// TestKafkaFailover kills the leader of a partition with SIGKILL while a
// franz-go idempotent producer with acks=all writes to it, restarts the
// node, and checks that every acknowledged record is read back once, at
// the offset it was acknowledged at, in order.
func TestKafkaFailover(t *testing.T) {
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := cli("", "topic", "create", "fo", "-p", "1", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(kafkaClient(t, d))
	var leader int32 = -1
	testwait.Until(t, 30*time.Second, "a leader for fo-0", func() error {
		md, err := adm.Metadata(ctx, "fo")
		if err != nil {
			return err
		}
		if p := md.Topics["fo"].Partitions[0]; p.Leader > 0 && len(p.ISR) == 3 {
			leader = p.Leader
			return nil
		}
		return fmt.Errorf("partition %+v", md.Topics["fo"].Partitions[0])
	})
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("fo"),
		kgo.RecordDeliveryTimeout(2*time.Minute), kgo.MetadataMinAge(100*time.Millisecond))
	var mu sync.Mutex
	acked := map[int]int64{} // sequence -> offset
	var failed []error
	produce := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			pr.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[i] = r.Offset
			})
		}
		wg.Wait()
	}
	produce(0, 200)
	victim := d.Process(t, "storage", int(leader))
	done := make(chan struct{})
	go func() { defer close(done); produce(200, 600) }()
	d.Kill(t, "storage", int(leader))
	<-done
	harness.Start(t, fmt.Sprintf("storage-%d-again", leader), victim.Argv)
	produce(600, 700)
	if len(failed) > 0 {
		t.Logf("%d records failed (allowed: they were never acknowledged), first: %v", len(failed), failed[0])
	}
	if len(acked) < 300 {
		t.Fatalf("only %d records acknowledged", len(acked))
	}
	maxOffset := int64(-1)
	for _, off := range acked {
		maxOffset = max(maxOffset, off)
	}
	got := consumeUntil(t, d, "fo", fmt.Sprintf("offset %d", maxOffset), func(got []*kgo.Record) bool {
		return len(got) > 0 && got[len(got)-1].Offset >= maxOffset
	})
	offsets := map[int64]int{}
	last := -1
	for _, r := range got {
		var seq int
		fmt.Sscan(string(r.Value), &seq)
		if prev, dup := offsets[r.Offset]; dup {
			t.Fatalf("offset %d read twice (%d, %d)", r.Offset, prev, seq)
		}
		offsets[r.Offset] = seq
		if seq <= last {
			t.Fatalf("record %d after %d: out of order or duplicated", seq, last)
		}
		last = seq
	}
	for seq, off := range acked {
		if offsets[off] != seq {
			t.Fatalf("record %d acknowledged at offset %d, read there: %d", seq, off, offsets[off])
		}
	}
	keys := make([]int, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.Logf("%d records acknowledged (%d..%d), all read back in order", len(acked), keys[0], keys[len(keys)-1])
}
