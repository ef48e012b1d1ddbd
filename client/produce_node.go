package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// One Produce per leader node.
//
// A partition's sink builds its batch and hands it to the sender of its
// leader's node (nodeSender), which keeps up to MaxInFlight Produce calls
// in flight to the node: the batches queued while they are out leave
// together in the next (ProducePartitions; Produce for a single one, and
// one Produce per partition to a node of a version without
// ProducePartitions), each partition with its own answer. A call carries
// at most one batch per partition (a node refuses a call naming one
// twice): a partition's second queued batch waits for the next call. The
// calls of one node are served concurrently, so a later batch of a
// partition may reach the leader before an earlier one; the leader holds
// it until the gap fills (produce_inflight.go says how the producer keeps
// order and recovers from failures). Without idempotence one call is in
// flight per node and one batch per partition, so order needs nothing
// from the leader. (Kafka's producer also drains every ready partition of
// a node into one request, up to max.in.flight.requests.per.connection
// requests at once. A call answers when its slowest partition does, so
// partitions of one node share their round trips.)
//
// Coalescing: the partitions of one call are answered together, and most
// come straight back with their next batch. So after delivering a call's
// answers the sender waits, before its next call, until each of those
// partitions has either handed it a batch or settled elsewhere (gone idle,
// lingering, at its in-flight limit, backing off, moved to another
// leader), or coalesceWait has passed. Without the wait the first
// partition back would leave alone and the others would follow in calls
// of their own. And while calls to the node are out, the next one waits
// until its oldest batch has been queued for Linger: partitions whose
// batches become ready at different moments then still share a call.
// Without it pipelining makes each partition's batch a call of its own
// (at 12 partitions over 3 nodes, 3.5 times the calls per record of one
// call in flight per node; with it, 1.5 times), and the node's cost per
// call is paid that many more times.

// coalesceWait bounds how long a node's sender holds queued batches for
// partitions of its last answer that have not come back yet: the shorter
// of this and Linger.
const coalesceWait = time.Millisecond

// produceReq is one partition's batch queued for its leader's node.
type produceReq struct {
	tp        topicPartition
	epoch     int32
	records   []byte
	span      trace.Span  // the batch's trace (withBatchTrace), or nil
	abandoned atomic.Bool // the sink gave up waiting: send it no more

	callMu     sync.Mutex
	cancelCall context.CancelFunc // cancels the call carrying it, once sent

	sink  *sink       // where the answer goes (sink.deliver)
	batch *batch      // the sink's batch this request carries
	from  *nodeSender // the sender it went through, owed the partition's next batch
	ans   produceAns  // set by the sender before deliver

	queuedAt time.Time // when the sink queued it (nodeSender.submit)
}

// errCallCanceled answers the batches of a call canceled because another
// batch in it reached its delivery timeout (produceReq.abandon): they may
// have landed, and go again with the same bytes.
var errCallCanceled = &Error{Code: connect.CodeUnavailable,
	Message: "produce call canceled: another batch in it reached its delivery timeout"}

// sentIn notes the cancel func of the call that carries the request; a
// request abandoned meanwhile cancels it at once.
func (r *produceReq) sentIn(cancel context.CancelFunc) {
	r.callMu.Lock()
	r.cancelCall = cancel
	r.callMu.Unlock()
	if r.abandoned.Load() {
		cancel()
	}
}

