package replica

import (
	"fmt"
	"math"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// validateRequest runs the checks of the produce path on every batch of a
// request before anything is appended (recordbatch.ValidateProduced: the
// batch decodes and follows the producer rules) and returns their headers.
// rules are the topic's checks of every record (recordbatch.TopicRules).
// It also refuses a request with more than partlog.ProducerWindow batches
// of one producer: a retry of it could not be recognised whole, since the
// log remembers that many batches per producer. A batch larger than
// maxBatch (max.message.bytes) is refused before it is read, with
// partlog.ErrBatchTooLarge. Other errors wrap partlog.ErrInvalidBatch
// (INVALID_ARGUMENT, CORRUPT_RECORD or INVALID_RECORD at the edge), and
// recordbatch.ErrTooLarge too for a batch that inflates past the cap.
func validateRequest(b []byte, maxBatch int, rules recordbatch.TopicRules) ([]recordbatch.Header, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: no batches", partlog.ErrInvalidBatch)
	}
	var hdrs []recordbatch.Header
	var perProducer map[int64]int
	for at := 0; at < len(b); {
		size, err := recordbatch.PeekSize(b[at:])
		if err == nil && size > len(b)-at {
			err = fmt.Errorf("%w: have %d bytes of a %d-byte batch", recordbatch.ErrShortBatch, len(b)-at, size)
		}
		if err == nil && size > maxBatch {
			return nil, fmt.Errorf("%w: batch %d is %d bytes, limit %d", partlog.ErrBatchTooLarge, len(hdrs), size, maxBatch)
		}
		var h recordbatch.Header
		if err == nil {
			h, err = recordbatch.ValidateProducedFor(b[at:at+size], rules)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: batch %d at byte %d: %w", partlog.ErrInvalidBatch, len(hdrs), at, err)
		}
		if h.ProducerID >= 0 {
			if perProducer == nil {
				perProducer = make(map[int64]int)
			}
			if perProducer[h.ProducerID]++; perProducer[h.ProducerID] > partlog.ProducerWindow {
				return nil, fmt.Errorf("%w: more than %d batches of producer %d in one request",
					partlog.ErrInvalidBatch, partlog.ProducerWindow, h.ProducerID)
			}
		}
		hdrs = append(hdrs, h)
		at += size
	}
	return hdrs, nil
}

// duplicate is the answer to a request whose batches were all appended
// before: the offsets they got then.
type duplicate struct {
	firstOffset, lastOffset int64
}

// producerView is a producer's state while the batches of one request are
// checked: what the log remembers, advanced by the request's new batches.
type producerView struct {
	known      bool                    // the log or an earlier batch of the request knows it
	epoch      int16                   // latest producer epoch
	remembered []partlog.ProducerBatch // the log's batches of epoch (duplicates are looked up here)
	inRequest  []partlog.ProducerBatch // new batches of this request so far (offsets unset)
	lastSeq    int32                   // last sequence taken; valid when hasLast
	hasLast    bool
}

