package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestKafkaTransactionsFromTheTier runs franz-go's transactional producer
// against a real strata dev on a tiered topic with small segments and no
// local retention: committed and aborted transactions, then plain records
// so that every marker lies in a sealed segment. Once every replica has
// deleted its local copies of the transactions (they are only in the
// tier), a read_committed consumer from the start reads exactly the
// committed and plain records, and a read_uncommitted one reads all of
// them. Before tiered segments carried their aborted transaction index,
// read_committed stopped at the first transactional batch in the tier
// (issue #35).
func TestKafkaTransactionsFromTheTier(t *testing.T) {
	t.Parallel()
	d, _ := kafkaDev(t)
	ctx := harness.Deadline(t, 4*time.Minute)
	const topic = "txn-tiered"
	adm := kadm.NewClient(kafkaClient(t, d))
	str := func(s string) *string { return &s }
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{
		"remote.storage.enable": str("true"), "segment.bytes": str(tierSegmentBytes), "local.retention.bytes": str("0"),
	}, topic); err != nil {
		t.Fatal(err)
	}
	tx := kafkaClient(t, d, kgo.TransactionalID("tiered-txn"), kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(30*time.Second))
	round := func(name string, end kgo.TransactionEndTry) []string {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatalf("%s: BeginTransaction: %v", name, err)
		}
		values := tierValues(name, 20)
		for i := 0; i < len(values); i += 5 {
			var rs []*kgo.Record
			for _, v := range values[i : i+5] {
				rs = append(rs, &kgo.Record{Value: []byte(v)})
			}
			if err := tx.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatalf("%s: produce: %v", name, err)
			}
		}
		if err := tx.EndTransaction(ctx, end); err != nil {
			t.Fatalf("%s: EndTransaction: %v", name, err)
		}
		return values
	}
	var committed, aborted []string
	committed = append(committed, round("commit1", kgo.TryCommit)...)
	aborted = append(aborted, round("abort1", kgo.TryAbort)...)
	committed = append(committed, round("commit2", kgo.TryCommit)...)
	aborted = append(aborted, round("abort2", kgo.TryAbort)...)
	committed = append(committed, round("commit3", kgo.TryCommit)...)

	// Every marker is in once the last stable offset reaches the end.
	var txnEnd int64
	testwait.Until(t, time.Minute, "the last transaction's markers", func() error {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return err
		}
		e, _ := ends.Lookup(topic, 0)
		s, _ := stable.Lookup(topic, 0)
		if e.Offset != s.Offset {
			return fmt.Errorf("last stable offset %d, end %d", s.Offset, e.Offset)
		}
		txnEnd = e.Offset
		return nil
	})
	// Plain records seal the segments holding the markers.
	plain := tierValues("plain", 40)
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic(topic))
	for i := 0; i < len(plain); i += 5 {
		var rs []*kgo.Record
		for _, v := range plain[i : i+5] {
			rs = append(rs, &kgo.Record{Value: []byte(v)})
		}
		if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce plain records: %v", err)
		}
	}
	// Only the tier holds the transactions: every replica's first local
	// segment starts past them.
	testwait.Until(t, 2*time.Minute, fmt.Sprintf("every replica's local log to start at %d or later", txnEnd), func() error {
		for n := 1; n <= 3; n++ {
			start, err := localLogStart(filepath.Join(d.Dir, fmt.Sprintf("storage-%d", n), topic+"-0"))
			if err != nil {
				return err
			}
			if start < txnEnd {
				return fmt.Errorf("storage-%d: local log starts at %d", n, start)
			}
		}
		return nil
	})

	values := func(recs []*kgo.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		slices.Sort(out)
		return out
	}
	// read_committed: the commits and the plain records, nothing of the
	// aborts. The plain records come after every transaction, so once
	// they are all read an aborted record would have been too.
	want := slices.Concat(committed, plain)
	got := values(consumeUntil(t, d, topic, "the committed records", func(recs []*kgo.Record) bool { return len(recs) >= len(want) },
		kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("read_committed read %d records, want the %d committed and plain ones: %.40q", len(got), len(want), got)
	}
	all := slices.Concat(committed, aborted, plain)
	got = values(consumeUntil(t, d, topic, "every record", func(recs []*kgo.Record) bool { return len(recs) >= len(all) },
		kgo.FetchIsolationLevel(kgo.ReadUncommitted())))
	if !slices.Equal(got, slices.Sorted(slices.Values(all))) {
		t.Fatalf("read_uncommitted read %d records, want all %d", len(got), len(all))
	}
}

// localLogStart is the base offset of the first .log segment in a
// partition's directory.
func localLogStart(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	first := int64(-1)
	for _, e := range ents {
		var base int64
		if _, err := fmt.Sscanf(e.Name(), "%020d.log", &base); err == nil && strings.HasSuffix(e.Name(), ".log") && (first < 0 || base < first) {
			first = base
		}
	}
	if first < 0 {
		return 0, fmt.Errorf("no segment in %s", dir)
	}
	return first, nil
}
