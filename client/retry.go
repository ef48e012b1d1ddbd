package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// RetryReason says why the client retries a request, in a form an
// application can switch on. The values are stable: new reasons are added
// at the end, existing ones are never renumbered or reused.
type RetryReason int

const (
	// RetryOther is a retriable failure none of the other reasons
	// names; RetryEvent.Err says what it was.
	RetryOther RetryReason = iota
	// RetryNotEnoughReplicas: the leader refused an acks=all produce, or
	// appended it but could not commit it, because the partition's ISR is
	// smaller than min.insync.replicas (RetryEvent.ISRSize and
	// MinInsyncReplicas say by how much when the leader said).
	RetryNotEnoughReplicas
	// RetryLeaderNotAvailable: the partition has no leader right now (its
	// leader is offline and no other replica has taken over yet).
	RetryLeaderNotAvailable
	// RetryNotLeader: the node asked no longer leads the partition, or
	// the request carried an older leader epoch; the client looks up the
	// new leader.
	RetryNotLeader
	// RetryUnknownLeaderEpoch: the request carried a leader epoch newer
	// than the leader knows yet (it is still taking over).
	RetryUnknownLeaderEpoch
	// RetryUnknownTopicOrPartition: the node does not know the partition
	// yet, or the client's metadata is behind.
	RetryUnknownTopicOrPartition
	// RetryCoordinatorUnavailable: the consumer group's (or transactional
	// id's) coordinator could not be found or did not answer.
	RetryCoordinatorUnavailable
	// RetryTimeout: the request timed out (RequestTimeout, or the
	// leader's own wait for the in-sync replicas).
	RetryTimeout
	// RetryNodeUnreachable: the connection to the node could not be made,
	// or broke under the request (the node's process was killed or the
	// network dropped).
	RetryNodeUnreachable
	// RetryUnavailable: a service answered that it cannot serve the
	// request right now, without a more precise reason.
	RetryUnavailable
	// RetryUnknownProducerID: the leader no longer knows the idempotent
	// producer's id; the partition starts its sequences again under the
	// next producer epoch and sends again (a batch an earlier attempt of
	// which may have landed fails with ErrOutcomeUnknown instead).
	RetryUnknownProducerID
	// RetryConcurrentTransactions: the transaction coordinator is still
	// finishing the producer's previous transaction (writing its markers)
	// and asks the producer to try again.
	RetryConcurrentTransactions
	// RetryUnstableOffsets: a read-committed group member asked for its
	// committed offsets while a transaction has offsets of the group's
	// partitions staged (KIP-447's UNSTABLE_OFFSET_COMMIT); it waits for
	// the transaction to end rather than start from an offset the
	// transaction may move.
	RetryUnstableOffsets
)

// String says the reason in a few plain words ("not enough in-sync
// replicas"), as the strata CLI prints it.
func (r RetryReason) String() string {
	switch r {
	case RetryOther:
		return "retriable error"
	case RetryNotEnoughReplicas:
		return "not enough in-sync replicas"
	case RetryLeaderNotAvailable:
		return "leader not available"
	case RetryNotLeader:
		return "leader changed"
	case RetryUnknownLeaderEpoch:
		return "leader epoch not known to the leader yet"
	case RetryUnknownTopicOrPartition:
		return "topic or partition not known to the node yet"
	case RetryCoordinatorUnavailable:
		return "group coordinator unavailable"
	case RetryTimeout:
		return "request timed out"
	case RetryNodeUnreachable:
		return "node unreachable"
	case RetryUnavailable:
		return "service unavailable"
	case RetryUnknownProducerID:
		return "producer id unknown to the leader"
	case RetryConcurrentTransactions:
		return "previous transaction still completing"
	case RetryUnstableOffsets:
		return "a transaction has offsets of the group staged"
	}
	return fmt.Sprintf("RetryReason(%d)", int(r))
}

// RetryEvent describes one retry, as OnRetry reports it: the request
// failed with a retriable error and the client waits before trying again.
type RetryEvent struct {
	// Topic and Partition name the partition the failed request was for.
	// Partition is -1 when the request was for several partitions (a
	// fetch from one node), and Topic is "" too when they belong to
	// several topics or the request was for no topic (a group
	// coordinator call).
	Topic     string
	Partition int32
	// Attempt counts the tries that have failed so far in a row: 1 at
	// the first retry.
	Attempt int
	// Wait is how long the client waits before the next try.
	Wait time.Duration
	// Reason says why the request failed.
	Reason RetryReason
	// ISRSize and MinInsyncReplicas are the partition's in-sync replica
	// count and its min.insync.replicas, set with RetryNotEnoughReplicas
	// when the leader's error carried them; 0 otherwise.
	ISRSize, MinInsyncReplicas int32
	// Err is the error the last try failed with.
	Err error
}

