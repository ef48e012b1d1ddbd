package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// produceGate records the partitions of every Produce the producer sends
// and holds each call until the test lets it go.
type produceGate struct {
	mu    sync.Mutex
	calls [][]string // "topic/partition" per call, in order
	open  chan struct{}
}

func newProduceGate() *produceGate { return &produceGate{open: make(chan struct{})} }

func (g *produceGate) release() { close(g.open) }

func (g *produceGate) seen() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

func (g *produceGate) opt() Opt {
	return ConnectOptions(connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			var parts []string
			switch m := req.Any().(type) {
			case *storagev1.ProduceRequest:
				parts = append(parts, fmt.Sprintf("%s/%d", m.GetTopic(), m.GetPartition()))
			case *storagev1.ProducePartitionsRequest:
				for _, p := range m.GetPartitions() {
					parts = append(parts, fmt.Sprintf("%s/%d", p.GetTopic(), p.GetPartition()))
				}
			default:
				return next(ctx, req)
			}
			slices.Sort(parts)
			g.mu.Lock()
			g.calls = append(g.calls, parts)
			g.mu.Unlock()
			select {
			case <-g.open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return next(ctx, req)
		}
	})))
}

// queued is how many batches wait for the node's next call.
func (p *Producer) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ns := range p.senders {
		ns.mu.Lock()
		n += len(ns.queue)
		ns.mu.Unlock()
	}
	return n
}

// oneCall keeps one call in flight per node (and one batch per
// partition), so the tests of how calls share partitions see each call
// after the last; pipelining has its own tests (produce_pipeline_test.go).
var oneCall = MaxInFlight(1)

// The batches of every partition a node leads that are ready while the
// node's call is out leave together in its next call, one Produce for all
// of them, and each partition gets its own offsets.
func TestProducerSendsOneProducePerNode(t *testing.T) {
	fc := newFake(t, 1, "t", 5)
	g := newProduceGate()
	p := newProducer(t, fc, oneCall, ManualPartitioning(), Linger(0), g.opt())
	ctx := ctxT(t)

	done := make(chan error, 5)
	produce := func(part int32, v string) {
		r := &Record{Topic: "t", Partition: part, Value: []byte(v)}
		p.Produce(ctx, r, func(_ *Record, err error) { done <- err })
	}
	produce(0, "first")
	testwait.Until(t, 10*time.Second, "the first call", func() error { return testwait.True(len(g.seen()) == 1) })
	for part := int32(1); part < 5; part++ {
		produce(part, fmt.Sprint("v", part))
	}
	testwait.Until(t, 10*time.Second, "four batches queued behind the first call", func() error {
		return testwait.True(p.queued() == 4)
	})
	g.release()
	for range 5 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{{"t/0"}, {"t/1", "t/2", "t/3", "t/4"}}
	if got := g.seen(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if n, m := fc.Calls("Produce"), fc.Calls("ProducePartitions"); n != 1 || m != 1 {
		t.Fatalf("%d Produce and %d ProducePartitions calls served, want 1 and 1", n, m)
	}
	for part := int32(0); part < 5; part++ {
		if n := len(fc.Batches("t", part)); n != 1 {
			t.Fatalf("partition %d holds %d batches, want 1", part, n)
		}
	}
}

// In steady state a node's partitions keep sharing one call per round
// trip: after the first rounds, many rounds of records for four
// partitions of one node take about one call per round, not four.
func TestProducerKeepsPartitionsOfANodeInOneCall(t *testing.T) {
	fc := newFake(t, 1, "t", 4)
	p := newProducer(t, fc, oneCall, ManualPartitioning(), Linger(0))
	ctx := ctxT(t)
	const rounds = 50
	for round := range rounds {
		var recs []*Record
		for part := int32(0); part < 4; part++ {
			recs = append(recs, &Record{Topic: "t", Partition: part, Value: []byte(fmt.Sprint(round))})
		}
		if err := p.ProduceSync(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	// Each round's four records are produced together and waited for:
	// one call per partition would be 4 × rounds calls. On a quiet
	// machine a round takes one or two calls (the first record may leave
	// alone before the others are queued); on a busy one the test's
	// goroutine can be paused between records for longer than a call
	// takes, so a round may take more. What must hold whatever the load
	// is that rounds share calls at all: fewer than one call per
	// partition per round.
	if n := fc.Calls("Produce") + fc.Calls("ProducePartitions"); n >= 4*rounds {
		t.Fatalf("%d produce calls for %d rounds of 4 partitions, want fewer than one per partition (%d)", n, rounds, 4*rounds)
	}
}

// A partition whose leader is elsewhere fails alone in a call for several
// partitions: it goes through its own retry (metadata refresh, new
// leader) and the others are acknowledged from the first call.
func TestProducerRetriesOnePartitionOfACall(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Partition: 1, Code: connect.CodeFailedPrecondition,
		Reason: commonv1.Reason_REASON_NOT_LEADER, Count: 1})
	g := newProduceGate()
	var retried []RetryEvent
	var mu sync.Mutex
	p := newProducer(t, fc, oneCall, ManualPartitioning(), Linger(0), g.opt(), OnRetry(func(ev RetryEvent) {
		mu.Lock()
		retried = append(retried, ev)
		mu.Unlock()
	}))
	ctx := ctxT(t)
	done := make(chan error, 3)
	p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")}, func(_ *Record, err error) { done <- err })
	testwait.Until(t, 10*time.Second, "the first call", func() error { return testwait.True(len(g.seen()) == 1) })
	for _, part := range []int32{1, 2} {
		p.Produce(ctx, &Record{Topic: "t", Partition: part, Value: []byte(fmt.Sprint(part))}, func(_ *Record, err error) { done <- err })
	}
	testwait.Until(t, 10*time.Second, "two batches queued", func() error { return testwait.True(p.queued() == 2) })
	g.release()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	calls := g.seen()
	if len(calls) != 3 || !slices.Equal(calls[1], []string{"t/1", "t/2"}) || !slices.Equal(calls[2], []string{"t/1"}) {
		t.Fatalf("calls %q, want t/0, then t/1 and t/2 together, then t/1 alone", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retried) != 1 || retried[0].Partition != 1 || retried[0].Reason != RetryNotLeader {
		t.Fatalf("retries %+v, want one of partition 1 for not leader", retried)
	}
	for part := int32(0); part < 3; part++ {
		if n := len(fc.Batches("t", part)); n != 1 {
			t.Fatalf("partition %d holds %d batches, want 1", part, n)
		}
	}
}

// A partition of a shared call whose answer is lost after its append is
// retried alone, and the leader recognizes the retry by its sequence: it
// is answered with the original offset and appended once, while the other
// partitions of the call are acknowledged once.
func TestProducerRetryInSharedCallIsNotDuplicated(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Partition: 1, AfterAppend: true, Code: connect.CodeUnavailable, Count: 1})
	g := newProduceGate()
	p := newProducer(t, fc, oneCall, ManualPartitioning(), Linger(0), g.opt())
	ctx := ctxT(t)
	type result struct {
		r   *Record
		err error
	}
	done := make(chan result, 3)
	cb := func(r *Record, err error) { done <- result{r, err} }
	p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")}, cb)
	testwait.Until(t, 10*time.Second, "the first call", func() error { return testwait.True(len(g.seen()) == 1) })
	p.Produce(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("1")}, cb)
	p.Produce(ctx, &Record{Topic: "t", Partition: 2, Value: []byte("2")}, cb)
	testwait.Until(t, 10*time.Second, "two batches queued", func() error { return testwait.True(p.queued() == 2) })
	g.release()
	for range 3 {
		res := <-done
		if res.err != nil || res.r.Offset != 0 {
			t.Fatalf("partition %d: offset %d, %v; want acknowledged at 0", res.r.Partition, res.r.Offset, res.err)
		}
	}
	if calls := g.seen(); len(calls) != 3 || !slices.Equal(calls[2], []string{"t/1"}) {
		t.Fatalf("calls %q, want the third to retry t/1 alone", calls)
	}
	for part := int32(0); part < 3; part++ {
		if n := len(fc.Batches("t", part)); n != 1 {
			t.Fatalf("partition %d holds %d batches, want 1 (no duplicate)", part, n)
		}
	}
}

