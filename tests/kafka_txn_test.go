package tests

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestKafkaTransactions runs franz-go's transactional producer against a
// real strata dev: a transaction writing to two partitions is committed,
// the next aborted, and a read_committed consumer sees exactly the
// committed records while a read_uncommitted one sees all of them. Each
// storage leader verifies the partition with the transaction coordinator
// before the first batch of each transaction (KIP-890 part 1).
func TestKafkaTransactions(t *testing.T) {
	t.Parallel()
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := cli("", "topic", "create", "txp", "-p", "2", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	tx := kafkaClient(t, d, kgo.TransactionalID("kafka-txn"), kgo.DefaultProduceTopic("txp"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
	round := func(name string, commit kgo.TransactionEndTry) []string {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatalf("%s: BeginTransaction: %v", name, err)
		}
		var values []string
		for i := range 4 {
			v := fmt.Sprintf("%s-%d", name, i)
			values = append(values, v)
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: int32(i % 2)}).FirstErr(); err != nil {
				t.Fatalf("%s: produce %s: %v", name, v, err)
			}
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("%s: EndTransaction: %v", name, err)
		}
		return values
	}
	committed := round("commit", kgo.TryCommit)
	aborted := round("abort", kgo.TryAbort)
	committed = append(committed, round("commit2", kgo.TryCommit)...)

	// While a transaction is open, DescribeProducers names where it began
	// (kafka-transactions.sh find-hanging reads it); once ended, -1, and
	// the coordinator epoch of its marker.
	adm := kadm.NewClient(kafkaClient(t, d))
	openTxnStart := func() (int64, int32) {
		t.Helper()
		ps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"txp": {0: {}}})
		if err != nil {
			t.Fatalf("DescribeProducers: %v", err)
		}
		pid, _, err := tx.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dp := ps["txp"].Partitions[0]
		for _, p := range dp.ActiveProducers {
			if p.ProducerID == pid {
				return p.CurrentTxnStartOffset, p.CoordinatorEpoch
			}
		}
		t.Fatalf("DescribeProducers of txp/0: %+v %v; no producer %d", dp.ActiveProducers, dp.Err, pid)
		return 0, 0
	}
	// EndTxn is answered once the decision is durable and the markers
	// follow (docs/kafka.md), as in Kafka: wait for this partition's.
	testwait.Until(t, time.Minute, "the commit's marker on txp/0", func() error {
		if start, coord := openTxnStart(); start != -1 || coord < 0 {
			return fmt.Errorf("transaction start %d, coordinator epoch %d; want -1 and an epoch: %w", start, coord, testwait.ErrNotYet)
		}
		return nil
	})
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open, err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("open-0"), Partition: 0}).First()
	if err != nil {
		t.Fatal(err)
	}
	if start, _ := openTxnStart(); start != open.Offset {
		t.Errorf("an open transaction from offset %d: DescribeProducers says %d", open.Offset, start)
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	aborted = append(aborted, "open-0")

	values := func(recs []*kgo.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		slices.Sort(out)
		return out
	}
	// read_committed: the two commits, nothing of the abort. The last
	// commit's records are read only once its markers are in, so when
	// they are all there, the abort's would have been too.
	got := values(consumeUntil(t, d, "txp", "the committed records", func(recs []*kgo.Record) bool { return len(recs) >= len(committed) },
		kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	want := slices.Sorted(slices.Values(committed))
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed read %v, want %v", got, want)
	}
	// read_uncommitted: every record written, aborted ones included.
	all := slices.Concat(committed, aborted)
	got = values(consumeUntil(t, d, "txp", "every record", func(recs []*kgo.Record) bool { return len(recs) >= len(all) },
		kgo.FetchIsolationLevel(kgo.ReadUncommitted())))
	if want := slices.Sorted(slices.Values(all)); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted read %v, want %v", got, want)
	}

	// kafka-transactions.sh list and describe (KIP-664), through kadm:
	// the last transaction aborted.
	testwait.Until(t, time.Minute, "kafka-txn listed as CompleteAbort", func() error {
		listed, err := adm.ListTransactions(ctx, nil, []string{"CompleteAbort"})
		if err != nil {
			return err
		}
		if _, ok := listed["kafka-txn"]; !ok {
			return fmt.Errorf("listed %v: %w", listed.TransactionalIDs(), testwait.ErrNotYet)
		}
		return nil
	})
	described, err := adm.DescribeTransactions(ctx, "kafka-txn", "no-such-txn")
	if err == nil {
		err = described["no-such-txn"].Err
	}
	if !errors.Is(err, kerr.TransactionalIDNotFound) {
		t.Errorf("describing an unknown id: %v, want TRANSACTIONAL_ID_NOT_FOUND", err)
	}
	dt := described["kafka-txn"]
	if dt.Err != nil || dt.State != "CompleteAbort" || dt.ProducerID < 0 || dt.TimeoutMillis != 30000 {
		t.Errorf("kafka-txn described as %+v", dt)
	}
}
