package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), passed to the coordinator that owns the group, which runs
// it as Kafka's group coordinator does (services/coordinator, package
// classic): any protocol type, the protocol every member supports chosen
// by the members' preferences, a leader that gets every member's
// metadata and whose SyncGroup assignment each member receives unchanged.
// The bridge keeps no group state: a JoinGroup or SyncGroup waits in the
// coordinator's call, and any bridge may serve any member. Static members
// (KIP-345, group.instance.id) are passed on with their instance ids, in
// JoinGroup, SyncGroup and Heartbeat from v3 and in LeaveGroup's members.

// classicCode is a failed classic call as a Kafka error code.
func classicCode(err error) int16 {
	switch apierr.AsDetail(err).GetReason() {
	case commonv1.Reason_REASON_ILLEGAL_GENERATION:
		return kerr.IllegalGeneration.Code
	case commonv1.Reason_REASON_REBALANCE_IN_PROGRESS:
		return kerr.RebalanceInProgress.Code
	}
	return kafkaCode(err, groupPlane)
}
