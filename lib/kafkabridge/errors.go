package kafkabridge

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// Kafka error codes the bridge answers with (Kafka's ErrorCodes table).
const (
	errNone                       int16 = 0
	errUnknownServer              int16 = -1
	errOffsetOutOfRange           int16 = 1
	errCorruptMessage             int16 = 2
	errUnknownTopicOrPartition    int16 = 3
	errLeaderNotAvailable         int16 = 5
	errNotLeaderOrFollower        int16 = 6
	errRequestTimedOut            int16 = 7
	errMessageTooLarge            int16 = 10
	errCoordinatorLoadInProgress  int16 = 14
	errCoordinatorNotAvailable    int16 = 15
	errNotCoordinator             int16 = 16
	errInvalidTopic               int16 = 17
	errNotEnoughReplicas          int16 = 19
	errNotEnoughReplicasAfterApp  int16 = 20
	errInvalidRequiredAcks        int16 = 21
	errIllegalGeneration          int16 = 22
	errInconsistentGroupProtocol  int16 = 23
	errUnknownMemberID            int16 = 25
	errRebalanceInProgress        int16 = 27
	errTopicAuthorizationFailed   int16 = 29
	errGroupAuthorizationFailed   int16 = 30
	errClusterAuthorizationFailed int16 = 31
	errUnsupportedVersion         int16 = 35
	errTopicAlreadyExists         int16 = 36
	errInvalidPartitions          int16 = 37
	errInvalidReplicationFactor   int16 = 38
	errInvalidRequest             int16 = 42
	errInvalidConfig              int16 = 40
	errNotController              int16 = 41
	errPolicyViolation            int16 = 44
	errOutOfOrderSequence         int16 = 45
	errDuplicateSequence          int16 = 46
	errInvalidProducerEpoch       int16 = 47
	errSASLAuthenticationFailed   int16 = 58
	errUnknownProducerID          int16 = 59
	errNonEmptyGroup              int16 = 68
	errGroupIDNotFound            int16 = 69
	errGroupSubscribedToTopic     int16 = 86
	errFencedLeaderEpoch          int16 = 74
	errUnknownLeaderEpoch         int16 = 75
	errUnknownTopicID             int16 = 100
	errFencedMemberEpoch          int16 = 110
	errUnreleasedInstanceID       int16 = 111
	errStaleMemberEpoch           int16 = 113
	errTransactionalIDAuthFailed  int16 = 53
	errInvalidReplicaAssignment   int16 = 39
	errInvalidTimestamp           int16 = 32
	errInvalidRecord              int16 = 87
	errReassignmentInProgress     int16 = 60
	errPreferredLeaderNotAvail    int16 = 80
	errEligibleLeadersNotAvail    int16 = 83
	errElectionNotNeeded          int16 = 84
	errNoReassignmentInProgress   int16 = 85
)

// reasonCodes maps a Strata reason to the Kafka error a client acts on.
var reasonCodes = map[commonv1.Reason]int16{
	commonv1.Reason_REASON_NOT_LEADER:                       errNotLeaderOrFollower,
	commonv1.Reason_REASON_FENCED_LEADER_EPOCH:              errFencedLeaderEpoch,
	commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH:             errUnknownLeaderEpoch,
	commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS:              errNotEnoughReplicas,
	commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND: errNotEnoughReplicasAfterApp,
	commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE:              errOffsetOutOfRange,
	commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION:       errUnknownTopicOrPartition,
	commonv1.Reason_REASON_CORRUPT_RECORD:                   errCorruptMessage,
	commonv1.Reason_REASON_RECORD_TOO_LARGE:                 errMessageTooLarge,
	commonv1.Reason_REASON_DUPLICATE_SEQUENCE:               errDuplicateSequence,
	commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE:            errOutOfOrderSequence,
	commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH:           errInvalidProducerEpoch,
	commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID:              errUnknownProducerID,
	commonv1.Reason_REASON_FENCED_MEMBER_EPOCH:              errFencedMemberEpoch,
	commonv1.Reason_REASON_UNKNOWN_MEMBER_ID:                errUnknownMemberID,
	commonv1.Reason_REASON_NOT_COORDINATOR:                  errNotCoordinator,
	commonv1.Reason_REASON_COORDINATOR_LOADING:              errCoordinatorLoadInProgress,
	commonv1.Reason_REASON_GROUP_NOT_EMPTY:                  errNonEmptyGroup,
	commonv1.Reason_REASON_NOT_CONTROLLER:                   errNotController,
	commonv1.Reason_REASON_INVALID_CONFIG:                   errInvalidConfig,
	commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS:             errTopicAlreadyExists,
	commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR:       errInvalidReplicationFactor,
	commonv1.Reason_REASON_GROUP_ID_NOT_FOUND:               errGroupIDNotFound,
	commonv1.Reason_REASON_REQUEST_TIMED_OUT:                errRequestTimedOut,
	commonv1.Reason_REASON_INVALID_RECORD:                   errInvalidRecord,
	commonv1.Reason_REASON_INVALID_TIMESTAMP:                errInvalidTimestamp,
	commonv1.Reason_REASON_GROUP_SUBSCRIBED_TO_TOPIC:        errGroupSubscribedToTopic,
	commonv1.Reason_REASON_POLICY_VIOLATION:                 errPolicyViolation,
	commonv1.Reason_REASON_UNRELEASED_INSTANCE_ID:           errUnreleasedInstanceID,
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
// ErrorDetail) as a Kafka error code. nil is errNone.
func kafkaCode(err error, p plane) int16 {
	if err == nil {
		return errNone
	}
	if c, ok := deniedCode(err); ok {
		return c
	}
	return detailCode(apierr.AsDetail(err), p, err)
}

// detailCode is a per-partition ErrorDetail as a Kafka error code.
func detailCode(d *commonv1.ErrorDetail, p plane, cause error) int16 {
	if d == nil {
		return errNone
	}
	if c, ok := reasonCodes[d.GetReason()]; ok {
		return c
	}
	switch connect.Code(d.GetCode()) {
	case connect.CodeNotFound:
		if p == groupPlane {
			return errGroupIDNotFound
		}
		return errUnknownTopicOrPartition
	case connect.CodeAlreadyExists:
		return errTopicAlreadyExists
	case connect.CodePermissionDenied:
		switch p {
		case groupPlane:
			return errGroupAuthorizationFailed
		case adminPlane:
			return errClusterAuthorizationFailed
		}
		return errTopicAuthorizationFailed
	case connect.CodeUnauthenticated:
		return errSASLAuthenticationFailed
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return errRequestTimedOut
	case connect.CodeInvalidArgument:
		return errInvalidRequest
	case connect.CodeResourceExhausted:
		return errMessageTooLarge
	case connect.CodeUnavailable:
		switch p {
		case groupPlane:
			return errCoordinatorNotAvailable
		case adminPlane:
			return errRequestTimedOut
		}
		return errLeaderNotAvailable
	case connect.CodeUnknown, connect.CodeInternal:
		// A call that never reached its service (connection refused, reset)
		// is retriable for the client: the leader or coordinator may have
		// moved.
		if cause != nil && (errors.Is(cause, context.DeadlineExceeded) || isTransport(cause)) {
			switch p {
			case groupPlane:
				return errCoordinatorNotAvailable
			case adminPlane:
				return errRequestTimedOut
			}
			return errNotLeaderOrFollower
		}
	}
	return errUnknownServer
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
