// Package txn is the transaction coordinator's state machine: Kafka's
// TransactionMetadata and the checks of its TransactionCoordinator, on
// the rows of the offsets database (offsetstore.Txn). It does no I/O: each
// function takes a transactional id's row as the database has it, locked
// (nil when the id has none), and returns the row to write in the same
// database transaction, with the answer for the client
// (docs/design/transactions.md, "The state machine").
//
// States, as Kafka's TransactionState: Empty → Ongoing (AddPartitionsToTxn,
// AddOffsetsToTxn) → PrepareCommit or PrepareAbort (EndTxn; PrepareAbort
// also on timeout and when a new producer fences an Ongoing one) →
// CompleteCommit or CompleteAbort (every marker written) → Ongoing again,
// or Empty after InitProducerId. Kafka's PrepareEpochFence is not a state
// here: fencing bumps the epoch and records PrepareAbort in one database
// transaction. Kafka's Dead is not a state either: an id unused for
// transactional.id.expiration.ms is deleted (Expire).
package txn

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// Errors answered to the client; the server maps each to Kafka's error.
var (
	// ErrInvalidMapping: the transactional id is unknown or has another
	// producer id (Kafka's INVALID_PRODUCER_ID_MAPPING).
	ErrInvalidMapping = errors.New("txn: the producer id is not the transactional id's")
	// ErrProducerFenced: the producer's epoch is not the transactional
	// id's; a newer producer started, or the coordinator aborted the
	// transaction on timeout (Kafka's PRODUCER_FENCED).
	ErrProducerFenced = errors.New("txn: the producer is fenced by a newer epoch")
	// ErrConcurrent: the previous transaction's markers are being
	// written; retry (Kafka's CONCURRENT_TRANSACTIONS).
	ErrConcurrent = errors.New("txn: the previous transaction is still completing")
	// ErrInvalidState: the request does not fit the state (Kafka's
	// INVALID_TXN_STATE).
	ErrInvalidState = errors.New("txn: invalid transaction state")
	// ErrNeedProducerID: Init needs a new producer id; the caller
	// obtains one and calls again with it. Never answered to a client.
	ErrNeedProducerID = errors.New("txn: a new producer id is needed")
)

// NoProducerID is the producer id and epoch of a request that names
// none (Kafka's -1).
const NoProducerID = -1

// Outcome is the result of one step: the row to write (nil: nothing
// changes), what becomes of the staged offsets, and the answer.
type Outcome struct {
	Write  *offsetstore.Txn
	Staged offsetstore.StagedOffsets
	// Delete deletes the transactional id's row (Expire).
	Delete bool
	// Answer is the client's error; nil is success. A step may both
	// write and answer an error: a fencing InitProducerId records the
	// abort and answers ErrConcurrent.
	Answer error
	// Markers is set when the step decided the transaction (Prepare*):
	// the markers are to be written.
	Markers bool
	// ProducerID and ProducerEpoch are what InitProducerId answers.
	ProducerID    int64
	ProducerEpoch int16
}

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted: the
// epoch cannot be bumped twice more (a fence and an InitProducerId), so
// the next InitProducerId takes a new producer id.
func epochExhausted(e int16) bool { return e >= math.MaxInt16-1 }

// Prepared reports whether s is PrepareCommit or PrepareAbort.
func Prepared(s offsetstore.TxnState) bool {
	return s == offsetstore.TxnPrepareCommit || s == offsetstore.TxnPrepareAbort
}