// checkProducers applies the idempotence rules, in order, to every batch
// of a request, each against the log's producer state as the batches
// before it in the request would leave it (so sequences must also follow
// from one batch to the next within the request):
//
//   - an older producer epoch than the one known → ErrInvalidProducerEpoch;
//   - a newer epoch must start at sequence 0 → else ErrOutOfOrderSequence;
//   - a batch with the first and last sequence of a remembered batch is a
//     duplicate;
//   - otherwise the sequence must follow the last one taken (wrapping at
//     2^31-1) → else ErrOutOfOrderSequence; a batch repeated within the
//     request is out of order too; a producer's first batch in the request
//     that is ahead of the log's last sequence gets errSequenceAhead (also
//     an ErrOutOfOrderSequence), which Produce may wait out;
//   - an unknown producer (new, or expired) is accepted at any sequence,
//     unless the log's producer state may lack producers below its log
//     start (partlog's ProducersComplete): then only at sequence 0, since
//     any other may be a retry of a batch the log holds
//     (ErrUnknownProducer).
//
// A request answers with one base offset, so it is either all new
// (appended; dup nil) or all duplicates of batches that lie back to back
// in the log (dup set: answered with their original offsets, nothing
// appended). A mix, or duplicates that are not contiguous, can only come
// from a client that regroups batches between retries; it is refused as a
// whole (ErrDuplicateInRequest), nothing appended, so that nothing is
// written twice and no record is answered with an offset it does not have.
//
// The caller holds the replica's append lock, so the log's state cannot
// change between this check and the append.
func checkProducers(l *partlog.Log, hdrs []recordbatch.Header) (*duplicate, error) {
	var views map[int64]*producerView
	// complete is asked at most once, and only for an unknown producer.
	knownComplete := 0 // 0 not asked, 1 complete, 2 not
	complete := func() bool {
		if knownComplete == 0 {
			knownComplete = 2
			if l.ProducersComplete() {
				knownComplete = 1
			}
		}
		return knownComplete == 1
	}
	var dups []partlog.ProducerBatch
	fresh := 0 // batches to append
	for i, h := range hdrs {
		if h.ProducerID < 0 {
			fresh++
			continue
		}
		if views == nil {
			views = make(map[int64]*producerView)
		}
		v := views[h.ProducerID]
		if v == nil {
			v = &producerView{}
			if st, ok := l.Producer(h.ProducerID); ok {
				v.known, v.epoch, v.remembered = true, st.Epoch, st.Batches
				if n := len(st.Batches); n > 0 {
					v.lastSeq, v.hasLast = st.Batches[n-1].LastSeq, true
				}
			}
			views[h.ProducerID] = v
		}
		batch := partlog.ProducerBatch{FirstSeq: h.BaseSequence, LastSeq: h.LastSequence()}
		switch {
		case !v.known && h.BaseSequence != 0 && !complete():
			return nil, fmt.Errorf("%w: batch %d: producer %d at sequence %d; its earlier batches may be in the log already, so a new producer session must start it",
				ErrUnknownProducer, i, h.ProducerID, h.BaseSequence)
		case !v.known:
			// Unknown producer (new, or its state expired): any sequence
			// is accepted, as in Kafka.
		case h.ProducerEpoch < v.epoch:
			return nil, fmt.Errorf("%w: batch %d: producer %d epoch %d, partition has seen %d",
				ErrInvalidProducerEpoch, i, h.ProducerID, h.ProducerEpoch, v.epoch)
		case h.ProducerEpoch > v.epoch:
			if h.BaseSequence != 0 {
				return nil, fmt.Errorf("%w: batch %d: producer %d new epoch %d must start at sequence 0, got %d",
					ErrOutOfOrderSequence, i, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
			}
			v.remembered, v.inRequest, v.hasLast = nil, nil, false
		default:
			if sameSeqs(v.inRequest, batch) >= 0 {
				return nil, fmt.Errorf("%w: batch %d: producer %d sequences %d-%d repeat a batch of the same request",
					ErrOutOfOrderSequence, i, h.ProducerID, batch.FirstSeq, batch.LastSeq)
			}
			if j := sameSeqs(v.remembered, batch); j >= 0 {
				dups = append(dups, v.remembered[j])
				continue
			}
			if want := nextSeq(v.lastSeq); v.hasLast && h.BaseSequence != want {
				if len(v.inRequest) == 0 && seqAhead(h.BaseSequence, want) {
					// Only against the log: a gap inside one request
					// can never fill.
					return nil, &aheadError{producerID: h.ProducerID, err: fmt.Errorf("%w: batch %d: producer %d expected sequence %d, got %d",
						errSequenceAhead, i, h.ProducerID, want, h.BaseSequence)}
				}
				return nil, fmt.Errorf("%w: batch %d: producer %d expected sequence %d, got %d",
					ErrOutOfOrderSequence, i, h.ProducerID, want, h.BaseSequence)
			}
		}
		v.known, v.epoch = true, h.ProducerEpoch
		v.inRequest = append(v.inRequest, batch)
		v.lastSeq, v.hasLast = batch.LastSeq, true
		fresh++
	}
	if len(dups) == 0 {
		return nil, nil
	}
	if fresh > 0 {
		return nil, fmt.Errorf("%w: %d of %d batches were appended before (the first at offset %d); send the new ones in a request of their own",
			ErrDuplicateInRequest, len(dups), len(hdrs), dups[0].FirstOffset)
	}
	for k := 1; k < len(dups); k++ {
		if dups[k].FirstOffset != dups[k-1].LastOffset+1 {
			return nil, fmt.Errorf("%w: the batches were appended before, but not back to back (offsets %d-%d, then %d-%d)",
				ErrDuplicateInRequest, dups[k-1].FirstOffset, dups[k-1].LastOffset, dups[k].FirstOffset, dups[k].LastOffset)
		}
	}
	return &duplicate{firstOffset: dups[0].FirstOffset, lastOffset: dups[len(dups)-1].LastOffset}, nil
}

// sameSeqs returns the index of the batch in bs with the sequences of b,
// or -1.
func sameSeqs(bs []partlog.ProducerBatch, b partlog.ProducerBatch) int {
	for i := range bs {
		if bs[i].FirstSeq == b.FirstSeq && bs[i].LastSeq == b.LastSeq {
			return i
		}
	}
	return -1
}

// seqAhead reports whether sequence s lies ahead of want rather than
// behind it: less than half the sequence space (2^30) past it, wrapping at
// 2^31-1.
func seqAhead(s, want int32) bool {
	d := (int64(s) - int64(want) + math.MaxInt32 + 1) % (math.MaxInt32 + 1)
	return d > 0 && d < 1<<30
}

// nextSeq is the sequence after s, wrapping past 2^31-1 to 0 as Kafka's
// sequences do.
func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}
