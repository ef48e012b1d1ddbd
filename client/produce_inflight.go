package client

import (
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Pipelined produce: a partition's batches from build to callback.
//
// With idempotence a partition keeps up to MaxInFlight batches sent and
// not yet answered (Kafka's max.in.flight.requests.per.connection), so its
// next batch leaves while the leader is still replicating the last one.
// Sequence numbers are assigned in order when a batch is built; the
// leader holds a batch that arrives ahead of its sequence (a later call
// overtook an earlier one) until the gap fills, and refuses it with
// OUT_OF_ORDER_SEQUENCE when the gap stays.
//
// Each batch goes through these states (batchState), oldest first in the
// partition's inflight queue:
//
//	           submit            ok answer
//	  (built) --------> sent ---------------> acked ----+
//	     ^               |                              | callbacks, in
//	     |   retriable   |   fatal, delivery timeout    | queue order
//	   ready <-----------+------------------> failed ---+
//
// The sink (producer.go) pipelines while no batch is ready: it builds and
// submits the next buffered batch while fewer than the limit are sent. A
// retriable failure makes a batch ready again, and the partition recovers
// in order: nothing new is submitted while a batch is ready; the ready
// batches wait until every sent batch has answered, then go again one at
// a time, oldest first, each after its backoff; when none is ready the
// sink pipelines again. An OUT_OF_ORDER_SEQUENCE answer is retriable when
// an earlier batch of the partition was unresolved when this one was sent
// or is still unresolved (the leader held it behind a gap that did not
// fill), or when the partition's sequence chain is broken (the batch is
// rebuilt on the next chain); on the oldest batch, sent alone, it is
// fatal.
//
// A batch that may have landed (maybeLanded) is only ever sent again as
// it is; the sink (producer.go: newChain, breakChain) never rebuilds it
// under another epoch, and fails it with ErrOutcomeUnknown when it cannot
// be resolved.
//
// The first batch of a producer id on a partition goes alone (the limit
// is 1 until one is acknowledged): a leader that has no state for the
// producer accepts any sequence, so a second batch overtaking the first
// would be appended before it. So does the first batch after idleAlone
// with nothing in flight, since the leader may have expired the state.
//
// Answers come in any order; callbacks run in queue order (resolved): a
// batch acknowledged before an earlier one waits for it.

// idleAlone is how long a partition may sit with nothing in flight before
// its next batch goes alone again.
const idleAlone = time.Hour

// batchState is where a batch is in its partition's pipeline.
type batchState int8

const (
	batchReady  batchState = iota // to send: new, or again after a retriable failure
	batchSent                     // in a request not answered yet
	batchAcked                    // acknowledged; its callbacks wait for earlier batches
	batchFailed                   // failed for good; its callbacks wait for earlier batches
)

// noPID is builtAt for a batch built without idempotence, or not built.
const noPID = ^uint64(0)

// batch is one batch of a partition from the moment its records leave
// the buffer until its callbacks have run. Owned by the sink's goroutine.
type batch struct {
	promises []*promise
	recs     []recordbatch.Record
	deadline time.Time  // the first record's delivery timeout
	span     trace.Span // the batch's trace (withBatchTrace), or nil

	bytes   []byte // the built batch; nil until built
	builtAt uint64 // the sequence chain (sink.chain) of bytes, or noPID
	ord     uint64 // its place among the partition's built batches (sink.ord)
	// maybeLanded: an attempt was sent and its answer did not say it was
	// refused, so the records may be in the log under bytes' producer id
	// and sequence. Such a batch is only ever sent again as it is (the
	// leader recognizes it); it is never rebuilt under another id, epoch
	// or sequence, which would write it twice.
	maybeLanded bool

	state   batchState
	req     *produceReq // the request it is in, while sent
	behind  bool        // an earlier batch was unresolved when it was sent
	retryAt time.Time   // when ready after a failure: not before this

	attempts int64                       // retriable failures so far
	bo       *backoff.ExponentialBackOff // the growing wait between them; nil before the first
	lastErr  error                       // the last failure, for the final error

	base, appendTime int64 // the answer, once acked
	err              error // why it failed, once failed
}

// inflight is a partition's batches that are built and whose callbacks
// have not run, oldest first. Not safe for concurrent use: the sink's
// goroutine owns it.
type inflight struct {
	batches []*batch
	sent    int // batches in state batchSent
}

// push appends a new batch (state ready) at the end.
func (q *inflight) push(b *batch) {
	b.state = batchReady
	q.batches = append(q.batches, b)
}

// setSent marks b sent in req, noting whether an earlier batch is
// unresolved (so the leader may hold b behind it).
func (q *inflight) setSent(b *batch, req *produceReq) {
	b.behind = q.earlierOpen(b)
	b.state, b.req = batchSent, req
	q.sent++
}

// answered moves a sent batch to state st (acked, failed or ready).
func (q *inflight) answered(b *batch, st batchState) {
	if b.state == batchSent {
		q.sent--
		b.req = nil
	}
	b.state = st
}

// replace puts halves in the place of b, a batch not sent (a batch split
// in two after the leader refused it as too large).
func (q *inflight) replace(b *batch, halves ...*batch) {
	i := slices.Index(q.batches, b)
	for _, h := range halves {
		h.state = batchReady
	}
	q.batches = slices.Replace(q.batches, i, i+1, halves...)
}

// earlierOpen reports whether a batch before b is not acknowledged yet:
// sent, ready or failed.
func (q *inflight) earlierOpen(b *batch) bool {
	for _, e := range q.batches {
		if e == b {
			return false
		}
		if e.state != batchAcked {
			return true
		}
	}
	return false
}

// nextReady returns the oldest batch waiting to be sent, or nil. While
// there is one the partition is recovering: it goes when nothing is sent.
func (q *inflight) nextReady() *batch {
	for _, b := range q.batches {
		if b.state == batchReady {
			return b
		}
	}
	return nil
}

// resolved removes and returns the acked and failed batches at the front:
// those whose callbacks may run now, in order.
func (q *inflight) resolved() []*batch {
	n := 0
	for n < len(q.batches) && (q.batches[n].state == batchAcked || q.batches[n].state == batchFailed) {
		n++
	}
	if n == 0 {
		return nil
	}
	done := append([]*batch(nil), q.batches[:n]...)
	clear(q.batches[:n])
	q.batches = q.batches[n:]
	return done
}

// earliestDeadline returns the soonest delivery deadline of the sent
// batches, or the zero time when none is sent.
func (q *inflight) earliestDeadline() time.Time {
	var t time.Time
	for _, b := range q.batches {
		if b.state == batchSent && (t.IsZero() || b.deadline.Before(t)) {
			t = b.deadline
		}
	}
	return t
}