// Init is InitProducerId with a transactional id (Kafka's
// TransactionCoordinator.handleInitProducerId). expectedPID and
// expectedEpoch are the producer's own (KIP-360), NoProducerID when it has
// none. newPID is a fresh producer id from the controller's blocks, or
// NoProducerID: when one is needed (a new transactional id, an exhausted
// epoch) the outcome answers ErrNeedProducerID and writes nothing.
//
//   - A new id gets newPID at epoch 0, state Empty.
//   - Empty or Complete*: the epoch is bumped (a new producer id once
//     exhausted), which fences the previous producer. A producer naming
//     its own id and epoch bumps it and keeps the old one as the last;
//     naming the last epoch (it lost the answer of its bump) it is
//     answered the current one again; another one is PRODUCER_FENCED.
//   - Ongoing: the previous producer's transaction is aborted under a
//     bumped epoch (the fence) and ErrConcurrent answered; the producer
//     retries once the abort markers are written.
//   - Prepare*: ErrConcurrent.
func Init(cur *offsetstore.Txn, id string, timeoutMs int32, expectedPID int64, expectedEpoch int16, newPID int64, now time.Time) Outcome {
	expected := expectedPID >= 0
	if cur == nil {
		if newPID < 0 {
			return Outcome{Answer: ErrNeedProducerID}
		}
		row := &offsetstore.Txn{ID: id, ProducerID: newPID, LastProducerID: NoProducerID, LastProducerEpoch: NoProducerID,
			State: offsetstore.TxnEmpty, TimeoutMs: timeoutMs, Updated: now}
		return Outcome{Write: row, ProducerID: row.ProducerID, ProducerEpoch: row.ProducerEpoch}
	}
	// Kafka's TransactionMetadata.isValidProducerId: the producer's id is
	// the current one, or the last one when that was rotated away from
	// at an exhausted epoch.
	if expected && expectedPID != cur.ProducerID && !(expectedPID == cur.LastProducerID && epochExhausted(expectedEpoch)) {
		return Outcome{Answer: ErrProducerFenced}
	}
	next := *cur
	next.Updated = now
	switch cur.State {
	case offsetstore.TxnPrepareCommit, offsetstore.TxnPrepareAbort:
		return Outcome{Answer: ErrConcurrent}
	case offsetstore.TxnOngoing:
		fenceEpoch(&next)
		next.State, next.Started = offsetstore.TxnPrepareAbort, cur.Started
		return Outcome{Write: &next, Staged: offsetstore.DropStaged, Markers: true, Answer: ErrConcurrent}
	}
	// Empty, CompleteCommit or CompleteAbort.
	next.TimeoutMs = timeoutMs
	next.State, next.Started, next.Partitions, next.Groups = offsetstore.TxnEmpty, time.Time{}, nil, nil
	if epochExhausted(cur.ProducerEpoch) && (!expected || expectedEpoch == cur.ProducerEpoch) {
		// Kafka's prepareProducerIdRotation.
		if newPID < 0 {
			return Outcome{Answer: ErrNeedProducerID}
		}
		next.LastProducerID, next.LastProducerEpoch = cur.ProducerID, NoProducerID
		if expected {
			next.LastProducerEpoch = cur.ProducerEpoch
		}
		next.ProducerID, next.ProducerEpoch = newPID, 0
		return Outcome{Write: &next, ProducerID: next.ProducerID, ProducerEpoch: next.ProducerEpoch}
	}
	// Kafka's prepareIncrementProducerEpoch.
	switch {
	case !expected:
		next.ProducerEpoch, next.LastProducerEpoch = cur.ProducerEpoch+1, NoProducerID
	case expectedEpoch == cur.ProducerEpoch:
		next.ProducerEpoch, next.LastProducerEpoch = cur.ProducerEpoch+1, cur.ProducerEpoch
	case expectedEpoch == cur.LastProducerEpoch:
		// A retry of a bump whose answer was lost: answered again,
		// nothing written.
		return Outcome{ProducerID: cur.ProducerID, ProducerEpoch: cur.ProducerEpoch}
	default:
		return Outcome{Answer: ErrProducerFenced}
	}
	return Outcome{Write: &next, ProducerID: next.ProducerID, ProducerEpoch: next.ProducerEpoch}
}

// fenceEpoch bumps t's epoch to fence its producer, as Kafka's
// prepareFenceProducerEpoch: not past the exhausted epoch (the abort
// markers then carry the same epoch, and the next InitProducerId rotates
// the producer id). The last epoch is forgotten: the fenced producer may
// not claim the bump as its own.
func fenceEpoch(t *offsetstore.Txn) {
	if !epochExhausted(t.ProducerEpoch) {
		t.ProducerEpoch++
	}
	t.LastProducerEpoch = NoProducerID
}