// scopedError is an error about one partition (partition ≥ 0), several
// partitions of a topic (partition -1) or of several topics (topic ""),
// so a RetryEvent can name them. It keeps the text of the error it wraps.
type scopedError struct {
	topic     string
	partition int32
	err       error
}

func (e *scopedError) Error() string { return e.err.Error() }
func (e *scopedError) Unwrap() error { return e.err }

// scoped wraps err with the partition it is about; nil stays nil.
func scoped(tp topicPartition, err error) error {
	if err == nil {
		return nil
	}
	return &scopedError{topic: tp.topic, partition: tp.partition, err: err}
}

// scopedGroup wraps err, the failure of one request for the partitions of
// g, with what they have in common.
func scopedGroup(g *leaderGroup, err error) error {
	if err == nil || len(g.curs) == 0 {
		return err
	}
	se := &scopedError{topic: g.curs[0].tp.topic, partition: g.curs[0].tp.partition, err: err}
	for _, cur := range g.curs[1:] {
		if cur.tp.topic != se.topic {
			se.topic, se.partition = "", -1
			break
		}
		se.partition = -1
	}
	return se
}

// retryEvent describes a retry of a request that failed with err: the
// partition comes from the first error in err's tree that names one (a
// Poll round can fail for several partitions at once), the reason from
// that error.
func retryEvent(err error, attempt int, wait time.Duration) RetryEvent {
	ev := RetryEvent{Partition: -1, Attempt: attempt, Wait: wait, Err: err}
	cause := err
	var se *scopedError
	if errors.As(err, &se) {
		ev.Topic, ev.Partition, cause = se.topic, se.partition, se.err
	}
	ev.Reason = retryReason(cause)
	if ev.Reason == RetryNotEnoughReplicas {
		if h := detailIn(cause).GetNotEnoughReplicas(); h != nil {
			ev.ISRSize, ev.MinInsyncReplicas = h.GetIsrSize(), h.GetMinInsyncReplicas()
		}
	}
	return ev
}

// retryReason names why a retriable error happened.
func retryReason(err error) RetryReason {
	switch {
	case errors.Is(err, ErrNoLeader):
		return RetryLeaderNotAvailable
	case errors.Is(err, context.DeadlineExceeded):
		return RetryTimeout
	case connectionBroke(err):
		return RetryNodeUnreachable
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return RetryNodeUnreachable
	}
	d := detailIn(err)
	switch d.GetReason() {
	case commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
		return RetryNotEnoughReplicas
	case commonv1.Reason_REASON_NOT_LEADER:
		if h := d.GetLeader(); h != nil && h.GetLeaderId() < 0 {
			// The node knows the partition has no leader at all.
			return RetryLeaderNotAvailable
		}
		return RetryNotLeader
	case commonv1.Reason_REASON_FENCED_LEADER_EPOCH:
		return RetryNotLeader
	case commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH:
		return RetryUnknownLeaderEpoch
	case commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION:
		return RetryUnknownTopicOrPartition
	case commonv1.Reason_REASON_NOT_COORDINATOR, commonv1.Reason_REASON_COORDINATOR_LOADING:
		return RetryCoordinatorUnavailable
	case commonv1.Reason_REASON_REQUEST_TIMED_OUT:
		return RetryTimeout
	case commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID:
		return RetryUnknownProducerID
	case commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS:
		return RetryConcurrentTransactions
	case commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT:
		return RetryUnstableOffsets
	}
	var e *Error
	code := connect.CodeOf(err)
	if errors.As(err, &e) {
		code = e.Code
	}
	switch code {
	case connect.CodeDeadlineExceeded:
		return RetryTimeout
	case connect.CodeUnavailable:
		return RetryUnavailable
	}
	return RetryOther
}

// detailIn returns the ErrorDetail an error carries, from an *Error or a
// Connect error in its chain; nil when there is none.
func detailIn(err error) *commonv1.ErrorDetail {
	var e *Error
	if errors.As(err, &e) && e.Detail != nil {
		return e.Detail
	}
	return DetailOf(err)
}

// retried reports a retry to the OnRetry callback, if any.
func (c *config) retried(ev RetryEvent) {
	if c.onRetry != nil {
		c.onRetry(ev)
	}
}
