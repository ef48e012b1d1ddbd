package kafka

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// Kafka's error codes are franz-go's kerr, their one home for the door
// and lib/kafkawire alike: kerr.X.Code is Kafka's ErrorCodes entry X
// (kerr names NOT_LEADER_OR_FOLLOWER NotLeaderForPartition).

// reasonCodes maps a Strata reason to the Kafka error a client acts on.
var reasonCodes = map[commonv1.Reason]int16{
	commonv1.Reason_REASON_NOT_LEADER:                            kerr.NotLeaderForPartition.Code,
	commonv1.Reason_REASON_FENCED_LEADER_EPOCH:                   kerr.FencedLeaderEpoch.Code,
	commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH:                  kerr.UnknownLeaderEpoch.Code,
	commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS:                   kerr.NotEnoughReplicas.Code,
	commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND:      kerr.NotEnoughReplicasAfterAppend.Code,
	commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE:                   kerr.OffsetOutOfRange.Code,
	commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION:            kerr.UnknownTopicOrPartition.Code,
	commonv1.Reason_REASON_CORRUPT_RECORD:                        kerr.CorruptMessage.Code,
	commonv1.Reason_REASON_RECORD_TOO_LARGE:                      kerr.MessageTooLarge.Code,
	commonv1.Reason_REASON_DUPLICATE_SEQUENCE:                    kerr.DuplicateSequenceNumber.Code,
	commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE:                 kerr.OutOfOrderSequenceNumber.Code,
	commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH:                kerr.InvalidProducerEpoch.Code,
	commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID:                   kerr.UnknownProducerID.Code,
	commonv1.Reason_REASON_FENCED_MEMBER_EPOCH:                   kerr.FencedMemberEpoch.Code,
	commonv1.Reason_REASON_UNKNOWN_MEMBER_ID:                     kerr.UnknownMemberID.Code,
	commonv1.Reason_REASON_NOT_COORDINATOR:                       kerr.NotCoordinator.Code,
	commonv1.Reason_REASON_COORDINATOR_LOADING:                   kerr.CoordinatorLoadInProgress.Code,
	commonv1.Reason_REASON_GROUP_NOT_EMPTY:                       kerr.NonEmptyGroup.Code,
	commonv1.Reason_REASON_NOT_CONTROLLER:                        kerr.NotController.Code,
	commonv1.Reason_REASON_INVALID_CONFIG:                        kerr.InvalidConfig.Code,
	commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS:                  kerr.TopicAlreadyExists.Code,
	commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR:            kerr.InvalidReplicationFactor.Code,
	commonv1.Reason_REASON_GROUP_ID_NOT_FOUND:                    kerr.GroupIDNotFound.Code,
	commonv1.Reason_REASON_REQUEST_TIMED_OUT:                     kerr.RequestTimedOut.Code,
	commonv1.Reason_REASON_INVALID_RECORD:                        kerr.InvalidRecord.Code,
	commonv1.Reason_REASON_INVALID_TIMESTAMP:                     kerr.InvalidTimestamp.Code,
	commonv1.Reason_REASON_GROUP_SUBSCRIBED_TO_TOPIC:             kerr.GroupSubscribedToTopic.Code,
	commonv1.Reason_REASON_POLICY_VIOLATION:                      kerr.PolicyViolation.Code,
	commonv1.Reason_REASON_UNRELEASED_INSTANCE_ID:                kerr.UnreleasedInstanceID.Code,
	commonv1.Reason_REASON_TOPIC_AUTHORIZATION_FAILED:            kerr.TopicAuthorizationFailed.Code,
	commonv1.Reason_REASON_GROUP_AUTHORIZATION_FAILED:            kerr.GroupAuthorizationFailed.Code,
	commonv1.Reason_REASON_CLUSTER_AUTHORIZATION_FAILED:          kerr.ClusterAuthorizationFailed.Code,
	commonv1.Reason_REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED: kerr.TransactionalIDAuthorizationFailed.Code,
	commonv1.Reason_REASON_TRANSACTION_COORDINATOR_FENCED:        kerr.TransactionCoordinatorFenced.Code,
	commonv1.Reason_REASON_PRODUCER_FENCED:                       kerr.ProducerFenced.Code,
	commonv1.Reason_REASON_INVALID_TXN_STATE:                     kerr.InvalidTxnState.Code,
	commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS:               kerr.ConcurrentTransactions.Code,
	commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING:           kerr.InvalidProducerIDMapping.Code,
	commonv1.Reason_REASON_INVALID_TRANSACTION_TIMEOUT:           kerr.InvalidTransactionTimeout.Code,
	commonv1.Reason_REASON_TRANSACTIONAL_ID_NOT_FOUND:            kerr.TransactionalIDNotFound.Code,
	commonv1.Reason_REASON_OPERATION_NOT_ATTEMPTED:               kerr.OperationNotAttempted.Code,
	commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT:                kerr.UnstableOffsetCommit.Code,
}