// A node without ProducePartitions (an older version) answers it
// UNIMPLEMENTED: the producer sends that node one Produce per partition
// from then on, and nothing is lost or written twice.
func TestProducerFallsBackToOneProducePerPartition(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	fc.AddFault(&fakecluster.Fault{Method: "ProducePartitions", Partition: -1, Code: connect.CodeUnimplemented})
	g := newProduceGate()
	p := newProducer(t, fc, oneCall, ManualPartitioning(), Linger(0), g.opt())
	ctx := ctxT(t)
	done := make(chan error, 6)
	cb := func(_ *Record, err error) { done <- err }
	p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")}, cb)
	testwait.Until(t, 10*time.Second, "the first call", func() error { return testwait.True(len(g.seen()) == 1) })
	p.Produce(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("1")}, cb)
	p.Produce(ctx, &Record{Topic: "t", Partition: 2, Value: []byte("2")}, cb)
	testwait.Until(t, 10*time.Second, "two batches queued", func() error { return testwait.True(p.queued() == 2) })
	g.release()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Once more for two partitions: straight to one Produce each.
	p.Produce(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("1b")}, cb)
	p.Produce(ctx, &Record{Topic: "t", Partition: 2, Value: []byte("2b")}, cb)
	p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0b")}, cb)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := fc.Calls("ProducePartitions"); n != 1 {
		t.Fatalf("%d ProducePartitions calls, want 1 (then no more)", n)
	}
	for part := int32(0); part < 3; part++ {
		if n := len(fc.Batches("t", part)); n != 2 {
			t.Fatalf("partition %d holds %d batches, want 2", part, n)
		}
	}
}

// While a call to a node is out, batches of several partitions that
// become ready for it close together wait to share the next call instead
// of each leaving in a call of its own.
func TestProducerPipelinedCallsShareANode(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	g := newProduceGate()
	p := newProducer(t, fc, ManualPartitioning(), Linger(100*time.Millisecond), g.opt())
	ctx := ctxT(t)
	done := make(chan error, 3)
	cb := func(_ *Record, err error) { done <- err }
	p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")}, cb)
	testwait.Until(t, 10*time.Second, "the first call", func() error { return testwait.True(len(g.seen()) == 1) })
	p.Produce(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("1")}, cb)
	p.Produce(ctx, &Record{Topic: "t", Partition: 2, Value: []byte("2")}, cb)
	testwait.Until(t, 10*time.Second, "a second call", func() error { return testwait.True(len(g.seen()) == 2) })
	g.release()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{{"t/0"}, {"t/1", "t/2"}}
	if got := g.seen(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("calls %q, want %q", got, want)
	}
}
