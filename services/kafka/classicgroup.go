package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// joinGroup answers a JoinGroup; clientID and host are the connection's,
// for DescribeGroups.
func (b *Bridge) joinGroup(ctx context.Context, version int16, clientID, host string, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.MemberID = -1, req.MemberID
	creq := &coordinatorv1.ClassicJoinGroupRequest{
		GroupId: req.Group, MemberId: req.MemberID, ProtocolType: req.ProtocolType,
		SessionTimeoutMs: req.SessionTimeoutMillis, RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		RequireKnownMemberId: version >= 4, ClientId: clientID, ClientHost: host,
	}
	if version == 0 || creq.RebalanceTimeoutMs <= 0 {
		creq.RebalanceTimeoutMs = req.SessionTimeoutMillis
	}
	if req.InstanceID != nil {
		creq.InstanceId = *req.InstanceID
	}
	for _, p := range req.Protocols {
		creq.Protocols = append(creq.Protocols, &coordinatorv1.ClassicProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicJoinGroupResponse]
	if err == nil {
		out, err = c.ClassicJoinGroup(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	m := out.Msg
	resp.ErrorCode, resp.Generation, resp.MemberID, resp.LeaderID = int16(m.GetErrorCode()), m.GetGeneration(), m.GetMemberId(), m.GetLeaderId()
	if resp.ErrorCode == 0 {
		pt, pn := m.GetProtocolType(), m.GetProtocolName()
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	for _, jm := range m.GetMembers() {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = jm.GetMemberId(), jm.GetMetadata()
		if jm.GetInstanceId() != "" {
			iid := jm.GetInstanceId()
			rm.InstanceID = &iid
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}

func (b *Bridge) syncGroup(ctx context.Context, version int16, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSyncGroupResponse()
	creq := &coordinatorv1.ClassicSyncGroupRequest{GroupId: req.Group, MemberId: req.MemberID, Generation: req.Generation}
	if req.ProtocolType != nil {
		creq.ProtocolType = *req.ProtocolType
	}
	if req.Protocol != nil {
		creq.ProtocolName = *req.Protocol
	}
	if req.InstanceID != nil {
		creq.InstanceId = *req.InstanceID
	}
	for _, a := range req.GroupAssignment {
		creq.Assignments = append(creq.Assignments, &coordinatorv1.ClassicAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicSyncGroupResponse]
	if err == nil {
		out, err = c.ClassicSyncGroup(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	m := out.Msg
	resp.ErrorCode, resp.MemberAssignment = int16(m.GetErrorCode()), m.GetAssignment()
	if resp.ErrorCode == 0 {
		pt, pn := m.GetProtocolType(), m.GetProtocolName()
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	return resp, nil
}

func (b *Bridge) heartbeat(ctx context.Context, version int16, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrHeartbeatResponse()
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicHeartbeatResponse]
	if err == nil {
		hreq := &coordinatorv1.ClassicHeartbeatRequest{GroupId: req.Group, MemberId: req.MemberID, Generation: req.Generation}
		if req.InstanceID != nil {
			hreq.InstanceId = *req.InstanceID
		}
		out, err = c.ClassicHeartbeat(ctx, connect.NewRequest(hreq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.Msg.GetErrorCode())
	return resp, nil
}

func (b *Bridge) leaveGroup(ctx context.Context, version int16, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrLeaveGroupResponse()
	members := req.Members
	if version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	creq := &coordinatorv1.ClassicLeaveGroupRequest{GroupId: req.Group}
	static := false
	for _, lm := range members {
		instance := ""
		if lm.InstanceID != nil {
			instance, static = *lm.InstanceID, true
		}
		creq.MemberIds = append(creq.MemberIds, lm.MemberID)
		creq.InstanceIds = append(creq.InstanceIds, instance)
	}
	if !static {
		creq.InstanceIds = nil
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicLeaveGroupResponse]
	if err == nil {
		out, err = c.ClassicLeaveGroup(ctx, connect.NewRequest(creq))
	}
	if err == nil && len(out.Msg.GetErrorCodes()) != len(members) {
		err = connect.NewError(connect.CodeInternal, nil)
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	for i, lm := range members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = lm.MemberID, lm.InstanceID, int16(out.Msg.GetErrorCodes()[i])
		resp.Members = append(resp.Members, rm)
	}
	if version < 3 && len(resp.Members) == 1 {
		resp.ErrorCode = resp.Members[0].ErrorCode
	}
	return resp, nil
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
