package replica

import (
	"errors"
	"fmt"
)

// Sentinel errors of the replica. The server maps them to Connect codes and
// ErrorDetail reasons at the handler edge; the replica's View gives the
// leader hint.
var (
	// ErrNotLeader: this node does not lead the partition.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrFencedLeaderEpoch: the request's leader epoch is older than ours.
	ErrFencedLeaderEpoch = errors.New("replica: fenced leader epoch")
	// ErrUnknownLeaderEpoch: the request's leader epoch is newer than ours.
	ErrUnknownLeaderEpoch = errors.New("replica: unknown leader epoch")
	// ErrNotEnoughReplicas: acks=all refused before the append because the
	// ISR is smaller than min.insync.replicas.
	ErrNotEnoughReplicas = errors.New("replica: not enough in-sync replicas")
	// ErrNotEnoughReplicasAfterAppend: the batch was appended but the ISR
	// fell below min.insync.replicas before it was committed.
	ErrNotEnoughReplicasAfterAppend = errors.New("replica: not enough in-sync replicas after append")
	// ErrTimedOut: acks=all was not met within the produce timeout.
	ErrTimedOut = errors.New("replica: timed out waiting for in-sync replicas")
	// ErrLeadershipLost: the node stopped leading (or the leader epoch
	// changed) while an acks=all produce waited; the batch may or may not
	// survive, so it is not acknowledged.
	ErrLeadershipLost = errors.New("replica: leadership lost before the batch was committed")
	// ErrIneligibleReplica: a Replicate came from a node that is not a
	// replica of the partition.
	ErrIneligibleReplica = errors.New("replica: not a replica of the partition")
	// ErrStaleNodeEpoch: a Replicate came from an incarnation of the
	// follower's node older than one the leader has seen (a dead process's
	// request arriving late), or carried no node epoch.
	ErrStaleNodeEpoch = errors.New("replica: stale node epoch")
	// ErrOutOfOrderSequence: an idempotent producer's sequence skipped.
	ErrOutOfOrderSequence = errors.New("replica: out of order sequence number")
	// errSequenceAhead: an idempotent producer's batch is ahead of the
	// next sequence the log expects, as when the producer has several
	// batches in flight and an earlier one has not arrived yet. Produce
	// holds such a batch for a while (sequenceHold) before answering
	// ErrOutOfOrderSequence, which it wraps.
	errSequenceAhead = fmt.Errorf("%w: earlier batches of the producer have not arrived", ErrOutOfOrderSequence)
	// ErrUnknownProducer: a batch of a producer this replica does not know,
	// not at sequence 0, while the replica's producer state may lack
	// producers whose batches lie below its log start (partlog's
	// ProducersComplete): it may be a retry of a batch already in the log,
	// so it is refused rather than appended twice. The producer must start
	// a new session.
	ErrUnknownProducer = errors.New("replica: unknown producer, and this replica's producer history is incomplete")
	// ErrInvalidProducerEpoch: an idempotent producer's epoch is older than
	// the one the partition has seen.
	ErrInvalidProducerEpoch = errors.New("replica: invalid producer epoch")
	// ErrInvalidTxnState: a transactional batch for a partition that is not
	// in its producer's Ongoing transaction, as the transaction
	// coordinator answered (KIP-890 part 1; Kafka's INVALID_TXN_STATE), or
	// whose verification a marker overtook. Nothing is appended.
	ErrInvalidTxnState = errors.New("replica: the partition is not in the producer's transaction")
	// ErrInvalidProducerIDMapping: the transaction coordinator knows the
	// transactional id under another producer id, or not at all.
	ErrInvalidProducerIDMapping = errors.New("replica: the transactional id has another producer id")
	// ErrTxnNotVerified: the transaction coordinator could not be asked,
	// or answered that it cannot say yet, whether the partition is in the
	// producer's transaction. Retriable; nothing is appended unverified.
	ErrTxnNotVerified = errors.New("replica: cannot verify the partition with the transaction coordinator")
	// ErrDuplicateInRequest: a request mixes batches appended before with
	// new ones, or repeats earlier batches that are not back to back in the
	// log. One response offset cannot describe either, so nothing is
	// appended; a client that retries exactly what it sent never meets it.
	ErrDuplicateInRequest = errors.New("replica: request mixes duplicate and new batches")
	// ErrTierStateUnknown: a leader of a tiered topic refuses produce while
	// its log may end below the tier's end offset (empty log and the tiering
	// service not answered yet, or a log behind the tier). It is a
	// NOT_LEADER to clients, which refresh and retry.
	ErrTierStateUnknown = fmt.Errorf("%w: log end not known to be at or past the tiered end yet", ErrNotLeader)
	// ErrClosed: the replica was closed (partition moved or node stopping).
	ErrClosed = errors.New("replica: closed")
)
