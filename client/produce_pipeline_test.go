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
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
)

// The in-flight queue resolves batches in order whatever order their
// answers come in, and knows which batches have an earlier one open.
func TestInflightResolvesInOrder(t *testing.T) {
	var q inflight
	bs := make([]*batch, 4)
	for i := range bs {
		bs[i] = &batch{}
		q.push(bs[i])
		q.setSent(bs[i], &produceReq{})
	}
	if q.sent != 4 || bs[0].behind || !bs[1].behind || !bs[3].behind {
		t.Fatalf("sent %d, behind %v %v %v; want 4, false true true", q.sent, bs[0].behind, bs[1].behind, bs[3].behind)
	}
	q.answered(bs[3], batchAcked)
	q.answered(bs[1], batchAcked)
	if got := q.resolved(); got != nil {
		t.Fatalf("%d batches resolved while the first is unanswered, want none", len(got))
	}
	q.answered(bs[0], batchReady) // a retriable failure: sent again later
	if q.nextReady() != bs[0] || !q.earlierOpen(bs[2]) || q.earlierOpen(bs[0]) {
		t.Fatal("the failed first batch is not the next to send, or not seen as open")
	}
	q.answered(bs[0], batchAcked)
	if got := q.resolved(); !slices.Equal(got, bs[:2]) {
		t.Fatalf("resolved %d batches, want the first two", len(got))
	}
	q.answered(bs[2], batchFailed)
	if got := q.resolved(); !slices.Equal(got, bs[2:]) || q.sent != 0 || len(q.batches) != 0 {
		t.Fatalf("resolved %d batches, %d sent, %d left; want the last two, 0, 0", len(got), q.sent, len(q.batches))
	}
}

// A partition pipelines only once the leader knows its producer id: the
// first batch under an id goes alone, and so does the first after an
// hour with nothing in flight. Without idempotence it never pipelines.
func TestPipelineLimit(t *testing.T) {
	cfg := defaultConfig()
	s := &sink{p: &Producer{cfg: cfg}}
	now := time.Now()
	if n := s.limit(now); n != 1 {
		t.Fatalf("limit %d before any acknowledgement, want 1", n)
	}
	s.confirmed, s.idleSince = true, now
	if n := s.limit(now); n != 5 {
		t.Fatalf("limit %d once acknowledged, want 5", n)
	}
	if n := s.limit(now.Add(idleAlone)); n != 1 {
		t.Fatalf("limit %d after an hour idle, want 1", n)
	}
	// A batch acknowledged behind an unanswered one still counts: were
	// the first's answer lost after it landed, a sixth batch landing too
	// would push it out of the five the leader remembers, and its retry
	// would be refused as out of order instead of answered as a duplicate.
	s.confirmed, s.idleSince = true, now
	for i := range 5 {
		b := &batch{}
		s.q.push(b)
		s.q.setSent(b, &produceReq{})
		if i > 0 {
			s.q.answered(b, batchAcked)
		}
	}
	if s.mayTakeNext(now) {
		t.Fatal("a sixth batch may be taken while the first of five is unanswered")
	}
	s.q.answered(s.q.batches[0], batchAcked)
	s.q.resolved()
	if !s.mayTakeNext(now) {
		t.Fatal("no batch may be taken once all five are resolved")
	}
	cfg.idempotent = false
	s = &sink{p: &Producer{cfg: cfg}, confirmed: true}
	if n := s.limit(now); n != 1 {
		t.Fatalf("limit %d without idempotence, want 1", n)
	}
}

func TestMaxInFlightOption(t *testing.T) {
	if _, err := NewProducer("http://127.0.0.1:1", MaxInFlight(6)); err == nil || err.Error() != "client: option MaxInFlight: 6 is outside [1, 5]" {
		t.Fatalf("err = %v, want one line naming MaxInFlight and its limits", err)
	}
	p, err := NewProducer("http://127.0.0.1:1", WithAcks(AcksLeader), MaxInFlight(5))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.cfg.maxInFlight != 1 {
		t.Fatalf("max in flight %d without idempotence, want 1", p.cfg.maxInFlight)
	}
}

// callGate holds the Produce calls the producer sends while closed, and
// counts how many name the same partition at once.
type callGate struct {
	mu      sync.Mutex
	open    bool
	opened  chan struct{}
	waiting int           // calls held at the gate now
	out     map[int32]int // calls between the gate and their answer, by partition
	maxOut  int           // the most calls naming one partition at once
	// before, when set, runs for each call as it passes the gate with
	// the base sequence of its first batch: it may delay the call.
	before func(ctx context.Context, seq int32) error
}

