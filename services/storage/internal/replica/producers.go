package replica

import (
	"fmt"
	"math"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// producerWindow is how many recent batches per producer are remembered for
// duplicate detection, as in Kafka (max.in.flight.requests.per.connection
// is at most 5 with idempotence).
const producerWindow = 5

// batchEntry is one remembered batch of an idempotent producer.
type batchEntry struct {
	firstSeq, lastSeq       int32 // sequence numbers of its first and last record
	firstOffset, lastOffset int64 // offsets it got
}

// producerEntry is the state of one producer id on one partition.
type producerEntry struct {
	epoch   int16        // latest producer epoch seen
	batches []batchEntry // last producerWindow batches, oldest first
}

// producers is the idempotence state of one partition, rebuilt from the
// log on open and after truncation. Not safe for concurrent use: the
// replica's append lock guards it.
type producers struct {
	m map[int64]*producerEntry
}

func newProducers() *producers { return &producers{m: make(map[int64]*producerEntry)} }

// lastSeq returns the sequence of the last record of a batch, wrapping at
// MaxInt32 as Kafka does.
func lastSeq(h recordbatch.Header) int32 {
	s := int64(h.BaseSequence) + int64(h.LastOffsetDelta)
	if s > math.MaxInt32 {
		s -= math.MaxInt32 + 1
	}
	return int32(s)
}

// check classifies a batch before its append: a duplicate of a remembered
// batch (dup set), acceptable (nil), or an idempotence violation.
func (p *producers) check(h recordbatch.Header) (dup *batchEntry, err error) {
	if h.ProducerID < 0 {
		return nil, nil
	}
	e := p.m[h.ProducerID]
	if e == nil {
		// Unknown producer (new, or its state expired with retention): any
		// sequence is accepted, as in Kafka.
		return nil, nil
	}
	last := lastSeq(h)
	switch {
	case h.ProducerEpoch < e.epoch:
		return nil, fmt.Errorf("%w: producer %d epoch %d, partition has seen %d", ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, e.epoch)
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, got %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	for i := range e.batches {
		b := &e.batches[i]
		if b.firstSeq == h.BaseSequence && b.lastSeq == last {
			d := *b
			return &d, nil
		}
	}
	if n := len(e.batches); n > 0 {
		want := e.batches[n-1].lastSeq + 1
		if e.batches[n-1].lastSeq == math.MaxInt32 {
			want = 0
		}
		if h.BaseSequence != want {
			return nil, fmt.Errorf("%w: producer %d expected sequence %d, got %d", ErrOutOfOrderSequence, h.ProducerID, want, h.BaseSequence)
		}
	}
	return nil, nil
}

// record remembers an appended batch (h carries its stamped base offset).
func (p *producers) record(h recordbatch.Header) {
	if h.ProducerID < 0 || h.Control() {
		return
	}
	e := p.m[h.ProducerID]
	if e == nil || h.ProducerEpoch > e.epoch {
		e = &producerEntry{epoch: h.ProducerEpoch}
		p.m[h.ProducerID] = e
	}
	if h.ProducerEpoch < e.epoch {
		return
	}
	e.batches = append(e.batches, batchEntry{
		firstSeq: h.BaseSequence, lastSeq: lastSeq(h),
		firstOffset: h.BaseOffset, lastOffset: h.LastOffset(),
	})
	if len(e.batches) > producerWindow {
		e.batches = append(e.batches[:0], e.batches[len(e.batches)-producerWindow:]...)
	}
}

// recordAll remembers every batch in b (whole stamped batches).
func (p *producers) recordAll(b []byte) {
	it := recordbatch.NewIter(b, false)
	for {
		h, _, ok := it.Next()
		if !ok {
			return
		}
		p.record(h)
	}
}