// abandon marks the request given up (no answer is wanted, and it is not
// sent if it has not left) and cancels its call if it has, so that a copy
// of it held somewhere on the way does not reach the leader later.
// (Kafka's producer leaves an expired batch's request to its request
// timeout; here the call is canceled, and the partition's next sequence
// chain fences any copy still on its way: see sink.newChain.)
func (r *produceReq) abandon() {
	r.abandoned.Store(true)
	r.callMu.Lock()
	cancel := r.cancelCall
	r.callMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// produceAns is a partition's answer: its result, or why it failed (the
// partition's error or the whole call's).
type produceAns struct {
	base, appendTime int64
	err              error
}

// nodeSender sends the Produce calls of one storage node.
type nodeSender struct {
	p    *Producer
	addr string
	stor storagev1connect.StorageServiceClient
	wake chan struct{}

	mu     sync.Mutex
	queue  []*produceReq // oldest first; a partition may have several
	calls  int           // calls in flight (at most MaxInFlight)
	owed   int           // partitions answered that have not come back or settled
	owedAt time.Time     // when owed last rose from 0

	legacy atomic.Bool // the node has no ProducePartitions: a Produce per partition
}

// nodeSender returns the sender of a node, starting it on first use.
func (p *Producer) nodeSender(addr string, stor storagev1connect.StorageServiceClient) *nodeSender {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.senders[addr]
	if ns == nil {
		ns = &nodeSender{p: p, addr: addr, stor: stor, wake: make(chan struct{}, 1)}
		p.senders[addr] = ns
		p.wg.Add(1)
		go ns.run()
	}
	return ns
}

func (ns *nodeSender) wakeup() {
	select {
	case ns.wake <- struct{}{}:
	default:
	}
}

// submit queues a batch; from is the sender the partition last had an
// answer from and still owes a return to (or nil), which this settles.
func (ns *nodeSender) submit(req *produceReq, from *nodeSender) {
	if from != nil && from != ns {
		from.settle()
	}
	req.queuedAt = time.Now()
	ns.mu.Lock()
	ns.queue = append(ns.queue, req)
	if from == ns && ns.owed > 0 {
		ns.owed--
	}
	ns.mu.Unlock()
	ns.wakeup()
}

// settle tells the sender that a partition of its last answer will not
// come back with a batch right away.
func (ns *nodeSender) settle() {
	ns.mu.Lock()
	if ns.owed > 0 {
		ns.owed--
	}
	n := ns.owed
	ns.mu.Unlock()
	if n == 0 {
		ns.wakeup()
	}
}

func (ns *nodeSender) run() {
	defer ns.p.wg.Done()
	wait := min(coalesceWait, ns.p.cfg.linger)
	maxCalls := int(ns.p.cfg.maxInFlight)
	var timer *time.Timer
	for {
		ns.mu.Lock()
		var hold time.Duration
		if ns.owed > 0 {
			hold = wait - time.Since(ns.owedAt)
		}
		if ns.calls > 0 && len(ns.queue) > 0 {
			hold = max(hold, ns.p.cfg.linger-time.Since(ns.queue[0].queuedAt))
		}
		var reqs []*produceReq
		if len(ns.queue) > 0 && hold <= 0 && ns.calls < maxCalls {
			reqs = ns.takeLocked()
			ns.owed = 0
			ns.calls++
		}
		ready := len(ns.queue) > 0 && ns.calls < maxCalls
		ns.mu.Unlock()
		if reqs != nil {
			ns.p.wg.Add(1)
			go func() {
				defer ns.p.wg.Done()
				ns.send(reqs)
				ns.mu.Lock()
				ns.calls--
				ns.mu.Unlock()
				ns.wakeup()
			}()
			continue
		}
		var tc <-chan time.Time
		if ready && hold > 0 {
			if timer == nil {
				timer = time.NewTimer(hold)
			} else {
				timer.Reset(hold)
			}
			tc = timer.C
		}
		select {
		case <-ns.wake:
		case <-tc:
		case <-ns.p.ctx.Done():
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// takeLocked removes the next call's batches from the queue: the oldest
// of each partition. A partition's later batches keep their order for
// the calls after.
func (ns *nodeSender) takeLocked() []*produceReq {
	if len(ns.queue) == 1 {
		reqs := ns.queue
		ns.queue = nil
		return reqs
	}
	seen := make(map[topicPartition]bool, len(ns.queue))
	var reqs, later []*produceReq
	for _, r := range ns.queue {
		if seen[r.tp] {
			later = append(later, r)
			continue
		}
		seen[r.tp] = true
		reqs = append(reqs, r)
	}
	ns.queue = later
	return reqs
}

// send makes one Produce for reqs (those still wanted) and returns once
// it is answered; it runs on a goroutine of its own, one per call in
// flight.
func (ns *nodeSender) send(reqs []*produceReq) {
	live := reqs[:0]
	for _, r := range reqs {
		if !r.abandoned.Load() {
			live = append(live, r)
		}
	}
	if len(live) > 0 {
		ns.call(live)
	}
}

// call sends one ProducePartitions (a Produce for a single partition) and
// hands out its answers.
func (ns *nodeSender) call(reqs []*produceReq) {
	p := ns.p
	cfg := &p.cfg
	ctx, cancel := context.WithTimeout(p.ctx, cfg.requestTimeout+5*time.Second)
	defer cancel()
	for _, r := range reqs {
		r.sentIn(cancel)
	}
	for _, r := range reqs {
		if r.span != nil {
			ctx = trace.ContextWithSpan(ctx, r.span)
			break
		}
	}
	var ans []produceAns
	if len(reqs) > 1 && !ns.legacy.Load() {
		var unimplemented bool
		ans, unimplemented = ns.callMany(ctx, reqs)
		if unimplemented {
			// A node of a version before ProducePartitions: one Produce
			// per partition from now on.
			ns.legacy.Store(true)
			ans = nil
		}
	}
	if ans == nil {
		ans = ns.callEach(ctx, reqs)
	}
	if ctx.Err() == context.Canceled && p.ctx.Err() == nil {
		// Canceled by an abandoned batch: the others in the call are
		// retried (Canceled alone would fail them as our own cancellation).
		for i := range ans {
			if ans[i].err != nil {
				ans[i].err = errCallCanceled
			}
		}
	}
	// The partitions answered are owed back before the next call (see
	// above), unless their sinks gave up waiting.
	ns.mu.Lock()
	waiting := 0
	for _, r := range reqs {
		if !r.abandoned.Load() {
			waiting++
		}
	}
	if ns.owed == 0 {
		ns.owedAt = time.Now()
	}
	ns.owed += waiting
	ns.mu.Unlock()
	for i, r := range reqs {
		r.ans = ans[i]
		r.sink.deliver(r)
	}
}

// callMany sends one ProducePartitions; unimplemented reports a node that
// does not serve it.
func (ns *nodeSender) callMany(ctx context.Context, reqs []*produceReq) (ans []produceAns, unimplemented bool) {
	cfg := &ns.p.cfg
	msg := &storagev1.ProducePartitionsRequest{
		Acks:            acksProto(cfg.acks),
		TimeoutMs:       int32(cfg.requestTimeout / time.Millisecond),
		Partitions:      make([]*storagev1.ProducePartition, len(reqs)),
		TransactionalId: cfg.transactionalID,
	}
	for i, r := range reqs {
		msg.Partitions[i] = &storagev1.ProducePartition{Topic: r.tp.topic, Partition: r.tp.partition, LeaderEpoch: r.epoch, Records: r.records}
	}
	ans = make([]produceAns, len(reqs))
	resp, err := ns.stor.ProducePartitions(ctx, connect.NewRequest(msg))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			return nil, true
		}
		err = fromConnect(err)
		for i := range ans {
			ans[i].err = err
		}
		return ans, false
	}
	ns.p.cl.throttle(ns.addr, resp.Msg.GetThrottleTimeMs())
	results := resp.Msg.GetPartitions()
	for i, r := range reqs {
		if i >= len(results) || results[i].GetTopic() != r.tp.topic || results[i].GetPartition() != r.tp.partition {
			ans[i].err = &Error{Code: connect.CodeInternal, Message: "produce answer does not match the request"}
			continue
		}
		res := results[i]
		ans[i] = produceAns{base: res.GetBaseOffset(), appendTime: res.GetLogAppendTimeMs(), err: fromDetail(res.GetError())}
	}
	return ans, false
}

// callEach sends one Produce per partition, all at once.
func (ns *nodeSender) callEach(ctx context.Context, reqs []*produceReq) []produceAns {
	cfg := &ns.p.cfg
	ans := make([]produceAns, len(reqs))
	one := func(i int) {
		r := reqs[i]
		ctx := ctx
		if r.span != nil {
			ctx = trace.ContextWithSpan(ctx, r.span)
		}
		resp, err := ns.stor.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
			Topic:       r.tp.topic,
			Partition:   r.tp.partition,
			Acks:        acksProto(cfg.acks),
			TimeoutMs:   int32(cfg.requestTimeout / time.Millisecond),
			LeaderEpoch: r.epoch,
			Records:     r.records,
			// The leader checks a transaction's first batch to each
			// partition with the id's coordinator (KIP-890 part 1).
			TransactionalId: cfg.transactionalID,
		}))
		if err != nil {
			ans[i].err = fromConnect(err)
			return
		}
		ns.p.cl.throttle(ns.addr, resp.Msg.GetThrottleTimeMs())
		ans[i] = produceAns{base: resp.Msg.GetBaseOffset(), appendTime: resp.Msg.GetLogAppendTimeMs()}
	}
	var wg sync.WaitGroup
	for i := 1; i < len(reqs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(i)
		}()
	}
	one(0)
	wg.Wait()
	return ans
}