func newCallGate() *callGate {
	return &callGate{open: true, opened: make(chan struct{}), out: map[int32]int{}}
}

func (g *callGate) close() {
	g.mu.Lock()
	g.open, g.opened = false, make(chan struct{})
	g.mu.Unlock()
}

func (g *callGate) release() {
	g.mu.Lock()
	g.open = true
	close(g.opened)
	g.mu.Unlock()
}

func (g *callGate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *callGate) maxInFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxOut
}

func (g *callGate) opt() Opt {
	return ConnectOptions(connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			var records []byte
			var parts []int32
			switch m := req.Any().(type) {
			case *storagev1.ProduceRequest:
				records, parts = m.GetRecords(), []int32{m.GetPartition()}
			case *storagev1.ProducePartitionsRequest:
				records = m.GetPartitions()[0].GetRecords()
				for _, pp := range m.GetPartitions() {
					parts = append(parts, pp.GetPartition())
				}
			default:
				return next(ctx, req)
			}
			g.mu.Lock()
			for _, part := range parts {
				g.out[part]++
				g.maxOut = max(g.maxOut, g.out[part])
			}
			g.waiting++
			open, opened := g.open, g.opened
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				for _, part := range parts {
					g.out[part]--
				}
				g.mu.Unlock()
			}()
			var err error
			if !open {
				select {
				case <-opened:
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			g.mu.Lock()
			g.waiting--
			if err != nil {
				g.mu.Unlock()
				return nil, err
			}
			before := g.before
			g.mu.Unlock()
			if h, err := recordbatch.PeekHeader(records); err == nil && before != nil {
				if err := before(ctx, h.BaseSequence); err != nil {
					return nil, err
				}
			}
			return next(ctx, req)
		}
	})))
}

// orderedLog checks one partition's log: the values produced, in order,
// each once.
func orderedLog(t *testing.T, fc *fakecluster.Cluster, want []string) {
	t.Helper()
	if got := logValues(t, fc, 0); !slices.Equal(got, want) {
		t.Fatalf("log holds %q, want %q", got, want)
	}
}

// logValues returns the values in a partition of topic "t"'s log, in order.
func logValues(t *testing.T, fc *fakecluster.Cluster, part int32) []string {
	t.Helper()
	recs, err := fc.Records("t", part)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Value))
	}
	return got
}

// callbackLog records the records whose callbacks ran, in order.
type callbackLog struct {
	mu   sync.Mutex
	vals []string
	errs []error
	done chan struct{}
	want int
}

func newCallbackLog(want int) *callbackLog {
	return &callbackLog{done: make(chan struct{}), want: want}
}

func (l *callbackLog) cb(r *Record, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.vals = append(l.vals, fmt.Sprintf("%s@%d", r.Value, r.Offset))
	if err != nil {
		l.errs = append(l.errs, err)
	}
	if len(l.vals) == l.want {
		close(l.done)
	}
}

// wait waits for every callback and checks that they ran in produce
// order, each with the offset its record has in the log.
func (l *callbackLog) wait(t *testing.T, ctx context.Context, want []string) {
	t.Helper()
	select {
	case <-l.done:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("%d records failed, first: %v", len(l.errs), l.errs[0])
	}
	var offsets []string
	for i, v := range want {
		offsets = append(offsets, fmt.Sprintf("%s@%d", v, i))
	}
	if !slices.Equal(l.vals, offsets) {
		t.Fatalf("callbacks ran for %q, want %q", l.vals, offsets)
	}
}

// pipelined produces n one-record batches to partition 0 after a first
// one acknowledged, each sent while the ones before it are held at the
// gate: it returns once the n calls are in flight together. With one
// batch in flight per partition the second call never comes.
func pipelined(t *testing.T, ctx context.Context, p *Producer, g *callGate, log *callbackLog, n int) []string {
	t.Helper()
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v0")}); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.vals = append(log.vals, "v0@0")
	log.mu.Unlock()
	want := []string{"v0"}
	g.close()
	for i := 1; i <= n; i++ {
		v := fmt.Sprint("v", i)
		want = append(want, v)
		p.Produce(ctx, &Record{Topic: "t", Value: []byte(v)}, log.cb)
		testwait.Until(t, 10*time.Second, fmt.Sprintf("%d calls for the partition in flight at once", i), func() error {
			return testwait.True(g.held() == i)
		})
	}
	return want
}

