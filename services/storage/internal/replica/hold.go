package replica

import (
	"errors"
	"fmt"
	"sync"
)

// Bounds of what a leader holds for batches that arrive ahead of their
// producer's sequence (holdAhead). A held request keeps its batch bytes in
// memory and a goroutine waiting, so without a bound one producer sending
// far ahead, or many producers at once, could pin a node's memory for the
// hold's second each. Past a bound the request is refused at once with
// ErrOutOfOrderSequence (errHoldFull), as after a hold that ends in vain:
// the producer sends its batches again in order, so a refusal costs a
// round trip, never a record.
//
// A lone request is always held (no other request of its producer, or of
// the partition, is held), so a batch bigger than a byte bound still waits
// for its predecessors rather than being refused every time.
const (
	// maxHeldPerProducer is Kafka's max.in.flight.requests.per.connection
	// (5): a producer pipelining within it has at most four batches of a
	// partition ahead of the first unanswered one.
	maxHeldPerProducer = 5
	// heldBytesPerProducerBatches: a producer's held requests carry at
	// most this many of the partition's largest batches
	// (max.message.bytes plus framing), so a producer pipelining full
	// batches is never refused.
	heldBytesPerProducerBatches = 5
	// maxHeldPerPartition bounds the requests held for one partition,
	// whichever producers they come from: 25 producers pipelining at the
	// full depth.
	maxHeldPerPartition = 128
	// maxHeldBytesPerPartition bounds their bytes.
	maxHeldBytesPerPartition = 64 << 20
)

// holdLimits are the bounds one replica applies; the constants above, set
// lower by tests.
type holdLimits struct {
	perProducer        int   // requests held per producer
	perProducerBatches int   // their bytes, in the partition's largest batches
	perPartition       int   // requests held for the partition
	perPartitionBytes  int64 // their bytes
}

var defaultHoldLimits = holdLimits{
	perProducer:        maxHeldPerProducer,
	perProducerBatches: heldBytesPerProducerBatches,
	perPartition:       maxHeldPerPartition,
	perPartitionBytes:  maxHeldBytesPerPartition,
}

// errHoldFull: a batch ahead of its sequence found the partition's or its
// producer's hold full and was refused at once. An ErrOutOfOrderSequence
// to clients, who send it again in order; the server counts it
// (strata_storage_produce_hold_refused_total).
var errHoldFull = fmt.Errorf("%w: the leader holds as many batches ahead of their sequence as it may", ErrOutOfOrderSequence)

// IsHoldFull reports whether a Produce error is a refusal because the hold
// was full (errHoldFull), for the server's counter.
func IsHoldFull(err error) bool { return errors.Is(err, errHoldFull) }

// heldCount is what is held for one producer or one partition.
type heldCount struct {
	requests int
	bytes    int64
}

// holds tracks the requests a replica holds in holdAhead, per producer and
// in all. Safe for concurrent use.
type holds struct {
	limits holdLimits // fixed at Open

	mu         sync.Mutex
	all        heldCount
	byProducer map[int64]*heldCount
}

// acquire takes room for one held request of producer pid carrying n
// bytes, within the bounds (maxBatch is the partition's batch limit). It
// reports false, taking nothing, when the request must be refused. Each
// acquire that reports true is paired with one release.
func (h *holds) acquire(pid int64, n int64, maxBatch int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.byProducer[pid]
	if p == nil {
		p = &heldCount{}
	}
	l := h.limits
	if !fits(h.all, n, l.perPartition, l.perPartitionBytes) ||
		!fits(*p, n, l.perProducer, int64(l.perProducerBatches)*int64(maxBatch)) {
		return false
	}
	if h.byProducer == nil {
		h.byProducer = make(map[int64]*heldCount)
	}
	h.byProducer[pid] = p
	p.requests++
	p.bytes += n
	h.all.requests++
	h.all.bytes += n
	return true
}

// fits reports whether one more request of n bytes stays within a bound;
// a lone request always fits.
func fits(c heldCount, n int64, maxRequests int, maxBytes int64) bool {
	if c.requests == 0 {
		return true
	}
	return c.requests < maxRequests && c.bytes+n <= maxBytes
}

// release gives back what acquire took.
func (h *holds) release(pid int64, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all.requests--
	h.all.bytes -= n
	if p := h.byProducer[pid]; p != nil {
		p.requests--
		p.bytes -= n
		if p.requests == 0 {
			delete(h.byProducer, pid)
		}
	}
}

// requests is the number of requests held now.
func (h *holds) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all.requests
}