// plane says what a failed call was doing, for the codes without a
// reason: an unavailable leader and an unavailable coordinator are
// different retriable errors in Kafka.
type plane int

const (
	dataPlane plane = iota
	adminPlane
	groupPlane
)

// kafkaCode is err (a Connect error from an upstream, with or without an
// ErrorDetail) as a Kafka error code. nil is 0.
func kafkaCode(err error, p plane) int16 {
	if err == nil {
		return 0
	}
	return detailCode(apierr.AsDetail(err), p, err)
}

// detailCode is a per-partition ErrorDetail as a Kafka error code.
func detailCode(d *commonv1.ErrorDetail, p plane, cause error) int16 {
	if d == nil {
		return 0
	}
	if c, ok := reasonCodes[d.GetReason()]; ok {
		return c
	}
	switch connect.Code(d.GetCode()) {
	case connect.CodeNotFound:
		if p == groupPlane {
			return kerr.GroupIDNotFound.Code
		}
		return kerr.UnknownTopicOrPartition.Code
	case connect.CodeAlreadyExists:
		return kerr.TopicAlreadyExists.Code
	case connect.CodePermissionDenied:
		switch p {
		case groupPlane:
			return kerr.GroupAuthorizationFailed.Code
		case adminPlane:
			return kerr.ClusterAuthorizationFailed.Code
		}
		return kerr.TopicAuthorizationFailed.Code
	case connect.CodeUnauthenticated:
		return kerr.SaslAuthenticationFailed.Code
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return kerr.RequestTimedOut.Code
	case connect.CodeInvalidArgument:
		return kerr.InvalidRequest.Code
	case connect.CodeResourceExhausted:
		return kerr.MessageTooLarge.Code
	case connect.CodeUnavailable:
		switch p {
		case groupPlane:
			return kerr.CoordinatorNotAvailable.Code
		case adminPlane:
			return kerr.RequestTimedOut.Code
		}
		return kerr.LeaderNotAvailable.Code
	case connect.CodeUnknown, connect.CodeInternal:
		// A call that never reached its service (connection refused, reset)
		// is retriable for the client: the leader or coordinator may have
		// moved.
		if cause != nil && (errors.Is(cause, context.DeadlineExceeded) || isTransport(cause)) {
			switch p {
			case groupPlane:
				return kerr.CoordinatorNotAvailable.Code
			case adminPlane:
				return kerr.RequestTimedOut.Code
			}
			return kerr.NotLeaderForPartition.Code
		}
	}
	return kerr.UnknownServerError.Code
}

// isTransport reports an error that carries no ErrorDetail: the call
// failed before or outside the service's handler.
func isTransport(err error) bool { return apierr.DetailOf(err) == nil }

// message is err's one line for a response's ErrorMessage field, or nil.
func message(err error) *string {
	if err == nil {
		return nil
	}
	s := apierr.AsDetail(err).GetMessage()
	return &s
}