// firstAfterTheRest makes the call of the partition's second batch
// (sequence 1: the first pipelined one, after the one sent alone) reach
// the leader only once the leader holds the four after it, then runs
// then (when set) just before it goes on.
func firstAfterTheRest(fc *fakecluster.Cluster, then func()) func(ctx context.Context, seq int32) error {
	return func(ctx context.Context, seq int32) error {
		if seq != 1 {
			return nil
		}
		for fc.Held() < 4 {
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if then != nil {
			then()
		}
		return nil
	}
}

// Up to five batches of a partition are in flight at once; when the
// leader sees the later ones first it holds them until the gap fills, and
// the records land in produce order, each once, with the callbacks in
// order.
func TestProducerPipelinesAPartition(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	g := newCallGate()
	p := newProducer(t, fc, Linger(0), g.opt())
	ctx := ctxT(t)
	log := newCallbackLog(6)
	want := pipelined(t, ctx, p, g, log, 5)
	g.mu.Lock()
	g.before = firstAfterTheRest(fc, nil)
	g.mu.Unlock()
	g.release()
	log.wait(t, ctx, want)
	orderedLog(t, fc, want)
	if n := g.maxInFlight(); n != 5 {
		t.Fatalf("%d calls for the partition in flight at most, want 5", n)
	}
	if fc.Held() == 0 {
		t.Fatal("the leader held no batch: the calls were not reordered")
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v6")}); err != nil {
		t.Fatal(err)
	}
	orderedLog(t, fc, append(want, "v6"))
}

// A retriable failure of the oldest batch while four later ones are in
// flight: the partition waits for their answers, sends the unacknowledged
// batches again in order, and every record lands once, in order, with
// the callbacks in order. Before the append (the later batches are held
// behind the gap and refused) and after it (the later ones land, and the
// first is recognized as a duplicate).
func TestProducerRecoversPipelineInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault fakecluster.Fault
	}{
		{"not leader", fakecluster.Fault{Method: "Produce", Partition: 0, Code: connect.CodeFailedPrecondition,
			Reason: commonv1.Reason_REASON_NOT_LEADER, Count: 1}},
		{"answer lost after append", fakecluster.Fault{Method: "Produce", Partition: 0, Code: connect.CodeUnavailable,
			AfterAppend: true, Count: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFake(t, 1, "t", 1)
			g := newCallGate()
			var retries retryLog
			// The short request timeout bounds the leader's hold of the
			// batches behind the failed one.
			p := newProducer(t, fc, Linger(0), g.opt(), RequestTimeout(time.Second), OnRetry(retries.add))
			ctx := ctxT(t)
			log := newCallbackLog(6)
			want := pipelined(t, ctx, p, g, log, 5)
			// The oldest of the five batches fails, once the four after
			// it are held at the leader.
			fault := tc.fault
			g.mu.Lock()
			g.before = firstAfterTheRest(fc, func() { fc.AddFault(&fault) })
			g.mu.Unlock()
			g.release()
			log.wait(t, ctx, want)
			orderedLog(t, fc, want)
			if fc.Fired(&fault) != 1 {
				t.Fatalf("fault fired %d times, want 1", fc.Fired(&fault))
			}
			if len(retries.all()) == 0 {
				t.Fatal("no retry reported")
			}
		})
	}
}

// The node sender keeps several calls in flight and a partition's
// batches in different calls: over many records a partition has more
// than one call out at once, and the partition's records land in order.
func TestProducerPipelinesUnderLoad(t *testing.T) {
	fc := newFake(t, 2, "t", 4)
	g := newCallGate()
	p := newProducer(t, fc, ManualPartitioning(), Linger(0), MaxBatchBytes(64), g.opt())
	ctx := ctxT(t)
	const n = 400
	log := make([]*callbackLog, 4)
	for part := range log {
		log[part] = newCallbackLog(n / 4)
	}
	want := make([][]string, 4)
	for i := range n {
		part := i % 4
		v := fmt.Sprint(i)
		want[part] = append(want[part], v)
		p.Produce(ctx, &Record{Topic: "t", Partition: int32(part), Value: []byte(v)}, log[part].cb)
	}
	for part := range log {
		log[part].wait(t, ctx, want[part])
		if got := logValues(t, fc, int32(part)); !slices.Equal(got, want[part]) {
			t.Fatalf("partition %d holds %q, want %q", part, got, want[part])
		}
	}
	if m := g.maxInFlight(); m < 2 {
		t.Fatalf("at most %d produce calls for one partition in flight at once, want more than 1", m)
	}
}
