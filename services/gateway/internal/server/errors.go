package server

import (
	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// errTopicNotFound is the NOT_FOUND for a topic the metadata does not have.
func errTopicNotFound(topic string) *connect.Error {
	return apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", topic)
}

// errNoMetadata is the UNAVAILABLE answered before the first snapshot.
func errNoMetadata() *connect.Error {
	return apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "the gateway has no metadata from the controller yet")
}

// retryableOnLeader reports whether a data-path error may go away by asking
// the (possibly new) leader again: leadership moved, our epoch is stale or
// ahead of the node, the ISR is short before the append, the partition has
// no leader for now, or the node could not be reached. NOT_ENOUGH_REPLICAS
// _AFTER_APPEND is not retried: the batch is in the log already, and the
// gateway does not produce idempotently, so a retry would duplicate it.
func retryableOnLeader(err error) bool {
	ed := apierr.DetailOf(err)
	switch ed.GetReason() {
	case commonv1.Reason_REASON_NOT_LEADER,
		commonv1.Reason_REASON_FENCED_LEADER_EPOCH,
		commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH,
		commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS:
		return true
	case commonv1.Reason_REASON_UNSPECIFIED:
		return connect.CodeOf(err) == connect.CodeUnavailable
	}
	return false
}
