package replica

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// KIP-890 part 1 on the leader: before the first transactional batch of a
// producer's transaction is appended to a partition, the leader asks the
// transaction coordinator whether the partition was added to the
// producer's Ongoing transaction, at the batch's producer id and epoch.
// Without the check, a batch of an ended transaction that arrives late
// (a retry the producer gave up on) would open a transaction no
// coordinator knows, which would hold the last stable offset forever.
//
// As Kafka's VerificationGuard, a verification is begun before the
// question is sent and only counts if no marker for the producer was
// appended while it was asked: the marker forgets it, and the append,
// which checks under the append lock, then refuses the batch with
// ErrInvalidTxnState instead of opening a transaction after its end.
// A positive answer stands, per producer id and epoch, until the
// partition's next marker for the producer, and only in the leadership
// term it was given in (a marker replicated while this node followed
// does not pass through AppendMarker).

// TxnVerifier asks the producer's transaction coordinator whether the
// partition is in producerID's Ongoing transaction at producerEpoch. It
// returns nil when it is, an error wrapping ErrInvalidTxnState,
// ErrInvalidProducerIDMapping or ErrInvalidProducerEpoch when the
// coordinator says no, and ErrTxnNotVerified when the coordinator could
// not answer (retriable). It must be safe for concurrent use.
type TxnVerifier func(ctx context.Context, producerID int64, producerEpoch int16) error

// txnVerified is the leader's verifications by producer id; the zero
// value is ready. Safe for concurrent use.
type txnVerified struct {
	mu   sync.Mutex
	m    map[int64]txnVerification
	next uint64 // the last token given
}

// txnVerification is one producer's verification: begun (token given)
// and, once the coordinator said yes, done.
type txnVerification struct {
	epoch int16
	term  uint64
	token uint64
	done  bool
}

// begin returns the token of the producer's verification at epoch in
// term, starting one unless one is begun: concurrent produces of the
// first batches of a transaction share it, so neither undoes the other's.
func (v *txnVerified) begin(pid int64, epoch int16, term uint64) (token uint64, done bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.m[pid]; ok && e.epoch == epoch && e.term == term {
		return e.token, e.done
	}
	if v.m == nil {
		v.m = make(map[int64]txnVerification)
	}
	v.next++
	v.m[pid] = txnVerification{epoch: epoch, term: term, token: v.next}
	return v.next, false
}

// confirm records the coordinator's yes for the verification token, if a
// marker did not forget it meanwhile.
func (v *txnVerified) confirm(pid int64, token uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.m[pid]; ok && e.token == token {
		e.done = true
		v.m[pid] = e
	}
}

// drop removes the verification token after the coordinator said no or
// could not answer; a later verification of the producer starts afresh.
func (v *txnVerified) drop(pid int64, token uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.m[pid]; ok && e.token == token {
		delete(v.m, pid)
	}
}

// forget removes the producer's verification: a marker for it is being
// appended.
func (v *txnVerified) forget(pid int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, pid)
}

// holds reports whether the producer is verified at epoch in term.
func (v *txnVerified) holds(pid int64, epoch int16, term uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[pid]
	return ok && e.done && e.epoch == epoch && e.term == term
}

// txnProducers returns the producer id and epoch of each producer with a
// transactional batch in hdrs, once each (its first batch's epoch).
func txnProducers(hdrs []recordbatch.Header) []recordbatch.Header {
	var out []recordbatch.Header
	for _, h := range hdrs {
		if !h.Transactional() {
			continue
		}
		seen := false
		for _, o := range out {
			seen = seen || o.ProducerID == h.ProducerID
		}
		if !seen {
			out = append(out, h)
		}
	}
	return out
}

// openTxn reports whether the log has an open transaction of pid at
// epoch (Kafka's UnifiedLog.hasOngoingTransaction checks the epoch too: a
// transaction of an older epoch is one the coordinator is aborting).
func openTxn(l *partlog.Log, pid int64, epoch int16) bool {
	st, ok := l.Producer(pid)
	return ok && st.TxnFirstOffset >= 0 && st.Epoch == epoch
}

// verifyTxn verifies, before the append lock, every producer of a
// transactional batch in hdrs that has no open transaction in the log
// and no verification of its epoch yet.
func (r *Replica) verifyTxn(ctx context.Context, hdrs []recordbatch.Header, verify TxnVerifier) error {
	producers := txnProducers(hdrs)
	if len(producers) == 0 {
		return nil
	}
	if verify == nil {
		return fmt.Errorf("%w: transactional batches need the producer's transactional id", partlog.ErrInvalidBatch)
	}
	r.mu.Lock()
	term := r.term
	r.mu.Unlock()
	for _, h := range producers {
		if openTxn(r.log, h.ProducerID, h.ProducerEpoch) {
			continue
		}
		token, done := r.verified.begin(h.ProducerID, h.ProducerEpoch, term)
		if done {
			continue
		}
		if err := verify(ctx, h.ProducerID, h.ProducerEpoch); err != nil {
			r.verified.drop(h.ProducerID, token)
			return err
		}
		r.verified.confirm(h.ProducerID, token)
	}
	return nil
}

// checkTxnVerified is the check under the append lock (the caller holds
// it): every transactional batch's producer has an open transaction in
// the log or a verification of its epoch in term that no marker undid.
func (r *Replica) checkTxnVerified(hdrs []recordbatch.Header, term uint64) error {
	for _, h := range txnProducers(hdrs) {
		if !openTxn(r.log, h.ProducerID, h.ProducerEpoch) && !r.verified.holds(h.ProducerID, h.ProducerEpoch, term) {
			return fmt.Errorf("%w: producer %d epoch %d: its transaction ended here while the partition was verified",
				ErrInvalidTxnState, h.ProducerID, h.ProducerEpoch)
		}
	}
	return nil
}
