package server

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/services/coordinator/internal/classic"
	"github.com/strata-mq/strata/services/coordinator/internal/group"
)

// The classic group protocol (package classic) is served here, beside the
// KIP-848 groups: the coordinator stays the one home of every group's
// state, so a classic group survives a Kafka listener's restart and moves
// with its lease to another instance (docs/design/coordinator.md,
// "Classic groups").
//
// A group is one kind at a time: owned.cg is set while it is a classic
// group. A classic JoinGroup turns a KIP-848 group without members into
// a classic one, and a ConsumerGroupHeartbeat turns a classic group
// without members back.

// errClassicGroup refuses a KIP-848 heartbeat to a classic group with
// members, as Kafka's GROUP_ID_NOT_FOUND ("not a consumer group").
func errClassicGroup(id string) error {
	return apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "group %q is a classic group with members (JoinGroup/SyncGroup), not a consumer group", id)
}

// classicCommitErr is a classic member's refused commit as an API error.
func classicCommitErr(code int16) error {
	switch code {
	case classic.ErrUnknownMemberID:
		return apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID, "unknown member of the classic group; join again")
	case classic.ErrIllegalGeneration:
		return apierr.New(connect.CodeAborted, commonv1.Reason_REASON_ILLEGAL_GENERATION, "the generation is not the group's; join again")
	}
	return apierr.New(connect.CodeAborted, commonv1.Reason_REASON_REBALANCE_IN_PROGRESS, "the group is rebalancing; join again")
}

// classicMembers is the number of classic members; og.mu is held.
func (og *owned) classicMembers() int {
	if og.cg == nil {
		return 0
	}
	return len(og.cg.Members)
}

// describeClassic is a classic group's description, without partitions:
// the chosen protocol as the assignor, the generation as the group epoch,
// and each member's metadata and assignment as it sent them.
func describeClassic(id, coordID string, g *classic.Group) *coordinatorv1.GroupDescription {
	d := &coordinatorv1.GroupDescription{GroupId: id, State: stateOf(classicState(g.State)), GroupEpoch: g.Generation, AssignmentEpoch: g.Generation,
		Assignor: g.Protocol, CoordinatorId: coordID, ProtocolType: g.ProtocolType, ClassicState: g.State}
	for _, mid := range g.Order {
		m := g.Members[mid]
		gm := &coordinatorv1.GroupMember{MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
			MemberEpoch: g.Generation, RebalanceTimeoutMs: int32(m.RebalanceTimeout / time.Millisecond), ClassicAssignment: m.Assignment,
			ClassicMetadata: m.Metadata(g.Protocol)}
		d.Members = append(d.Members, gm)
	}
	return d
}

// classicState is a classic state as the store's and GroupState's
// three: a rebalancing group is reconciling.
func classicState(s string) string {
	switch s {
	case classic.StateEmpty:
		return group.StateEmpty
	case classic.StateStable:
		return group.StateStable
	}
	return group.StateReconciling
}

// classicGroup acquires group id for a classic call: its lock is held on
// return. A KIP-848 group without members becomes classic; one with
// members answers ok false (INCONSISTENT_GROUP_PROTOCOL, as Kafka for a
// JoinGroup to a consumer group it cannot take).
func (c *Coordinator) classicGroup(ctx context.Context, id string, create bool) (og *owned, ok bool, err error) {
	if err := c.authorizeGroup(ctx, acl.Read, id); err != nil { // security.go
		return nil, false, err
	}
	og, err = c.acquire(ctx, id)
	if err != nil {
		return nil, false, err
	}
	if og.cg == nil {
		if !create || len(og.g.Members) > 0 {
			return og, false, nil
		}
		og.cg = classic.New(id)
	}
	return og, true, nil
}

