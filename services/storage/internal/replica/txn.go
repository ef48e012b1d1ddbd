package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Transactions on the replica: the read of a read_committed consumer, and
// the append of a transaction marker, which the coordinator's
// WriteTxnMarkers will call (docs/design/transactions.md). The open
// transactions, the last stable offset and the aborted transaction index
// are the log's (lib/partlog).

// ReadCommittedInto is ReadInto for a read_committed consumer: below the
// last stable offset instead of the high watermark, with the aborted
// transactions of the batches returned (partlog.Log.ReadCommittedInto).
// The last stable offset moves only when the high watermark does (a
// marker holds it until the high watermark passes the marker) or when the
// log start passes it, and each of those closes Changed, so a long poll
// parked at the last stable offset wakes when it moves.
func (r *Replica) ReadCommittedInto(buf []byte, epoch int32, offset int64, maxBytes int, minOne bool) (partlog.ReadResult, error) {
	if err := r.CheckLeader(epoch); err != nil {
		return partlog.ReadResult{}, err
	}
	return r.log.ReadCommittedInto(buf, offset, maxBytes, minOne)
}

// AppendMarker appends, as leader at epoch (-1 skips the check), the
// marker m that ends producer producerID's transaction, and answers once
// the high watermark passes it, as a produce with acks=all: a marker
// counts only once a leader change can no longer take it back. It is
// refused before the append as an acks=all produce is (leadership,
// min.insync.replicas, an unknown tier state) and as
// partlog.Log.AppendMarker refuses a marker of an older producer or
// coordinator epoch (partlog.ErrInvalidProducerEpoch,
// partlog.ErrCoordinatorFenced).
func (r *Replica) AppendMarker(ctx context.Context, producerID int64, producerEpoch int16, m recordbatch.Marker, epoch int32, timeout time.Duration) (ProduceResult, error) {
	r.appendMu.Lock()
	r.mu.Lock()
	if err := r.checkLeaderLocked(epoch); err != nil {
		r.mu.Unlock()
		r.appendMu.Unlock()
		return ProduceResult{}, err
	}
	if len(r.state.ISR) < r.cfg.MinISR {
		isr := len(r.state.ISR)
		r.mu.Unlock()
		r.appendMu.Unlock()
		return ProduceResult{}, fmt.Errorf("%w: ISR has %d, min.insync.replicas is %d", ErrNotEnoughReplicas, isr, r.cfg.MinISR)
	}
	if r.tierWait || r.log.LogEndOffset() < r.tierEnd {
		r.mu.Unlock()
		r.appendMu.Unlock()
		return ProduceResult{}, ErrTierStateUnknown
	}
	at := leadership{epoch: r.state.LeaderEpoch, term: r.term}
	r.mu.Unlock()
	// The marker ends the transaction the verification was for: the
	// producer's next transaction here is verified again (KIP-890), and
	// one in flight now finds its verification gone (txnverify.go).
	r.verified.forget(producerID)
	info, err := r.log.AppendMarker(ctx, producerID, producerEpoch, m, at.epoch)
	if info.Batches > 0 {
		r.mu.Lock()
		r.notifyLocked()
		r.maybeAdvanceHWLocked()
		r.mu.Unlock()
	}
	r.appendMu.Unlock()
	if err != nil {
		return ProduceResult{}, err
	}
	res := ProduceResult{BaseOffset: info.FirstOffset, LastOffset: info.LastOffset, LogAppendTime: -1, LogStart: r.log.LogStartOffset()}
	return res, r.waitCommitted(ctx, res.LastOffset, at, timeout)
}