// checkProducer is the check every call of a producer starts with.
func checkProducer(cur *offsetstore.Txn, pid int64, epoch int16) error {
	switch {
	case cur == nil, cur.ProducerID != pid:
		return ErrInvalidMapping
	case cur.ProducerEpoch != epoch:
		return ErrProducerFenced
	}
	return nil
}

// begin moves a row that may start a transaction to Ongoing: from Empty
// or Complete* the transaction starts now, with nothing in it.
func begin(cur *offsetstore.Txn, now time.Time) (*offsetstore.Txn, error) {
	next := *cur
	next.Updated = now
	switch cur.State {
	case offsetstore.TxnOngoing:
		next.Partitions, next.Groups = slices.Clone(cur.Partitions), slices.Clone(cur.Groups)
	case offsetstore.TxnEmpty, offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort:
		next.State, next.Started, next.Partitions, next.Groups = offsetstore.TxnOngoing, now, nil, nil
	default: // Prepare*
		return nil, ErrConcurrent
	}
	return &next, nil
}

// AddPartitions is AddPartitionsToTxn (Kafka's
// handleAddPartitionsToTransaction): the partitions join the transaction,
// which becomes Ongoing. Adding partitions already in an Ongoing
// transaction writes nothing.
func AddPartitions(cur *offsetstore.Txn, pid int64, epoch int16, parts []offsetstore.TxnPartition, now time.Time) Outcome {
	if err := checkProducer(cur, pid, epoch); err != nil {
		return Outcome{Answer: err}
	}
	if cur.State == offsetstore.TxnOngoing && containsAll(cur.Partitions, parts) {
		return Outcome{}
	}
	next, err := begin(cur, now)
	if err != nil {
		return Outcome{Answer: err}
	}
	for _, p := range parts {
		if !slices.Contains(next.Partitions, p) {
			next.Partitions = append(next.Partitions, p)
		}
	}
	slices.SortFunc(next.Partitions, comparePartitions)
	return Outcome{Write: next}
}

// AddGroup is AddOffsetsToTxn: the group's staged offsets will commit
// with the transaction, which becomes Ongoing.
func AddGroup(cur *offsetstore.Txn, pid int64, epoch int16, group string, now time.Time) Outcome {
	if err := checkProducer(cur, pid, epoch); err != nil {
		return Outcome{Answer: err}
	}
	if cur.State == offsetstore.TxnOngoing && slices.Contains(cur.Groups, group) {
		return Outcome{}
	}
	next, err := begin(cur, now)
	if err != nil {
		return Outcome{Answer: err}
	}
	if !slices.Contains(next.Groups, group) {
		next.Groups = append(next.Groups, group)
		slices.Sort(next.Groups)
	}
	return Outcome{Write: next}
}

// CheckStage is TxnOffsetCommit's check of the transaction: the producer
// holds it, and it is Ongoing with the group added (AddOffsetsToTxn comes
// first, as Kafka's producer sends it).
func CheckStage(cur *offsetstore.Txn, pid int64, epoch int16, group string) error {
	if err := checkProducer(cur, pid, epoch); err != nil {
		return err
	}
	if cur.State != offsetstore.TxnOngoing || !slices.Contains(cur.Groups, group) {
		return ErrInvalidState
	}
	return nil
}

// End is EndTxn (Kafka's handleEndTransaction): an Ongoing transaction
// becomes PrepareCommit, its staged offsets committed in the same
// database transaction, or PrepareAbort, its staged offsets dropped. A
// retry of the decision already made is answered success, as the design
// says (Kafka answers CONCURRENT_TRANSACTIONS while it is Prepare*); the
// other decision is INVALID_TXN_STATE, as is ending a transaction never
// begun.
func End(cur *offsetstore.Txn, pid int64, epoch int16, commit bool, now time.Time) Outcome {
	if err := checkProducer(cur, pid, epoch); err != nil {
		return Outcome{Answer: err}
	}
	same := func(commitState, abortState offsetstore.TxnState) Outcome {
		if cur.State == commitState && commit || cur.State == abortState && !commit {
			return Outcome{}
		}
		return Outcome{Answer: ErrInvalidState}
	}
	switch cur.State {
	case offsetstore.TxnOngoing:
		next := *cur
		next.Updated = now
		staged := offsetstore.DropStaged
		next.State = offsetstore.TxnPrepareAbort
		if commit {
			next.State, staged = offsetstore.TxnPrepareCommit, offsetstore.CommitStaged
		}
		return Outcome{Write: &next, Staged: staged, Markers: true}
	case offsetstore.TxnPrepareCommit, offsetstore.TxnPrepareAbort:
		return same(offsetstore.TxnPrepareCommit, offsetstore.TxnPrepareAbort)
	case offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort:
		return same(offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort)
	}
	return Outcome{Answer: ErrInvalidState} // Empty
}

