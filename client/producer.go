package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Producer sends records to partition leaders in batches.
//
// Each partition has its own sender goroutine, and records of one
// partition are appended in the order Produce was called, retries
// included. Records wait up to Linger for a batch to fill (MaxBatchBytes),
// then go to the leader named by the gateway's metadata, in the leader
// node's next Produce call with the other partitions ready for that node.
// With idempotence (the default) a partition keeps up to MaxInFlight
// batches in flight (default 5), numbered in order; the leader holds one
// that overtakes an earlier one until the gap fills (produce_inflight.go).
// Retriable failures (not leader, fenced or unknown leader epoch,
// unavailable, not enough replicas, timeouts) refresh the metadata and,
// once the partition's other batches in flight have answered, send the
// unacknowledged batches again one at a time, in order, with the same
// bytes and a growing backoff until DeliveryTimeout, then pipeline again;
// the leader recognizes a batch it already appended by its producer id and
// sequence number and answers with the original offsets, so a retry never
// duplicates. A batch that may have landed is never rebuilt under another
// producer epoch: when it cannot be resolved it fails with
// ErrOutcomeUnknown. Each partition keeps its own producer epoch and
// sequences, so a failure on one never touches another. A batch the
// leader refuses as too large is split in halves (KIP-126), unless an
// earlier attempt of it may have landed (then it fails with
// ErrOutcomeUnknown), and batches stay within the topic's
// max.message.bytes when the metadata says it.
// A connection that breaks under a request (its leader killed) is
// retried the same way. Without idempotence a partition has
// one batch in flight, and a batch is sent again only when it certainly
// was not written; one whose outcome is unknown fails with
// ErrOutcomeUnknown rather than risk a duplicate. A leader that answers
// with a throttle time (the principal is over its produce quota) gets no
// request from this producer until it has passed; the other leaders are
// not held up.
//
// With TransactionalID the producer is transactional (transaction.go):
// records are produced between BeginTransaction and CommitTransaction or
// AbortTransaction, and commit or abort together with the consumer
// offsets given to SendOffsetsToTransaction.
//
// A Producer is safe for concurrent use. Close it to release its
// goroutines and connections.
type Producer struct {
	cfg     config
	cl      *cluster
	tracing *tracing

	ctx    context.Context // canceled by Close once buffered records are done
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{} // one token per buffered record (MaxBufferedRecords)

	mu          sync.Mutex
	closed      bool
	sinks       map[topicPartition]*sink
	senders     map[string]*nodeSender // by leader address (produce_node.go)
	sticky      map[string]int32       // partition for unkeyed records, per topic
	outstanding int64                  // records produced, callback not yet run
	idle        chan struct{}          // closed while outstanding == 0
	flushing    int                    // Flush calls in progress: no lingering

	pidMu sync.Mutex
	pid   producerID // from the gateway (or the transaction coordinator); each partition keeps its own epoch (sink.newChain)

	txn *txnState // with TransactionalID (transaction.go); nil otherwise

	learnMu sync.Mutex
	learned map[string]int64 // per topic, half a batch size a leader refused as too large

	closeOnce sync.Once
}

type topicPartition struct {
	topic     string
	partition int32
}

type producerID struct {
	id    int64
	epoch int16
	valid bool
}

// promise is a record waiting for its callback.
type promise struct {
	r    *Record
	cb   func(*Record, error)
	at   time.Time // when Produce accepted it
	size int
	span trace.Span // the record's send span (tracing.go)
}