// wait parks the caller until og's classic group changes, its join
// deadline passes, or ctx ends; og.mu is held on entry and on return
// unless the group was dropped meanwhile (then an error, unlocked).
func (c *Coordinator) wait(ctx context.Context, og *owned) error {
	ch := og.cg.Changed()
	var timer <-chan time.Time
	if d := og.cg.Deadline(); !d.IsZero() {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		timer = t.C
	}
	og.mu.Unlock()
	resume := quota.Pause(ctx) // a wait, not handling (lib/quota, requests.go)
	select {
	case <-ctx.Done():
	case <-ch:
	case <-timer:
	}
	resume()
	og.mu.Lock()
	if og.dropped || og.cg == nil {
		og.mu.Unlock()
		return apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_COORDINATOR_LOADING, "group %q moved while the call waited; ask again", og.fence.GroupID)
	}
	if ctx.Err() != nil {
		og.mu.Unlock()
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	if err := c.tickClassicLocked(ctx, og, time.Now()); err != nil {
		og.mu.Unlock()
		return err
	}
	return nil
}

// tickClassicLocked moves og's classic group on to now (classic.Group.Tick:
// a join phase past its deadline ends, silent members are removed) and
// saves any change; og.mu is held. Both the expiry loop and a woken
// waiter call it.
func (c *Coordinator) tickClassicLocked(ctx context.Context, og *owned, now time.Time) error {
	gone, dirty := og.cg.Tick(now)
	if !dirty {
		return nil
	}
	if len(gone) > 0 {
		c.log.Info("classic members expired", "group", og.fence.GroupID, "members", gone, "generation", og.cg.Generation)
	}
	return c.saveLocked(ctx, og)
}

// ClassicJoinGroup implements CoordinatorService.
func (c *Coordinator) ClassicJoinGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicJoinGroupRequest]) (*connect.Response[coordinatorv1.ClassicJoinGroupResponse], error) {
	m := req.Msg
	og, ok, err := c.classicGroup(ctx, m.GetGroupId(), true)
	if err != nil {
		return nil, err
	}
	if !ok {
		og.mu.Unlock()
		return connect.NewResponse(&coordinatorv1.ClassicJoinGroupResponse{ErrorCode: int32(classic.ErrInconsistentGroupProtocol), MemberId: m.GetMemberId(), Generation: -1}), nil
	}
	j := classic.Join{
		MemberID: m.GetMemberId(), InstanceID: m.GetInstanceId(), ClientID: m.GetClientId(), ClientHost: m.GetClientHost(),
		ProtocolType: m.GetProtocolType(), SessionTimeout: time.Duration(m.GetSessionTimeoutMs()) * time.Millisecond,
		RebalanceTimeout: time.Duration(m.GetRebalanceTimeoutMs()) * time.Millisecond, RequireKnownMemberID: m.GetRequireKnownMemberId(),
	}
	for _, p := range m.GetProtocols() {
		j.Protocols = append(j.Protocols, classic.Protocol{Name: p.GetName(), Metadata: p.GetMetadata()})
	}
	res, id := og.cg.Join(j, uuid.NewString, time.Now()) // member ids are random UUIDs, as Kafka's
	mem := og.cg.Member(id)
	if res != nil && res.Error == classic.ErrInconsistentGroupProtocol && len(og.cg.Members) == 0 && og.cg.Generation == 0 {
		// Refused before the group ever had a member: it stays what it was.
		og.cg = nil
		og.mu.Unlock()
		return connect.NewResponse(joinResponse(res)), nil
	}
	if err := c.saveLocked(ctx, og); err != nil {
		og.mu.Unlock()
		return nil, err
	}
	for res == nil {
		if err := c.wait(ctx, og); err != nil {
			return nil, err
		}
		res = classic.TakeJoin(mem)
	}
	og.mu.Unlock()
	return connect.NewResponse(joinResponse(res)), nil
}

