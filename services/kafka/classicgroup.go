package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
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

// The classic calls need read on the group, as Kafka's JoinGroup,
// SyncGroup, Heartbeat and LeaveGroup.

func (w guardedCoordinator) ClassicJoinGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicJoinGroupRequest]) (*connect.Response[coordinatorv1.ClassicJoinGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.CoordinatorServiceClient.ClassicJoinGroup(ctx, req)
}

func (w guardedCoordinator) ClassicSyncGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicSyncGroupRequest]) (*connect.Response[coordinatorv1.ClassicSyncGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.CoordinatorServiceClient.ClassicSyncGroup(ctx, req)
}

func (w guardedCoordinator) ClassicHeartbeat(ctx context.Context, req *connect.Request[coordinatorv1.ClassicHeartbeatRequest]) (*connect.Response[coordinatorv1.ClassicHeartbeatResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.CoordinatorServiceClient.ClassicHeartbeat(ctx, req)
}

func (w guardedCoordinator) ClassicLeaveGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicLeaveGroupRequest]) (*connect.Response[coordinatorv1.ClassicLeaveGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.CoordinatorServiceClient.ClassicLeaveGroup(ctx, req)
}