// NewProducer returns a producer that bootstraps from the gateway at the
// given base URL (for example "http://127.0.0.1:9092", or an https://
// URL for a cluster run with TLS). It validates the options and reads the
// TLS files they name (TLSCA, ClientCertificate), and makes no call: the
// first Produce fetches metadata and, with idempotence, a producer id.
func NewProducer(gateway string, opts ...ProducerOpt) (*Producer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.applyProducer(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if gateway == "" {
		return nil, errors.New("client: no gateway address")
	}
	if err := cfg.openTransport(); err != nil {
		return nil, err
	}
	p := &Producer{
		cfg:     cfg,
		slots:   make(chan struct{}, cfg.maxBuffered),
		sinks:   map[topicPartition]*sink{},
		senders: map[string]*nodeSender{},
		sticky:  map[string]int32{},
		learned: map[string]int64{},
		idle:    make(chan struct{}),
	}
	close(p.idle)
	p.cl = newCluster(gateway, &p.cfg)
	if cfg.transactionalID != "" {
		p.txn = newTxnState(p.cl, &p.cfg)
	}
	p.tracing = newTracing(&p.cfg)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Produce hands a record to the producer and returns once it is buffered;
// cb (which may be nil) runs exactly once, from a producer goroutine, when
// the record is acknowledged (with Partition and Offset set) or has
// failed. Callbacks of one partition run in produce order and should
// return quickly: they delay the partition's next batch.
//
// ctx bounds only the wait to buffer the record: the first metadata lookup
// for its topic and a full buffer (MaxBufferedRecords). Once buffered, the
// record is bounded by DeliveryTimeout. A failure to buffer is reported
// through cb as well.
func (p *Producer) Produce(ctx context.Context, r *Record, cb func(*Record, error)) {
	if cb == nil {
		cb = func(*Record, error) {}
	}
	if r.Topic == "" {
		cb(r, errors.New("client: record has no topic"))
		return
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		cb(r, ctx.Err())
		return
	}
	pr := &promise{r: r, cb: cb, at: time.Now(), size: r.size()}
	p.tracing.traceRecord(ctx, pr)
	if r.Timestamp.IsZero() {
		r.Timestamp = pr.at
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		cb(r, ErrClosed)
		return
	}
	p.addOutstandingLocked(1)
	p.mu.Unlock()

	t, err := p.cl.topic(ctx, r.Topic)
	if err != nil {
		p.finish(pr, err)
		return
	}
	part, err := p.partitionFor(r, t)
	if err != nil {
		p.finish(pr, err)
		return
	}
	if p.txn != nil {
		if err := p.txn.accept(topicPartition{r.Topic, part}); err != nil {
			p.finish(pr, err)
			return
		}
	}
	p.sinkFor(r.Topic, part).add(pr)
}

// Partitions returns the number of partitions of a topic, asking the
// gateway when the topic is not cached yet; *UnknownTopicError when the
// topic does not exist (after UnknownTopicWait).
func (p *Producer) Partitions(ctx context.Context, topic string) (int32, error) {
	t, err := p.cl.topic(ctx, topic)
	if err != nil {
		return 0, err
	}
	return int32(len(t.parts)), nil
}

// ProduceSync produces the records and waits for all of them. It returns
// nil when every record was acknowledged, else the errors joined; when ctx
// ends first it returns ctx.Err() and the records stay in flight.
func (p *Producer) ProduceSync(ctx context.Context, rs ...*Record) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	wg.Add(len(rs))
	for _, r := range rs {
		p.Produce(ctx, r, func(_ *Record, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return errors.Join(errs...)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush sends every buffered record without waiting for Linger and
// returns once all records produced before it have had their callbacks,
// or with ctx.Err() when ctx ends first.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	p.flushing++
	idle := p.idle
	for _, s := range p.sinks {
		s.wakeup()
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.flushing--
		p.mu.Unlock()
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting records, flushes what is buffered (each record
// still bounded by DeliveryTimeout; call Flush with a context first to
// bound the wait), then stops the producer's goroutines. Records produced
// after Close fail with ErrClosed. Safe to call more than once.
func (p *Producer) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		_ = p.Flush(context.Background())
		p.cancel()
		p.wg.Wait()
		p.cl.close()
	})
}

func (p *Producer) addOutstandingLocked(n int64) {
	if p.outstanding == 0 && n > 0 {
		p.idle = make(chan struct{})
	}
	p.outstanding += n
	if p.outstanding == 0 {
		close(p.idle)
	}
}

// finish runs a record's callback and releases its buffer slot.
func (p *Producer) finish(pr *promise, err error) {
	if err != nil && p.txn != nil {
		err = p.txn.failure(err)
	}
	endSend(pr, err)
	pr.cb(pr.r, err)
	<-p.slots
	p.mu.Lock()
	p.addOutstandingLocked(-1)
	p.mu.Unlock()
}

// partitionFor picks the record's partition: the one it names under
// ManualPartitioning, PartitionForKey for keyed records, else the topic's
// sticky partition (Kafka's sticky partitioner: unkeyed records fill one
// partition's batch, then the next partition's).
func (p *Producer) partitionFor(r *Record, t *topicInfo) (int32, error) {
	n := int32(len(t.parts))
	if n == 0 {
		return 0, fmt.Errorf("client: topic %q has no partitions", r.Topic)
	}
	switch {
	case p.cfg.manualPartition:
		if r.Partition < 0 || r.Partition >= n {
			return 0, fmt.Errorf("client: topic %q has no partition %d", r.Topic, r.Partition)
		}
		return r.Partition, nil
	case r.Key != nil:
		return PartitionForKey(r.Key, n), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	part, ok := p.sticky[r.Topic]
	if !ok || part >= n {
		part = p.pickStickyLocked(t, rand.Int32N(n))
		p.sticky[r.Topic] = part
	}
	return part, nil
}

// pickStickyLocked returns the first partition from start on that has a
// leader, or start when none has.
func (p *Producer) pickStickyLocked(t *topicInfo, start int32) int32 {
	n := int32(len(t.parts))
	for i := range n {
		c := (start + i) % n
		if t.parts[c].leader >= 0 {
			return c
		}
	}
	return start
}

// batchTaken moves a topic's sticky partition on once a batch of the
// current one leaves, so unkeyed records spread over partitions.
func (p *Producer) batchTaken(topic string, partition int32) {
	t := p.cl.known(topic)
	if t == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.sticky[topic]; ok && cur == partition {
		p.sticky[topic] = p.pickStickyLocked(t, (partition+1)%int32(len(t.parts)))
	}
}

func (p *Producer) sinkFor(topic string, partition int32) *sink {
	tp := topicPartition{topic, partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sinks[tp]
	if s == nil {
		s = &sink{p: p, tp: tp, wake: make(chan struct{}, 1)}
		p.sinks[tp] = s
		p.wg.Add(1)
		go s.run()
	}
	return s
}

func (p *Producer) isFlushing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushing > 0 || p.closed
}

// producerID returns the idempotent producer id, asking the gateway for
// one when there is none (a transactional producer asks its transaction
// coordinator, transaction.go).
func (p *Producer) producerID(ctx context.Context) (producerID, error) {
	p.pidMu.Lock()
	defer p.pidMu.Unlock()
	if p.pid.valid {
		return p.pid, nil
	}
	if p.txn != nil {
		if err := p.txn.fence(); err != nil {
			return producerID{}, err
		}
		pid, err := p.initTxnProducer(ctx, producerID{})
		if err != nil {
			return producerID{}, err
		}
		p.pid = pid
		return pid, nil
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.requestTimeout)
	defer cancel()
	resp, err := p.cl.gw.InitProducerId(rctx, connect.NewRequest(&gatewayv1.InitProducerIdRequest{}))
	if err != nil {
		return producerID{}, fromConnect(err)
	}
	p.pid = producerID{id: resp.Msg.GetProducerId(), epoch: int16(resp.Msg.GetProducerEpoch()), valid: true}
	return p.pid, nil
}

// freshProducerID returns a producer id other than old, asking the
// gateway for one when the producer's is still old: a partition whose
// chain used up old's epochs needs another.
func (p *Producer) freshProducerID(ctx context.Context, old int64) (producerID, error) {
	p.pidMu.Lock()
	if p.pid.valid && p.pid.id == old {
		p.pid.valid = false
	}
	p.pidMu.Unlock()
	return p.producerID(ctx)
}

// batchLimit is the most record bytes a batch of topic may hold:
// MaxBatchBytes, capped at the topic's max.message.bytes when its
// metadata says, and below any batch size its leader refused as too large
// (learned by sink.split). Safe for concurrent use.
func (p *Producer) batchLimit(topic string) int64 {
	limit := p.cfg.maxBatchBytes
	if t := p.cl.known(topic); t != nil && t.maxMessageBytes > 0 {
		limit = min(limit, t.maxMessageBytes)
	}
	p.learnMu.Lock()
	if l, ok := p.learned[topic]; ok {
		limit = min(limit, l)
	}
	p.learnMu.Unlock()
	return max(limit, 1)
}

// learnLimit remembers that batches of topic must stay below size bytes.
func (p *Producer) learnLimit(topic string, size int64) {
	p.learnMu.Lock()
	defer p.learnMu.Unlock()
	if l, ok := p.learned[topic]; !ok || size < l {
		p.learned[topic] = max(size, 1)
	}
}

// sink is one partition's buffer and sender: its goroutine (run) takes
// batches from the buffer, builds them, submits them to the leader's node
// sender and runs their callbacks in order. See produce_inflight.go for
// how several batches are kept in flight and how a failure is recovered.
type sink struct {
	p    *Producer
	tp   topicPartition
	wake chan struct{}

	mu      sync.Mutex
	buf     []*promise
	bytes   int
	answers []*produceReq // answered by node senders, not yet taken by run

	// Owned by the run goroutine.
	q inflight
	// The partition's sequence chain (idempotence): the producer id and
	// epoch its batches are built under, numbered by chain, and the next
	// base sequence. Each partition has its own, so a failure on one
	// partition never moves another's (see newChain).
	pid   producerID
	chain uint64
	seq   int32
	ord   uint64 // batches built so far (batch.ord)
	// broken: a batch of the chain failed for good after its sequence
	// numbers were spent, so the chain may have a gap; brokenOrd is the
	// latest such batch. A later batch of the chain acknowledged mends
	// it (the leader appends only in sequence, so the failed ones are in
	// the log); otherwise the next batch built starts a new chain once
	// nothing is in flight.
	broken    bool
	brokenOrd uint64
	confirmed bool        // a batch of the chain was acknowledged: pipelining is safe
	idleSince time.Time   // when the last sent batch answered
	owe       *nodeSender // answered this partition last, not told yet where it went
}

// settle tells the node sender that last answered this partition that
// its next batch is not coming right away (produce_node.go).
func (s *sink) settle() {
	if s.owe != nil {
		s.owe.settle()
		s.owe = nil
	}
}

func (s *sink) add(pr *promise) {
	s.mu.Lock()
	s.buf = append(s.buf, pr)
	s.bytes += pr.size
	s.mu.Unlock()
	s.wakeup()
}

func (s *sink) wakeup() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deliver hands the sink a request's answer; called by node senders. An
// answer to a request the sink gave up on is dropped.
func (s *sink) deliver(req *produceReq) {
	s.mu.Lock()
	if !req.abandoned.Load() {
		s.answers = append(s.answers, req)
	}
	s.mu.Unlock()
	s.wakeup()
}

// abandon gives up waiting for a sent batch whose delivery timeout
// passed: it fails as if its request had timed out.
func (s *sink) abandon(b *batch) {
	req := b.req
	s.mu.Lock()
	req.abandon()
	s.answers = slices.DeleteFunc(s.answers, func(r *produceReq) bool { return r == req })
	s.mu.Unlock()
	s.answered(b, produceAns{err: context.DeadlineExceeded}, nil)
}

func (s *sink) run() {
	defer s.p.wg.Done()
	var timer *time.Timer
	for {
		s.mu.Lock()
		answers := s.answers
		s.answers = nil
		s.mu.Unlock()
		for _, req := range answers {
			if req.batch.req == req { // else an answer to a request given up on
				s.answered(req.batch, req.ans, req.from)
			}
		}
		now := time.Now()
		for s.q.sent > 0 && !now.Before(s.q.earliestDeadline()) {
			for _, b := range s.q.batches {
				if b.state == batchSent && !now.Before(b.deadline) {
					s.abandon(b)
					break
				}
			}
		}
		s.complete()

		wakeAt, progressed := s.step(now)
		if progressed {
			continue
		}
		if s.p.ctx.Err() != nil {
			return
		}
		// Nothing to send now: the node sender need not wait for this
		// partition before its next call.
		s.settle()
		if d := s.q.earliestDeadline(); !d.IsZero() && (wakeAt.IsZero() || d.Before(wakeAt)) {
			wakeAt = d
		}
		var tc <-chan time.Time
		if !wakeAt.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(wakeAt))
			} else {
				timer.Reset(time.Until(wakeAt))
			}
			tc = timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-s.p.ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// step sends what the partition may send now: the oldest ready batch
// when recovering (alone, after its backoff), else the next buffered
// batch when under the in-flight limit and its linger has passed. It
// reports whether it did something, else when to look again (zero: when
// woken).
func (s *sink) step(now time.Time) (wakeAt time.Time, progressed bool) {
	if b := s.q.nextReady(); b != nil {
		if s.q.sent > 0 {
			return time.Time{}, false // drain the answers first
		}
		if now.Before(b.retryAt) {
			return b.retryAt, false
		}
		s.submit(b)
		return time.Time{}, true
	}
	if !s.mayTakeNext(now) {
		return time.Time{}, false
	}
	s.mu.Lock()
	n, bytes := len(s.buf), s.bytes
	var first time.Time
	if n > 0 {
		first = s.buf[0].at
	}
	s.mu.Unlock()
	if n == 0 {
		return time.Time{}, false
	}
	limit := s.p.batchLimit(s.tp.topic)
	if at := first.Add(s.p.cfg.linger); now.Before(at) &&
		int64(bytes) < limit && !s.p.isFlushing() {
		return at, false
	}
	b := s.newBatch(s.take(limit))
	s.p.batchTaken(s.tp.topic, s.tp.partition)
	s.q.push(b)
	s.submit(b)
	return time.Time{}, true
}

// mayTakeNext reports whether the partition may take and send a new
// batch: while fewer than the limit are open, counting every batch from
// the oldest unresolved one on, answered or not. An acknowledged batch
// behind an unanswered one still counts: the leader remembers the last
// five batches of a producer, and if the unanswered one's answer was lost
// after it landed, its retry must still be recognized as a duplicate, so
// no more than five may have landed after it.
//
// While the chain is broken nothing new goes until the batches in flight
// have answered: one of them acknowledged mends the chain, else the new
// batch starts a new one.
func (s *sink) mayTakeNext(now time.Time) bool {
	if s.broken && s.q.sent > 0 {
		return false
	}
	return len(s.q.batches) < s.limit(now)
}

// limit is how many batches the partition may have open at once now.
func (s *sink) limit(now time.Time) int {
	if !s.p.cfg.idempotent {
		return 1
	}
	if s.q.sent == 0 && !s.idleSince.IsZero() && now.Sub(s.idleSince) >= idleAlone {
		// The leader may have forgotten the producer: one batch alone
		// first, as for a new producer id.
		s.confirmed = false
	}
	if !s.confirmed {
		return 1
	}
	return int(s.p.cfg.maxInFlight)
}

// take removes the next batch from the buffer: records up to limit bytes
// (the topic's batchLimit), at least one.
func (s *sink) take(limit int64) []*promise {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, size := 0, 0
	for n < len(s.buf) {
		if n > 0 && int64(size+s.buf[n].size) > limit {
			break
		}
		size += s.buf[n].size
		n++
	}
	batch := append([]*promise(nil), s.buf[:n]...)
	clear(s.buf[:n])
	s.buf = s.buf[n:]
	s.bytes -= size
	return batch
}

// newBatch prepares the records of a batch for building.
func (s *sink) newBatch(prs []*promise) *batch {
	recs := make([]recordbatch.Record, len(prs))
	for i, pr := range prs {
		recs[i] = recordbatch.Record{Key: pr.r.Key, Value: pr.r.Value, Timestamp: pr.r.Timestamp.UnixMilli()}
		for _, h := range s.p.tracing.injectHeaders(pr) {
			recs[i].Headers = append(recs[i].Headers, recordbatch.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	return s.batchOf(prs, recs)
}

// batchOf is a batch, not built, of records prepared for building.
func (s *sink) batchOf(prs []*promise, recs []recordbatch.Record) *batch {
	b := &batch{promises: prs, recs: recs, deadline: prs[0].at.Add(s.p.cfg.deliveryTimeout), builtAt: noPID}
	if span := trace.SpanFromContext(withBatchTrace(context.Background(), prs)); span.SpanContext().IsValid() {
		b.span = span
	}
	return b
}

// newChain starts the partition's sequence chain again at sequence 0:
// under the producer's id at first, then under the next epoch of the
// chain's id, or under a fresh id once its epochs are used up. This is
// Kafka's epoch bump for an idempotent producer (KIP-360,
// TransactionManager.bumpIdempotentEpochAndResetIdIfNeeded), per
// partition: the leader takes a newer epoch at sequence 0 and forgets
// the older one's sequences, and refuses the older epoch from then on
// (INVALID_PRODUCER_EPOCH), so a copy of an old batch still on its way
// cannot land after the new chain's batches. The caller makes sure no
// batch of the old chain is in flight.
func (s *sink) newChain(ctx context.Context) error {
	if s.p.txn != nil {
		// A transactional producer's epoch is the coordinator's: the
		// partition takes the producer's current one, which an abort
		// after a failure bumps (Producer.bumpEpoch).
		pid, err := s.p.producerID(ctx)
		if err != nil {
			return err
		}
		if s.pid.valid && pid == s.pid {
			return errTxnChainBroken
		}
		s.pid = pid
		s.chain++
		s.seq, s.broken, s.confirmed = 0, false, false
		return nil
	}
	switch {
	case !s.pid.valid:
		pid, err := s.p.producerID(ctx)
		if err != nil {
			return err
		}
		s.pid = pid
	case s.pid.epoch == math.MaxInt16:
		pid, err := s.p.freshProducerID(ctx, s.pid.id)
		if err != nil {
			return err
		}
		s.pid = pid
	default:
		s.pid.epoch++
	}
	s.chain++
	s.seq, s.broken, s.confirmed = 0, false, false
	return nil
}

// breakChain notes that batch b of the chain failed for good with its
// sequence numbers spent (see sink.broken).
func (s *sink) breakChain(b *batch) {
	if s.p.cfg.idempotent && b.builtAt == s.chain {
		s.broken, s.brokenOrd = true, max(s.brokenOrd, b.ord)
	}
}

// submit builds b if needed (or rebuilds it under a new producer id),
// finds its leader and queues it for the leader's node. A failure on the
// way is handled as a failed answer would be.
func (s *sink) submit(b *batch) {
	p := s.p
	cfg := &p.cfg
	if !time.Now().Before(b.deadline) {
		s.fail(b, fmt.Errorf("%w: %w", ErrDeliveryTimeout, cmp.Or(b.lastErr, context.DeadlineExceeded)))
		return
	}
	ctx, cancel := context.WithDeadline(p.ctx, b.deadline)
	defer cancel()
	if b.span != nil {
		ctx = trace.ContextWithSpan(ctx, b.span)
	}
	if p.txn != nil {
		if p.txn.isAborting() {
			s.fail(b, ErrTransactionAborted)
			return
		}
		if err := p.ensureAdded(ctx, s.tp); err != nil {
			if ctx.Err() != nil && p.ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", ErrDeliveryTimeout, cmp.Or(b.lastErr, err))
			}
			s.fail(b, err)
			return
		}
		if p.txn.isAborting() {
			// The abort began while the partition was being added.
			s.fail(b, ErrTransactionAborted)
			return
		}
	}

	if cfg.idempotent {
		if b.bytes != nil && (b.builtAt != s.chain || s.broken) {
			if b.maybeLanded && b.builtAt != s.chain {
				// It may be in the log under a chain the partition has
				// left: sending it again could not be recognized, and
				// rebuilding it could write it twice.
				s.fail(b, fmt.Errorf("%w: %w", ErrOutcomeUnknown, cmp.Or(b.lastErr, errChainLeft)))
				return
			}
			if !b.maybeLanded {
				// Not in the log, and its sequence follows a gap (or an
				// old chain): built again on a new chain.
				b.bytes, b.builtAt = nil, noPID
			}
			// Else it may have landed on the broken chain: it goes again
			// as it is, and its answer says whether the chain holds.
		}
		if b.bytes == nil {
			if !s.pid.valid || s.broken || (p.txn != nil && s.pid != p.currentPID()) {
				if s.q.sent > 0 {
					// Batches of the old chain are still out and may mend
					// it or need sending again before this one: it waits
					// for them, then goes alone.
					s.q.answered(b, batchReady)
					return
				}
				if err := s.newChain(ctx); err != nil {
					switch {
					case ctx.Err() != nil && p.ctx.Err() == nil:
						// The batch's delivery deadline passed while the
						// producer id was asked for.
						s.fail(b, fmt.Errorf("%w: %w", ErrDeliveryTimeout, cmp.Or(b.lastErr, err)))
					case ctx.Err() != nil || classify(err) == actFail:
						s.fail(b, err)
					default:
						s.retryLater(b, err)
					}
					return
				}
			}
			opts := recordbatch.BuildOptions{Codec: recordbatch.Codec(cfg.compression), Idempotent: true,
				ProducerID: s.pid.id, ProducerEpoch: s.pid.epoch, BaseSequence: s.seq, Transactional: p.txn != nil}
			bytes, err := recordbatch.Build(opts, b.recs)
			if err != nil {
				s.fail(b, fmt.Errorf("client: build batch: %w", err))
				return
			}
			s.seq = int32((int64(s.seq) + int64(len(b.recs))) % (math.MaxInt32 + 1))
			s.ord++
			b.bytes, b.builtAt, b.ord = bytes, s.chain, s.ord
		}
	} else if b.bytes == nil {
		bytes, err := recordbatch.Build(recordbatch.BuildOptions{Codec: recordbatch.Codec(cfg.compression)}, b.recs)
		if err != nil {
			s.fail(b, fmt.Errorf("client: build batch: %w", err))
			return
		}
		b.bytes = bytes
	}

	info, stor, err := p.cl.leader(ctx, s.tp.topic, s.tp.partition)
	if err != nil {
		if errors.Is(err, ErrUnknownTopic) || (classify(err) == actFail && !errors.Is(err, ErrNoLeader)) {
			s.fail(b, err)
			return
		}
		_ = p.cl.refresh(ctx)
		s.retryLater(b, err)
		return
	}
	if p.cl.throttledFor(info.addr) > 0 {
		s.settle()
	}
	if err := p.cl.waitThrottle(ctx, info.addr); err != nil {
		// The node's throttle (its quota for this principal) outlasts
		// the delivery timeout.
		held := fmt.Errorf("client: produce to %s/%d: held back by the leader's throttle (over the produce quota)", s.tp.topic, s.tp.partition)
		s.fail(b, fmt.Errorf("%w: %w", ErrDeliveryTimeout, cmp.Or(b.lastErr, held)))
		return
	}
	// The batch goes in one of its leader node's next Produce calls, with
	// the other partitions ready for that node (produce_node.go).
	ns := p.nodeSender(info.addr, stor)
	req := &produceReq{tp: s.tp, epoch: info.epoch, records: b.bytes, span: b.span, sink: s, batch: b, from: ns}
	s.q.setSent(b, req)
	ns.submit(req, s.owe)
	s.owe = nil
}

// answered takes the answer of a sent batch, from the node sender from
// (nil when the sink gave up waiting): acked, or a failure to retry (the
// batch becomes ready again) or to report.
func (s *sink) answered(b *batch, ans produceAns, from *nodeSender) {
	if from != nil {
		// The node sender waits for this partition's next batch before
		// its next call; a previous answer's wait ends here.
		s.settle()
		s.owe = from
	}
	if s.q.sent == 1 {
		s.idleSince = time.Now()
	}
	if ans.err == nil {
		s.q.answered(b, batchAcked)
		b.base, b.appendTime = ans.base, ans.appendTime
		if s.p.cfg.idempotent && b.builtAt == s.chain {
			s.confirmed = true
			if s.broken && b.ord > s.brokenOrd {
				// The leader appended a later sequence of the chain, so
				// the failed batches before it are in the log: no gap.
				s.broken = false
			}
		}
		return
	}
	if !unwritten(ans.err, s.p.cfg.acks) {
		b.maybeLanded = true
	}
	s.q.answered(b, batchReady)
	s.failed(b, ans.err)
}

// failed decides what to do about a batch whose request failed with err:
// send it again (ready, after a backoff) or fail it.
func (s *sink) failed(b *batch, err error) {
	p := s.p
	cfg := &p.cfg
	lastErr := fmt.Errorf("client: produce to %s/%d: %w", s.tp.topic, s.tp.partition, err)
	if !time.Now().Before(b.deadline) {
		s.fail(b, fmt.Errorf("%w: %w", ErrDeliveryTimeout, lastErr))
		return
	}
	if ReasonOf(err) == commonv1.Reason_REASON_RECORD_TOO_LARGE && len(b.promises) > 1 && !b.maybeLanded {
		// Only a batch known not to be in the log is split: the halves
		// go on a new chain, where a copy an earlier attempt appended
		// (its answer lost, the topic's limit lowered since) could not
		// be recognized. A batch that may have landed fails below, with
		// ErrOutcomeUnknown (RECORD_TOO_LARGE is actFail).
		s.split(b, lastErr)
		return
	}
	if cfg.idempotent && ReasonOf(err) == commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE {
		// No copy of it is in the log: the leader would have answered a
		// copy it holds as a duplicate (it remembers the producer's last
		// batches, and no more are open at once).
		b.maybeLanded = false
		if b.behind || s.q.earlierOpen(b) || (s.broken && b.builtAt == s.chain) {
			// The leader held it behind an earlier batch that did not
			// come (or was refused): it goes again once the earlier ones
			// are through, or on a new chain. Not a retry of its own: no
			// backoff.
			b.lastErr, b.retryAt = lastErr, time.Time{}
			return
		}
	}
	act := classify(err)
	if act == actFail {
		s.fail(b, lastErr)
		return
	}
	if !cfg.idempotent && !unwritten(err, cfg.acks) {
		// Sending again could duplicate the records (see
		// ErrOutcomeUnknown); only idempotence makes that safe.
		s.fail(b, fmt.Errorf("%w: %w", ErrOutcomeUnknown, lastErr))
		return
	}
	ctx, cancel := context.WithDeadline(p.ctx, b.deadline)
	defer cancel()
	switch act {
	case actNewPID:
		// The leader has no state for the chain's id (expired, or a
		// history it cannot vouch for). This attempt did not land; an
		// earlier one may have, and then only a failure is safe.
		if b.maybeLanded {
			s.fail(b, fmt.Errorf("%w: %w", ErrOutcomeUnknown, lastErr))
			return
		}
		s.breakChain(b)
	case actRefresh:
		if !p.cl.applyHint(err) {
			_ = p.cl.refresh(ctx)
		}
		if p.cl.isMissing(s.tp.topic) {
			s.fail(b, &UnknownTopicError{Topic: s.tp.topic})
			return
		}
	}
	s.retryLater(b, lastErr)
}

// retryLater makes b ready to go again after its next backoff, or fails
// it when its retries or its delivery timeout are used up.
func (s *sink) retryLater(b *batch, lastErr error) {
	cfg := &s.p.cfg
	s.q.answered(b, batchReady)
	b.lastErr = lastErr
	b.attempts++
	if b.attempts > cfg.maxRetries {
		s.fail(b, lastErr)
		return
	}
	if b.bo == nil {
		b.bo = newBackoff(cfg)
	}
	d := b.bo.NextBackOff()
	if time.Now().Add(d).After(b.deadline) {
		s.fail(b, fmt.Errorf("%w: %w", ErrDeliveryTimeout, lastErr))
		return
	}
	cfg.retried(retryEvent(scoped(s.tp, lastErr), int(b.attempts), d))
	b.retryAt = time.Now().Add(d)
}

// split replaces b, which the leader refused as too large, with its two
// halves, to be sent in its place (Kafka's RecordAccumulator
// splitAndReenqueue, KIP-126), and remembers the size for the topic's
// next batches. Nothing of b is in the log (no attempt of it may have
// landed, see failed); with idempotence its sequence numbers are spent,
// so the halves go on a new chain.
func (s *sink) split(b *batch, lastErr error) {
	var size int64
	for _, pr := range b.promises {
		size += int64(pr.size)
	}
	s.p.learnLimit(s.tp.topic, size/2)
	s.breakChain(b)
	h := len(b.promises) / 2
	first, second := s.batchOf(b.promises[:h], b.recs[:h]), s.batchOf(b.promises[h:], b.recs[h:])
	first.lastErr, second.lastErr = lastErr, lastErr
	s.q.replace(b, first, second)
}

// fail fails a batch for good; its callbacks run once the batches before
// it are resolved. A batch that may have landed fails with
// ErrOutcomeUnknown. With idempotence its sequence numbers are spent,
// so the partition's chain may have a gap (breakChain).
func (s *sink) fail(b *batch, err error) {
	s.breakChain(b)
	if b.maybeLanded && !errors.Is(err, ErrOutcomeUnknown) {
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	s.q.answered(b, batchFailed)
	b.err = err
}

// complete runs the callbacks of the resolved batches at the front of
// the queue, in order.
func (s *sink) complete() {
	for _, b := range s.q.resolved() {
		if b.state == batchAcked {
			s.succeed(b.promises, b.base, b.appendTime)
			continue
		}
		for _, pr := range b.promises {
			s.p.finish(pr, b.err)
		}
	}
}

func (s *sink) succeed(batch []*promise, base, appendTime int64) {
	for i, pr := range batch {
		pr.r.Partition = s.tp.partition
		if base >= 0 {
			pr.r.Offset = base + int64(i)
		} else {
			pr.r.Offset = -1
		}
		if ms := appendTime; ms > 0 {
			pr.r.Timestamp = time.UnixMilli(ms)
		}
		s.p.finish(pr, nil)
	}
}

// errChainLeft is the error of a batch that may have landed under a
// sequence chain its partition has left, when it had no other.
var errChainLeft = errors.New("client: the partition's producer epoch changed after the batch was sent")

func acksProto(a Acks) commonv1.Acks {
	switch a {
	case AcksLeader:
		return commonv1.Acks_ACKS_LEADER
	case AcksNone:
		return commonv1.Acks_ACKS_NONE
	}
	return commonv1.Acks_ACKS_ALL
}
