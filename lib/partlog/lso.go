package partlog

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Transactions in the log, as Kafka's ProducerStateManager keeps them.
//
// A producer's transaction opens with its first transactional batch and
// ends with its marker (a control batch, recordbatch.ParseMarker), which
// the leader appends on the transaction coordinator's word (AppendMarker).
// The producer state keeps each open transaction's first offset (saved in
// snapshots), so the log knows them after a restart, a truncation and on
// every replica alike: followers build them from the batches they copy.
//
// The last stable offset (LSO) is the offset below which every
// transaction is decided and its decision replicated: the first offset of
// the earliest transaction that is open, or ended by a marker the high
// watermark has not passed yet (Kafka's unreplicated transactions), or
// the high watermark when there is none; never below the log start,
// never above the high watermark. read_committed consumers read up to it.
//
// An aborted transaction gets an entry in the .txnindex of the segment
// its marker is in (txnindex.go), which AbortedTxns serves.

// txnView is what LastStableOffset reads, kept apart from the producer
// state so that readers need not take the append lock. Writers hold
// Log.mu too (lock order: mu, then txnView.mu).
type txnView struct {
	mu sync.Mutex
	// open maps each producer with an open transaction to its first
	// offset: a copy of producers.ongoing.
	open map[int64]int64
	// ended are the transactions whose marker was appended at or above
	// the high watermark, until the high watermark passes the marker
	// (pruned by LastStableOffset).
	ended []txnSpan
}

// txnSpan is the offsets of an ended transaction, from its first batch to
// its marker.
type txnSpan struct{ first, last int64 }

// LastStableOffset is the offset read_committed consumers read up to (see
// above). Safe for concurrent use; it does not take the append lock.
func (l *Log) LastStableOffset() int64 {
	v := &l.txns
	v.mu.Lock()
	defer v.mu.Unlock()
	hw := l.hw.Load()
	lso := hw
	for _, first := range v.open {
		lso = min(lso, first)
	}
	kept := v.ended[:0]
	for _, t := range v.ended {
		if t.last >= hw {
			kept = append(kept, t)
			lso = min(lso, t.first)
		}
	}
	clear(v.ended[len(kept):])
	v.ended = kept
	// Kafka's maybeIncrementFirstUnstableOffset: a transaction whose
	// first batches retention deleted holds the LSO at the log start.
	return min(max(lso, l.logStart.Load()), hw)
}

// txnsChangedLocked publishes the open transactions of the producer
// state, and the transactions ended by batches just appended, to readers.
// The caller holds mu.
func (l *Log) txnsChangedLocked(ended []completedTxn) {
	v := &l.txns
	v.mu.Lock()
	v.open = maps.Clone(l.producers.ongoing)
	for _, t := range ended {
		v.ended = append(v.ended, txnSpan{first: t.first, last: t.last})
	}
	v.mu.Unlock()
}

// resetTxnsLocked replaces what readers see of transactions after the
// producer state was rebuilt (open, truncation), with ended the
// transactions the batches read after its snapshot ended, as Kafka's
// recovery completes them into its unreplicated transactions. The caller
// holds mu, or is Open.
func (l *Log) resetTxnsLocked(ended []completedTxn) {
	v := &l.txns
	v.mu.Lock()
	v.open = maps.Clone(l.producers.ongoing)
	v.ended = v.ended[:0]
	for _, t := range ended {
		v.ended = append(v.ended, txnSpan{first: t.first, last: t.last})
	}
	v.mu.Unlock()
}

// indexAbortsLocked adds the aborted ones of ended, whose markers were
// just written to the active segment s, to its transaction index. The
// caller holds mu.
func (l *Log) indexAbortsLocked(s *segment, ended []completedTxn) error {
	aborted := abortedOf(ended)
	if len(aborted) == 0 {
		return nil
	}
	return l.appendAbortedLocked(s, aborted)
}

// abortedOf lists the aborted transactions of ended as index entries.
func abortedOf(ended []completedTxn) []AbortedTxn {
	var out []AbortedTxn
	for _, t := range ended {
		if t.aborted {
			out = append(out, AbortedTxn{ProducerID: t.pid, FirstOffset: t.first, LastOffset: t.last, LastStableOffset: t.lso})
		}
	}
	return out
}

// checkMarkersLocked checks the control batches of a leader append, as
// Kafka's ProducerAppendInfo.appendEndTxnMarker does for a marker from
// the coordinator: each must be a transaction marker of a producer id,
// not of an older producer epoch than the producer's
// (ErrInvalidProducerEpoch), nor of an older coordinator epoch than the
// producer's last marker (ErrCoordinatorFenced). Nothing is appended when
// one fails. The caller holds mu.
func (l *Log) checkMarkersLocked(b []byte) error {
	type seen struct {
		epoch      int16
		coordEpoch int32
	}
	var earlier map[int64]seen // markers earlier in the same append
	for i := 0; len(b) > 0; i++ {
		h, _ := recordbatch.PeekHeader(b) // checked by checkBatches
		batch := b[:h.Size()]
		b = b[h.Size():]
		if !h.Control() {
			continue
		}
		_, m, err := recordbatch.ParseMarker(batch)
		if err != nil {
			return fmt.Errorf("%w: batch %d: %w", ErrInvalidBatch, i, err)
		}
		if h.ProducerID < 0 || h.ProducerEpoch < 0 {
			return fmt.Errorf("%w: batch %d: marker of producer id %d epoch %d", ErrInvalidBatch, i, h.ProducerID, h.ProducerEpoch)
		}
		cur, known := earlier[h.ProducerID]
		if e := l.producers.m[h.ProducerID]; !known && e != nil {
			cur, known = seen{e.epoch, e.coordEpoch}, true
		}
		if known && h.ProducerEpoch < cur.epoch {
			return fmt.Errorf("%w: marker of producer %d with epoch %d, the producer's is %d",
				ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, cur.epoch)
		}
		if known && m.CoordinatorEpoch < cur.coordEpoch {
			return fmt.Errorf("%w: marker of producer %d with coordinator epoch %d, the last was %d",
				ErrCoordinatorFenced, h.ProducerID, m.CoordinatorEpoch, cur.coordEpoch)
		}
		if earlier == nil {
			earlier = make(map[int64]seen)
		}
		earlier[h.ProducerID] = seen{max(cur.epoch, h.ProducerEpoch), m.CoordinatorEpoch}
	}
	return nil
}

// AppendMarker appends, as the partition leader with leaderEpoch, the
// marker that ends producer producerID's transaction: a commit or an
// abort from the coordinator whose epoch is coordinatorEpoch. It is
// AppendAsLeader of the batch recordbatch.BuildMarker writes, timestamped
// with the log's clock, and is refused as checkMarkersLocked says. A
// marker for a producer without an open transaction here is appended and
// changes only its epochs, as in Kafka: the coordinator may retry one
// whose first copy was appended.
func (l *Log) AppendMarker(ctx context.Context, producerID int64, producerEpoch int16, m recordbatch.Marker, leaderEpoch int32) (AppendInfo, error) {
	b, err := recordbatch.BuildMarker(producerID, producerEpoch, l.clock().UnixMilli(), m)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	return l.AppendAsLeader(ctx, b, leaderEpoch)
}