// TimedOut reports whether t is an Ongoing transaction older than its
// timeout at now.
func TimedOut(t *offsetstore.Txn, now time.Time) bool {
	return t.State == offsetstore.TxnOngoing && !now.Before(t.Started.Add(time.Duration(t.TimeoutMs)*time.Millisecond))
}

// Timeout aborts a timed-out transaction (Kafka's
// abortTimedOutTransactions): the epoch is bumped to fence the producer,
// whose next call is PRODUCER_FENCED, and the transaction becomes
// PrepareAbort. A row that is no longer the one seen timed out (other
// producer id or epoch, no longer Ongoing, or not yet timed out) is left
// alone.
func Timeout(cur *offsetstore.Txn, pid int64, epoch int16, now time.Time) Outcome {
	if cur == nil || cur.ProducerID != pid || cur.ProducerEpoch != epoch || !TimedOut(cur, now) {
		return Outcome{}
	}
	next := *cur
	next.Updated = now
	fenceEpoch(&next)
	next.State = offsetstore.TxnPrepareAbort
	return Outcome{Write: &next, Staged: offsetstore.DropStaged, Markers: true}
}

// Expired reports whether t has no transaction and has not changed for
// after at now (Kafka's TransactionStateManager: transactional ids in
// Empty, CompleteCommit or CompleteAbort not used for
// transactional.id.expiration.ms).
func Expired(t *offsetstore.Txn, after time.Duration, now time.Time) bool {
	switch t.State {
	case offsetstore.TxnEmpty, offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort:
		return !now.Before(t.Updated.Add(after))
	}
	return false
}

// Expire deletes a transactional id unused for after: its next producer
// starts over with a new producer id. A row that changed since it was
// seen expired (other producer id or epoch, or no longer expired) is left
// alone.
func Expire(cur *offsetstore.Txn, pid int64, epoch int16, after time.Duration, now time.Time) Outcome {
	if cur == nil || cur.ProducerID != pid || cur.ProducerEpoch != epoch || !Expired(cur, after, now) {
		return Outcome{}
	}
	return Outcome{Delete: true}
}

// MarkersWritten records that the markers of done are written: they
// leave the Prepare* transaction's partitions and, once none is left, the
// transaction becomes CompleteCommit or CompleteAbort (Kafka's
// TransactionStateManager.appendTransactionToLog of the complete state).
// A row that is no longer the one the markers were for (other producer id
// or epoch, or state) is left alone.
func MarkersWritten(cur *offsetstore.Txn, pid int64, epoch int16, state offsetstore.TxnState, done []offsetstore.TxnPartition, now time.Time) Outcome {
	if cur == nil || cur.ProducerID != pid || cur.ProducerEpoch != epoch || cur.State != state || !Prepared(state) {
		return Outcome{}
	}
	next := *cur
	next.Partitions = slices.DeleteFunc(slices.Clone(cur.Partitions), func(p offsetstore.TxnPartition) bool { return slices.Contains(done, p) })
	if len(next.Partitions) == len(cur.Partitions) && len(next.Partitions) > 0 {
		return Outcome{}
	}
	next.Updated = now
	if len(next.Partitions) == 0 {
		next.State, next.Partitions, next.Groups = offsetstore.TxnCompleteAbort, nil, nil
		if state == offsetstore.TxnPrepareCommit {
			next.State = offsetstore.TxnCompleteCommit
		}
	}
	return Outcome{Write: &next}
}

func comparePartitions(a, b offsetstore.TxnPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition) - int(b.Partition)
}

func containsAll(have, want []offsetstore.TxnPartition) bool {
	for _, p := range want {
		if !slices.Contains(have, p) {
			return false
		}
	}
	return true
}
