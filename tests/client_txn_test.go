package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/tests/harness"
)

// TestGoClientTransactions runs the Go client's transactional producer on
// one strata dev cluster: a commit over two partitions and an abort read
// back by read_committed and read_uncommitted consumers; a
// consume-transform-produce round whose group offsets commit only with
// the transaction; and a second producer with the same transactional id
// fencing the first.
func TestGoClientTransactions(t *testing.T) {
	t.Parallel()
	d, cli := kafkaDev(t)
	gw := d.Gateways[0]
	for _, topic := range []string{"gtx", "gtx-in", "gtx-out", "gtx-bump", "gtx-restart"} {
		parts := "1"
		if topic == "gtx" {
			parts = "2"
		}
		if _, err := cli("", "topic", "create", topic, "-p", parts, "-r", "3"); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("CommitAndAbort", func(t *testing.T) { testTxnCommitAndAbort(t, gw) })
	t.Run("ConsumeTransformProduce", func(t *testing.T) { testTxnConsumeTransformProduce(t, gw) })
	t.Run("FailedSendAborts", func(t *testing.T) { testTxnFailedSend(t, gw) })
	t.Run("Fencing", func(t *testing.T) { testTxnFencing(t, gw) })
	// Last: it kills the coordinator.
	t.Run("CoordinatorRestart", func(t *testing.T) { testTxnCoordinatorRestart(t, d, gw) })
}

func newTxnProducer(t *testing.T, gw, id string, opts ...client.ProducerOpt) *client.Producer {
	t.Helper()
	p, err := client.NewProducer(gw, append([]client.ProducerOpt{client.TransactionalID(id), client.TransactionTimeout(30 * time.Second),
		client.RetryBackoff(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// produceTxn produces values to topic (value i to partition i%parts);
// a record that fails fails the test from its callback, which runs before
// the transaction's commit returns.
func produceTxn(t *testing.T, ctx context.Context, p *client.Producer, topic string, parts int32, values []string) {
	t.Helper()
	for i, v := range values {
		p.Produce(ctx, &client.Record{Topic: topic, Partition: int32(i) % parts, Value: []byte(v)}, func(_ *client.Record, err error) {
			if err != nil {
				t.Errorf("produce %s: %v", v, err)
			}
		})
	}
}

func valuesOf(name string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", name, i)
	}
	return out
}

// readAll reads topic's partitions from the start with a consumer of the
// given isolation until done says it has enough, and returns the values
// read, sorted.
func readAll(t *testing.T, gw, topic string, parts int32, iso client.ConsumerOpt, what string, done func([]string) bool) []string {
	t.Helper()
	c, err := client.NewConsumer(gw, iso, client.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	as := map[int32]client.Offset{}
	for p := range parts {
		as[p] = client.StartOffset()
	}
	c.Assign(map[string]map[int32]client.Offset{topic: as})
	ctx := harness.Deadline(t, 60*time.Second)
	var got []string
	for !done(got) {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v (read %v)", what, err, got)
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	slices.Sort(got)
	return got
}

func testTxnCommitAndAbort(t *testing.T, gw string) {
	ctx := harness.Deadline(t, 2*time.Minute)
	p := newTxnProducer(t, gw, "go-txn", client.ManualPartitioning())

	// Outside a transaction a transactional producer refuses records.
	if err := p.ProduceSync(ctx, &client.Record{Topic: "gtx", Value: []byte("outside")}); !errors.Is(err, client.ErrNoTransaction) {
		t.Fatalf("produce outside a transaction: %v, want ErrNoTransaction", err)
	}
	round := func(name string, commit bool) []string {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatalf("%s: BeginTransaction: %v", name, err)
		}
		values := valuesOf(name, 4)
		produceTxn(t, ctx, p, "gtx", 2, values)
		if err := p.Flush(ctx); err != nil { // in the log before the decision
			t.Fatal(err)
		}
		end := p.CommitTransaction
		if !commit {
			end = p.AbortTransaction
		}
		if err := end(ctx); err != nil {
			t.Fatalf("%s: end the transaction: %v", name, err)
		}
		return values
	}
	committed := round("commit", true)
	aborted := round("abort", false)
	committed = append(committed, round("commit2", true)...)
	slices.Sort(committed)

	// read_committed: both commits and nothing of the abort. The last
	// commit's records follow the abort's in each partition, so once they
	// are read the abort's would have been.
	got := readAll(t, gw, "gtx", 2, client.ReadCommitted(), "committed records", func(v []string) bool { return len(v) >= len(committed) })
	if !slices.Equal(got, committed) {
		t.Fatalf("read_committed read %v, want %v", got, committed)
	}
	// A group consumer reads committed records by default.
	gc, err := client.NewGroupConsumer(gw, "gtx-reader", []string{"gtx"}, client.GroupConsumerOptions(client.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gc.Close(context.Background()) }()
	got = nil
	for len(got) < len(committed) {
		recs, err := gc.Poll(ctx)
		if err != nil {
			t.Fatalf("group consumer: %v (read %v)", err, got)
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	if slices.Sort(got); !slices.Equal(got, committed) {
		t.Fatalf("a default group consumer read %v, want %v", got, committed)
	}
	all := slices.Sorted(slices.Values(slices.Concat(committed, aborted)))
	got = readAll(t, gw, "gtx", 2, client.ReadUncommitted(), "every record", func(v []string) bool { return len(v) >= len(all) })
	if !slices.Equal(got, all) {
		t.Fatalf("read_uncommitted read %v, want %v", got, all)
	}
}

// committedOffset is the group's committed offset of topic's partition 0,
// -1 when none.
func committedOffset(t *testing.T, ctx context.Context, gw, group, topic string) int64 {
	t.Helper()
	hc := harness.H2CClient()
	fc, err := gatewayv1connect.NewGatewayServiceClient(hc, gw).FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: group}))
	if err != nil {
		t.Fatalf("FindCoordinator: %v", err)
	}
	resp, err := coordinatorv1connect.NewCoordinatorServiceClient(hc, fc.Msg.GetAddress()).OffsetFetch(ctx, connect.NewRequest(&coordinatorv1.OffsetFetchRequest{
		GroupId: group, Topics: []*commonv1.TopicPartitions{{Topic: topic, Partitions: []int32{0}}}}))
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	for _, o := range resp.Msg.GetOffsets() {
		if o.GetTopic() == topic && o.GetPartition() == 0 {
			return o.GetCommittedOffset()
		}
	}
	return -1
}

func testTxnConsumeTransformProduce(t *testing.T, gw string) {
	ctx := harness.Deadline(t, 2*time.Minute)
	in := valuesOf("in", 5)
	pl, err := client.NewProducer(gw)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range in {
		if err := pl.ProduceSync(ctx, &client.Record{Topic: "gtx-in", Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	pl.Close()

	const group = "gtx-group"
	gc, err := client.NewGroupConsumer(gw, group, []string{"gtx-in"}, client.GroupConsumerOptions(client.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gc.Close(context.Background()) }()
	var recs []*client.Record
	for len(recs) < len(in) {
		got, err := gc.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		recs = append(recs, got...)
	}
	p := newTxnProducer(t, gw, "go-ctp")
	transform := func(name string, commit bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			p.Produce(ctx, &client.Record{Topic: "gtx-out", Value: []byte(name + ":" + string(r.Value))}, nil)
		}
		if err := p.SendOffsetsToTransaction(ctx, gc.GroupMetadata(), client.NextOffsets(recs)); err != nil {
			t.Fatalf("%s: SendOffsetsToTransaction: %v", name, err)
		}
		// Staged, not committed: the group's offset has not moved.
		if o := committedOffset(t, ctx, gw, group, "gtx-in"); o >= 0 {
			t.Fatalf("%s: committed offset %d before the transaction ended", name, o)
		}
		end := p.CommitTransaction
		if !commit {
			end = p.AbortTransaction
		}
		if err := end(ctx); err != nil {
			t.Fatalf("%s: end the transaction: %v", name, err)
		}
	}
	transform("aborted", false)
	if o := committedOffset(t, ctx, gw, group, "gtx-in"); o >= 0 {
		t.Fatalf("committed offset %d after an aborted transaction", o)
	}
	transform("committed", true)
	if o := committedOffset(t, ctx, gw, group, "gtx-in"); o != int64(len(in)) {
		t.Fatalf("committed offset %d after the commit, want %d", o, len(in))
	}
	var want []string
	for _, v := range in {
		want = append(want, "committed:"+v)
	}
	slices.Sort(want)
	got := readAll(t, gw, "gtx-out", 1, client.ReadCommitted(), "the committed output", func(v []string) bool { return len(v) >= len(want) })
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed output %v, want %v", got, want)
	}
}

// testTxnFailedSend: a record that fails makes the commit refuse with
// ErrAbortRequired; the abort bumps the producer's epoch at the
// coordinator (KIP-360), and the next transaction commits under it.
func testTxnFailedSend(t *testing.T, gw string) {
	ctx := harness.Deadline(t, 2*time.Minute)
	p := newTxnProducer(t, gw, "go-bump", client.UnknownTopicWait(100*time.Millisecond))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &client.Record{Topic: "gtx-bump", Value: []byte("aborted")}); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &client.Record{Topic: "gtx-no-such-topic", Value: []byte("x")}); !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("produce to a missing topic: %v, want ErrUnknownTopic", err)
	}
	if err := p.CommitTransaction(ctx); !errors.Is(err, client.ErrAbortRequired) {
		t.Fatalf("commit after a failed send: %v, want ErrAbortRequired", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &client.Record{Topic: "gtx-bump", Value: []byte("committed")}); err != nil {
		t.Fatalf("produce under the bumped epoch: %v", err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("commit under the bumped epoch: %v", err)
	}
	got := readAll(t, gw, "gtx-bump", 1, client.ReadCommitted(), "the committed record", func(v []string) bool { return len(v) >= 1 })
	if !slices.Equal(got, []string{"committed"}) {
		t.Fatalf("read_committed read %v, want [committed]", got)
	}
}

func testTxnFencing(t *testing.T, gw string) {
	ctx := harness.Deadline(t, 2*time.Minute)
	p1 := newTxnProducer(t, gw, "go-fence")
	if err := p1.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p1.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p1.ProduceSync(ctx, &client.Record{Topic: "gtx", Value: []byte("zombie")}); err != nil {
		t.Fatal(err)
	}
	// The second producer's init aborts the first's open transaction and
	// bumps the epoch.
	p2 := newTxnProducer(t, gw, "go-fence")
	if err := p2.InitTransactions(ctx); err != nil {
		t.Fatalf("second producer's InitTransactions: %v", err)
	}
	if err := p1.CommitTransaction(ctx); !errors.Is(err, client.ErrProducerFenced) {
		t.Fatalf("first producer's commit after the fence: %v, want ErrProducerFenced", err)
	}
	if err := p1.BeginTransaction(); !errors.Is(err, client.ErrProducerFenced) {
		t.Fatalf("first producer's BeginTransaction after the fence: %v, want ErrProducerFenced", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var perr error
	p1.Produce(ctx, &client.Record{Topic: "gtx", Value: []byte("zombie2")}, func(_ *client.Record, err error) { perr = err; wg.Done() })
	wg.Wait()
	if !errors.Is(perr, client.ErrProducerFenced) {
		t.Fatalf("first producer's produce after the fence: %v, want ErrProducerFenced", perr)
	}
	// The new producer goes on.
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p2.ProduceSync(ctx, &client.Record{Topic: "gtx", Value: []byte("fenced-successor")}); err != nil {
		t.Fatal(err)
	}
	if err := p2.CommitTransaction(ctx); err != nil {
		t.Fatalf("second producer's commit: %v", err)
	}
}

// testTxnCoordinatorRestart: the coordinator is killed with a transaction
// open; the commit retries while it is down (reported to OnRetry as the
// coordinator being unavailable), and succeeds once it is started again
// from its argv, with the transaction's records committed.
func testTxnCoordinatorRestart(t *testing.T, d *harness.Dev, gw string) {
	ctx := harness.Deadline(t, 2*time.Minute)
	unavailable := make(chan struct{})
	var once sync.Once
	p := newTxnProducer(t, gw, "go-restart", client.OnRetry(func(ev client.RetryEvent) {
		if ev.Reason == client.RetryCoordinatorUnavailable {
			once.Do(func() { close(unavailable) })
		}
	}))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	values := valuesOf("restart", 4)
	produceTxn(t, ctx, p, "gtx-restart", 1, values)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	coord := d.Process(t, "coordinator", 1)
	d.Kill(t, "coordinator", 1)
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(ctx) }()
	select {
	case <-unavailable:
	case err := <-done:
		t.Fatalf("commit returned %v while the coordinator was down", err)
	case <-ctx.Done():
		t.Fatal("the commit never retried")
	}
	harness.Start(t, "coordinator-1-again", coord.Argv)
	if err := <-done; err != nil {
		t.Fatalf("commit across the coordinator's restart: %v", err)
	}
	got := readAll(t, gw, "gtx-restart", 1, client.ReadCommitted(), "the committed records", func(v []string) bool { return len(v) >= len(values) })
	if !slices.Equal(got, values) {
		t.Fatalf("read_committed read %v, want %v", got, values)
	}
}