func joinResponse(res *classic.JoinResult) *coordinatorv1.ClassicJoinGroupResponse {
	out := &coordinatorv1.ClassicJoinGroupResponse{
		ErrorCode: int32(res.Error), Generation: res.Generation, ProtocolType: res.ProtocolType, ProtocolName: res.Protocol,
		LeaderId: res.Leader, MemberId: res.MemberID,
	}
	for _, jm := range res.Members {
		out.Members = append(out.Members, &coordinatorv1.ClassicJoinedMember{MemberId: jm.ID, InstanceId: jm.InstanceID, Metadata: jm.Metadata})
	}
	return out
}

// ClassicSyncGroup implements CoordinatorService.
func (c *Coordinator) ClassicSyncGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicSyncGroupRequest]) (*connect.Response[coordinatorv1.ClassicSyncGroupResponse], error) {
	m := req.Msg
	og, ok, err := c.classicGroup(ctx, m.GetGroupId(), false)
	if err != nil {
		return nil, err
	}
	if !ok {
		og.mu.Unlock()
		return connect.NewResponse(&coordinatorv1.ClassicSyncGroupResponse{ErrorCode: int32(classic.ErrUnknownMemberID)}), nil
	}
	s := classic.Sync{MemberID: m.GetMemberId(), InstanceID: m.GetInstanceId(), Generation: m.GetGeneration(), ProtocolType: m.GetProtocolType(), Protocol: m.GetProtocolName(),
		Assignments: map[string][]byte{}}
	for _, a := range m.GetAssignments() {
		s.Assignments[a.GetMemberId()] = a.GetAssignment()
	}
	mem := og.cg.Member(m.GetMemberId())
	res := og.cg.Sync(s, time.Now())
	if res == nil || res.Error == classic.ErrNone {
		if err := c.saveLocked(ctx, og); err != nil {
			og.mu.Unlock()
			return nil, err
		}
	}
	for res == nil {
		if err := c.wait(ctx, og); err != nil {
			return nil, err
		}
		res = classic.TakeSync(mem)
	}
	og.mu.Unlock()
	return connect.NewResponse(&coordinatorv1.ClassicSyncGroupResponse{ErrorCode: int32(res.Error), ProtocolType: res.ProtocolType,
		ProtocolName: res.Protocol, Assignment: res.Assignment}), nil
}

// ClassicHeartbeat implements CoordinatorService.
func (c *Coordinator) ClassicHeartbeat(ctx context.Context, req *connect.Request[coordinatorv1.ClassicHeartbeatRequest]) (*connect.Response[coordinatorv1.ClassicHeartbeatResponse], error) {
	og, ok, err := c.classicGroup(ctx, req.Msg.GetGroupId(), false)
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	code := classic.ErrUnknownMemberID
	if ok {
		code = og.cg.Heartbeat(req.Msg.GetMemberId(), req.Msg.GetInstanceId(), req.Msg.GetGeneration(), time.Now())
	}
	return connect.NewResponse(&coordinatorv1.ClassicHeartbeatResponse{ErrorCode: int32(code)}), nil
}

// ClassicLeaveGroup implements CoordinatorService.
func (c *Coordinator) ClassicLeaveGroup(ctx context.Context, req *connect.Request[coordinatorv1.ClassicLeaveGroupRequest]) (*connect.Response[coordinatorv1.ClassicLeaveGroupResponse], error) {
	og, ok, err := c.classicGroup(ctx, req.Msg.GetGroupId(), false)
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	out := &coordinatorv1.ClassicLeaveGroupResponse{}
	left := false
	instances := req.Msg.GetInstanceIds()
	for i, id := range req.Msg.GetMemberIds() {
		instance := ""
		if i < len(instances) {
			instance = instances[i]
		}
		code := classic.ErrUnknownMemberID
		if ok {
			code = og.cg.Leave(id, instance, time.Now())
		}
		left = left || code == classic.ErrNone
		out.ErrorCodes = append(out.ErrorCodes, int32(code))
	}
	if left {
		if err := c.saveLocked(ctx, og); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(out), nil
}
