package recordbatch

import (
	"cmp"
	"slices"
)

// AbortedTxn is one aborted transaction a read_committed fetch answers:
// its producer and the offset of its first batch in the partition.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// AbortedFilter drops, from the batches of one read_committed fetch
// answer read in offset order, the data batches of aborted transactions,
// as Kafka's consumer does (its CompletedFetch): a producer's batches
// count as aborted from the first offset of its aborted transaction up
// to that transaction's abort marker. Control batches are never records;
// the caller skips them whatever Skip says. The zero filter (no aborted
// transactions) drops nothing. Not safe for concurrent use.
type AbortedFilter struct {
	pending []AbortedTxn   // not reached yet, by first offset
	aborted map[int64]bool // producers inside an aborted transaction
}

// NewAbortedFilter returns the filter of a fetch answer's aborted
// transactions, in any order.
func NewAbortedFilter(txns []AbortedTxn) *AbortedFilter {
	f := &AbortedFilter{pending: slices.Clone(txns)}
	slices.SortFunc(f.pending, func(a, b AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return f
}

// Skip reports whether the batch with header h, whose whole bytes are b,
// is an aborted transaction's data batch the consumer must not see. Call
// it for every batch, control batches included, in offset order: an
// abort marker ends its producer's aborted stretch.
func (f *AbortedFilter) Skip(h Header, b []byte) bool {
	if f == nil || h.ProducerID < 0 {
		return false
	}
	for len(f.pending) > 0 && f.pending[0].FirstOffset <= h.LastOffset() {
		if f.aborted == nil {
			f.aborted = map[int64]bool{}
		}
		f.aborted[f.pending[0].ProducerID] = true
		f.pending = f.pending[1:]
	}
	if h.Control() {
		if isAbortMarker(b) {
			delete(f.aborted, h.ProducerID)
		}
		return false
	}
	return h.Transactional() && f.aborted[h.ProducerID]
}

// isAbortMarker reports whether b, a whole control batch, is an abort
// marker. A batch that does not parse as a marker is not one.
func isAbortMarker(b []byte) bool {
	_, m, err := ParseMarker(b)
	return err == nil && m.Type == ControlAbort
}
