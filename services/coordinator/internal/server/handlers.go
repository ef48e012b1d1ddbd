package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/coordinator/internal/assignor"
	"github.com/strata-mq/strata/services/coordinator/internal/classic"
	"github.com/strata-mq/strata/services/coordinator/internal/group"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// maxMetadataBytes bounds OffsetCommitPartition.metadata.
const maxMetadataBytes = 4096

// groupErr maps the state machine's errors to API errors.
func groupErr(err error) error {
	switch {
	case errors.Is(err, group.ErrUnknownMember):
		return apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID, "%v; rejoin with member epoch 0", err)
	case errors.Is(err, group.ErrFencedEpoch):
		return apierr.New(connect.CodeAborted, commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, "fenced: %v; the member must give up its partitions and rejoin", err)
	case errors.Is(err, group.ErrInvalid):
		return apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "%v", err)
	case errors.Is(err, group.ErrUnreleasedInstance):
		return apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_UNRELEASED_INSTANCE_ID, "%v", err)
	case errors.Is(err, group.ErrNotEmpty):
		return apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_GROUP_NOT_EMPTY, "the group has live members")
	}
	return connect.NewError(connect.CodeInternal, err)
}

// ConsumerGroupHeartbeat implements CoordinatorService.
func (c *Coordinator) ConsumerGroupHeartbeat(ctx context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	m := req.Msg
	if m.GetMemberId() == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "member_id is empty")
	}
	if err := c.authorizeGroup(ctx, acl.Read, m.GetGroupId()); err != nil { // security.go
		return nil, err
	}
	var re *regexp.Regexp
	if r := m.GetSubscribedTopicRegex(); r != "" {
		// The whole name must match, as Kafka's Pattern.matches.
		var err error
		if re, err = regexp.Compile("^(?:" + r + ")$"); err != nil {
			return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "subscribed_topic_regex %q does not compile: %v", r, err)
		}
	}
	og, err := c.acquire(ctx, m.GetGroupId())
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	if og.cg != nil {
		if len(og.cg.Members) > 0 {
			return nil, errClassicGroup(m.GetGroupId()) // classic.go
		}
		og.cg = nil // an empty classic group becomes a KIP-848 one, as in Kafka
	}
	defer c.traceRebalance(ctx, og)() // telemetry.go
	// The subscription: the names, and with a regular expression every
	// topic it matches now (resolved on each heartbeat, so topics created
	// later join); a keepalive without either keeps the last one.
	topics := m.GetSubscribedTopicNames()
	subscription := topics // what the group takes as sent: empty keeps the last one
	switch {
	case re != nil:
		topics = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(topics), c.meta.matching(ctx, re)...))))
		subscription = topics // resolved: it may match nothing now
	case len(topics) == 0:
		if mem := og.g.Members[m.GetMemberId()]; mem != nil {
			topics = mem.Topics
		}
	}
	parts := c.meta.partitionCounts(ctx, append(subscribed(og.g), topics...))
	resp, dirty, err := og.g.Heartbeat(group.Heartbeat{
		MemberID: m.GetMemberId(), Epoch: m.GetMemberEpoch(), InstanceID: m.GetInstanceId(), RackID: m.GetRackId(),
		ClientID: m.GetClientId(), ClientHost: req.Peer().Addr, RebalanceTimeoutMs: m.GetRebalanceTimeoutMs(), Assignor: m.GetServerAssignor(),
		Regex: m.GetSubscribedTopicRegex(), Topics: subscription, Hidden: c.hiddenTopics(ctx, topics), Owned: tps(m.GetOwnedPartitions()),
	}, parts, time.Now())
	if err != nil {
		return nil, groupErr(err)
	}
	if dirty {
		if err := c.saveLocked(ctx, og); err != nil {
			return nil, err
		}
	}
	out := &coordinatorv1.ConsumerGroupHeartbeatResponse{
		MemberId: m.GetMemberId(), MemberEpoch: resp.Epoch,
		HeartbeatIntervalMs: int32(c.cfg.heartbeatInterval() / time.Millisecond),
	}
	if resp.Changed {
		out.Assignment = &coordinatorv1.Assignment{Partitions: fromTPs(resp.Assignment)}
	}
	return connect.NewResponse(out), nil
}

// LeaveGroup implements CoordinatorService.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *connect.Request[coordinatorv1.LeaveGroupRequest]) (*connect.Response[coordinatorv1.LeaveGroupResponse], error) {
	if err := c.authorizeGroup(ctx, acl.Read, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, req.Msg.GetGroupId())
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	parts := c.meta.partitionCounts(ctx, subscribed(og.g))
	var removed []string
	for _, mi := range req.Msg.GetMembers() {
		if mi.GetMemberId() == "" && mi.GetInstanceId() == "" {
			continue
		}
		removed = append(removed, og.g.Remove(parts, mi.GetMemberId(), mi.GetInstanceId())...)
	}
	if len(removed) == 0 {
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID, "no such member in group %q", req.Msg.GetGroupId())
	}
	if err := c.saveLocked(ctx, og); err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordinatorv1.LeaveGroupResponse{RemovedMemberIds: removed}), nil
}

// OffsetCommit implements CoordinatorService.
func (c *Coordinator) OffsetCommit(ctx context.Context, req *connect.Request[coordinatorv1.OffsetCommitRequest]) (*connect.Response[coordinatorv1.OffsetCommitResponse], error) {
	m := req.Msg
	if err := c.authorizeGroup(ctx, acl.Read, m.GetGroupId()); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, m.GetGroupId())
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	denied := c.topicRefusals(ctx, acl.Read) // each topic committed needs read
	list := make([]group.CommitPartition, len(m.GetPartitions()))
	for i, p := range m.GetPartitions() {
		list[i] = group.CommitPartition{TP: group.TP{Topic: p.GetTopic(), Partition: p.GetPartition()}, Epoch: p.GetMemberEpoch()}
	}
	var refused []error
	if og.cg != nil {
		// A classic member's commit: checked against the generation
		// (classic.go), as Kafka's validateOffsetCommit.
		if code := og.cg.CheckCommit(m.GetMemberId(), m.GetMemberEpoch(), time.Now()); code != classic.ErrNone {
			return nil, classicCommitErr(code)
		}
		refused = make([]error, len(list))
	} else if refused, err = og.g.CheckCommit(m.GetMemberId(), m.GetMemberEpoch(), list); err != nil {
		return nil, groupErr(err)
	}
	out := &coordinatorv1.OffsetCommitResponse{}
	var offs []offsetstore.Offset
	for i, p := range m.GetPartitions() {
		r := &coordinatorv1.OffsetCommitPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		switch d := denied.of(p.GetTopic()); {
		case d != nil:
			r.Error = d
		case p.GetCommittedOffset() < 0:
			r.Error = apierr.Detail(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "committed offset %d is negative", p.GetCommittedOffset())
		case len(p.GetMetadata()) > maxMetadataBytes:
			r.Error = apierr.Detail(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "metadata is longer than %d bytes", maxMetadataBytes)
		case refused[i] != nil:
			r.Error = apierr.Detail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, "commit refused: %v", refused[i])
		default:
			offs = append(offs, offsetstore.Offset{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: p.GetCommittedOffset(),
				LeaderEpoch: p.GetCommittedLeaderEpoch(), Metadata: p.GetMetadata()})
		}
		out.Partitions = append(out.Partitions, r)
	}
	if len(offs) > 0 {
		if err := c.fenceErr(ctx, og, c.tracedCommit(ctx, og, offs)); err != nil { // telemetry.go
			return nil, err
		}
	}
	return connect.NewResponse(out), nil
}

// OffsetFetch implements CoordinatorService.
func (c *Coordinator) OffsetFetch(ctx context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	// Describe on the group, and on each topic named; asked for every
	// committed offset, the topics the caller may not describe are left
	// out, as Kafka does.
	if err := c.authorizeGroup(ctx, acl.Describe, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	var named []string
	for _, t := range req.Msg.GetTopics() {
		named = append(named, t.GetTopic())
	}
	if err := c.authorizeTopics(ctx, acl.Describe, named); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, req.Msg.GetGroupId())
	if err != nil {
		return nil, err
	}
	og.mu.Unlock()
	all, err := c.store.FetchOffsets(ctx, req.Msg.GetGroupId())
	if err != nil {
		return nil, errDatabase(err)
	}
	byTP := map[group.TP]offsetstore.Offset{}
	for _, o := range all {
		byTP[group.TP{Topic: o.Topic, Partition: o.Partition}] = o
	}
	// require_stable (KIP-447): a partition with offsets staged by an
	// ongoing transaction is not answered until the transaction ends.
	unstable := map[group.TP]bool{}
	if req.Msg.GetRequireStable() {
		staged, err := c.store.UnstableTxnOffsets(ctx, req.Msg.GetGroupId())
		if err != nil {
			return nil, errDatabase(err)
		}
		for _, o := range staged {
			unstable[group.TP{Topic: o.Topic, Partition: o.Partition}] = true
		}
	}
	out := &coordinatorv1.OffsetFetchResponse{}
	conv := func(tp group.TP) *coordinatorv1.CommittedOffset {
		if unstable[tp] {
			return &coordinatorv1.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: -1, CommittedLeaderEpoch: -1, CommitTimeMs: -1,
				Error: &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT,
					Message: fmt.Sprintf("a transaction has offsets of %s-%d staged for group %s; retry once it ends", tp.Topic, tp.Partition, req.Msg.GetGroupId())}}
		}
		o, ok := byTP[tp]
		if !ok {
			return &coordinatorv1.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: -1, CommittedLeaderEpoch: -1, CommitTimeMs: -1}
		}
		return &coordinatorv1.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: o.Offset,
			CommittedLeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommitTimeMs: o.CommitTime.UnixMilli()}
	}
	if len(req.Msg.GetTopics()) == 0 {
		hidden := c.topicRefusals(ctx, acl.Describe)
		for _, o := range all {
			if hidden.of(o.Topic) == nil {
				out.Offsets = append(out.Offsets, conv(group.TP{Topic: o.Topic, Partition: o.Partition}))
			}
		}
	} else {
		for _, t := range req.Msg.GetTopics() {
			parts := t.GetPartitions()
			if len(parts) == 0 {
				for _, o := range all {
					if o.Topic == t.GetTopic() {
						parts = append(parts, o.Partition)
					}
				}
			}
			for _, p := range parts {
				out.Offsets = append(out.Offsets, conv(group.TP{Topic: t.GetTopic(), Partition: p}))
			}
		}
	}
	return connect.NewResponse(out), nil
}

func stateOf(s string) coordinatorv1.GroupState {
	switch s {
	case group.StateStable:
		return coordinatorv1.GroupState_GROUP_STATE_STABLE
	case group.StateReconciling:
		return coordinatorv1.GroupState_GROUP_STATE_RECONCILING
	}
	return coordinatorv1.GroupState_GROUP_STATE_EMPTY
}

// ListGroups implements CoordinatorService: any instance answers from the
// database. The state of a group owned elsewhere is as its owner last
// saved it.
func (c *Coordinator) ListGroups(ctx context.Context, req *connect.Request[coordinatorv1.ListGroupsRequest]) (*connect.Response[coordinatorv1.ListGroupsResponse], error) {
	list, err := c.store.ListGroups(ctx)
	if err != nil {
		return nil, errDatabase(err)
	}
	want := map[coordinatorv1.GroupState]bool{}
	for _, s := range req.Msg.GetStates() {
		want[s] = true
	}
	out := &coordinatorv1.ListGroupsResponse{}
	for _, g := range list {
		st, n, pt := stateOf(g.State), int32(g.MemberCount), g.ProtocolType
		c.mu.Lock()
		og := c.groups[g.GroupID]
		c.mu.Unlock()
		if og != nil {
			og.mu.Lock()
			if !og.dropped {
				st, n = stateOf(og.g.State()), int32(len(og.g.Members))
				pt = ""
				if og.cg != nil {
					st, n, pt = stateOf(classicState(og.cg.State)), int32(len(og.cg.Members)), og.cg.ProtocolType
				}
			}
			og.mu.Unlock()
		}
		if len(want) > 0 && !want[st] || !c.guard.Allowed(ctx, acl.Describe, acl.Group, g.GroupID) {
			continue
		}
		out.Groups = append(out.Groups, &coordinatorv1.GroupListing{GroupId: g.GroupID, State: st, MemberCount: n, ProtocolType: pt})
	}
	return connect.NewResponse(out), nil
}

// exists reports whether the group has state or offsets in the database.
func (c *Coordinator) exists(ctx context.Context, og *owned) (bool, error) {
	if len(og.g.Members)+og.classicMembers() > 0 {
		return true, nil
	}
	if _, ok, err := c.store.LoadGroup(ctx, og.fence.GroupID); err != nil || ok {
		return ok, err
	}
	offs, err := c.store.FetchOffsets(ctx, og.fence.GroupID)
	return len(offs) > 0, err
}

// DescribeGroup implements CoordinatorService.
func (c *Coordinator) DescribeGroup(ctx context.Context, req *connect.Request[coordinatorv1.DescribeGroupRequest]) (*connect.Response[coordinatorv1.DescribeGroupResponse], error) {
	id := req.Msg.GetGroupId()
	if err := c.authorizeGroup(ctx, acl.Describe, id); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	ok, err := c.exists(ctx, og)
	if err != nil {
		og.mu.Unlock()
		return nil, errDatabase(err)
	}
	if !ok {
		og.mu.Unlock()
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "group %q does not exist", id)
	}
	if og.cg != nil {
		d := describeClassic(id, c.id, og.cg) // classic.go
		og.mu.Unlock()
		rows, err := c.lagRows(ctx, id, nil, nil)
		if err != nil {
			return nil, err
		}
		d.Partitions = rows
		return connect.NewResponse(&coordinatorv1.DescribeGroupResponse{Group: c.guard.DescribableGroup(ctx, d)}), nil
	}
	g := og.g
	d := &coordinatorv1.GroupDescription{GroupId: id, State: stateOf(g.State()), GroupEpoch: g.Epoch, AssignmentEpoch: g.AssignmentEpoch,
		Assignor: g.AssignorName(), CoordinatorId: c.id}
	owners := map[group.TP]string{}
	for _, m := range g.Members {
		d.Members = append(d.Members, &coordinatorv1.GroupMember{
			MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost, RackId: m.RackID,
			MemberEpoch: m.Epoch, SubscribedTopicNames: m.Topics, SubscribedTopicRegex: m.Regex, RebalanceTimeoutMs: m.RebalanceTimeoutMs,
			Assignment:       &coordinatorv1.Assignment{Partitions: fromTPs(m.Partitions())},
			TargetAssignment: &coordinatorv1.Assignment{Partitions: fromTPs(g.Target[m.ID])},
		})
		for _, h := range m.Held {
			owners[h.TP] = m.ID
		}
	}
	topics := subscribed(g)
	og.mu.Unlock()
	sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberId < d.Members[j].MemberId })
	rows, err := c.lagRows(ctx, id, topics, owners)
	if err != nil {
		return nil, err
	}
	d.Partitions = rows
	return connect.NewResponse(&coordinatorv1.DescribeGroupResponse{Group: c.guard.DescribableGroup(ctx, d)}), nil
}

// lagRows computes the committed offset, high watermark and lag of every
// partition of topics and of every partition with a committed offset.
func (c *Coordinator) lagRows(ctx context.Context, id string, topics []string, owners map[group.TP]string) ([]*coordinatorv1.PartitionLag, error) {
	offs, err := c.store.FetchOffsets(ctx, id)
	if err != nil {
		return nil, errDatabase(err)
	}
	committed := map[group.TP]int64{}
	for _, o := range offs {
		committed[group.TP{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	}
	parts := map[string]map[int32]bool{}
	add := func(t string, p int32) {
		if parts[t] == nil {
			parts[t] = map[int32]bool{}
		}
		parts[t][p] = true
	}
	counts := c.meta.partitionCounts(ctx, topics)
	for _, t := range topics {
		for p := range counts[t] {
			add(t, p)
		}
	}
	for tp := range committed {
		add(tp.Topic, tp.Partition)
	}
	var rows []*coordinatorv1.PartitionLag
	for t, ps := range parts {
		list := make([]int32, 0, len(ps))
		for p := range ps {
			list = append(list, p)
		}
		hw := c.meta.listOffsets(ctx, t, list, storagev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		var start map[int32]offsetAnswer
		for _, p := range list {
			tp := group.TP{Topic: t, Partition: p}
			row := &coordinatorv1.PartitionLag{Topic: t, Partition: p, CommittedOffset: -1, LogEndOffset: -1, Lag: -1, MemberId: owners[tp]}
			if co, ok := committed[tp]; ok {
				row.CommittedOffset = co
			}
			if a := hw[p]; a.err == nil {
				row.LogEndOffset = a.offset
				from := row.CommittedOffset
				if from < 0 {
					if start == nil {
						start = c.meta.listOffsets(ctx, t, list, storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0)
					}
					if s := start[p]; s.err == nil {
						from = s.offset
					}
				}
				if from >= 0 {
					row.Lag = max(row.LogEndOffset-from, 0)
				}
			}
			rows = append(rows, row)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return assignor.Less(group.TP{Topic: rows[i].Topic, Partition: rows[i].Partition}, group.TP{Topic: rows[j].Topic, Partition: rows[j].Partition})
	})
	return rows, nil
}

// ResetOffsets implements CoordinatorService.
func (c *Coordinator) ResetOffsets(ctx context.Context, req *connect.Request[coordinatorv1.ResetOffsetsRequest]) (*connect.Response[coordinatorv1.ResetOffsetsResponse], error) {
	m := req.Msg
	// Read on the group and on every topic reset, all checked before
	// anything moves.
	if err := c.authorizeGroup(ctx, acl.Read, m.GetGroupId()); err != nil {
		return nil, err
	}
	var names []string
	for _, t := range m.GetTopics() {
		names = append(names, t.GetTopic())
	}
	if err := c.authorizeTopics(ctx, acl.Read, names); err != nil {
		return nil, err
	}
	if m.GetSpec() == coordinatorv1.ResetSpec_RESET_SPEC_UNSPECIFIED {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "spec is unset")
	}
	if len(m.GetTopics()) == 0 {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "no topics to reset")
	}
	og, err := c.acquire(ctx, m.GetGroupId())
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	if n := len(og.g.Members) + og.classicMembers(); n > 0 {
		return nil, apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_GROUP_NOT_EMPTY,
			"group %q has %d live members; stop them before resetting offsets", m.GetGroupId(), n)
	}
	md := c.meta.lookup(ctx, names)
	prev, err := c.store.FetchOffsets(ctx, m.GetGroupId())
	if err != nil {
		return nil, errDatabase(err)
	}
	before := map[group.TP]int64{}
	for _, o := range prev {
		before[group.TP{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	}
	out := &coordinatorv1.ResetOffsetsResponse{}
	var offs []offsetstore.Offset
	for _, t := range m.GetTopics() {
		tm := md[t.GetTopic()]
		if tm == nil {
			return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", t.GetTopic())
		}
		parts := t.GetPartitions()
		if len(parts) == 0 {
			for p := range int32(len(tm.GetPartitions())) {
				parts = append(parts, p)
			}
		}
		lo := c.meta.listOffsets(ctx, t.GetTopic(), parts, storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0)
		hi := c.meta.listOffsets(ctx, t.GetTopic(), parts, storagev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		var at map[int32]offsetAnswer
		if m.GetSpec() == coordinatorv1.ResetSpec_RESET_SPEC_TIMESTAMP {
			at = c.meta.listOffsets(ctx, t.GetTopic(), parts, storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, m.GetTimestampMs())
		}
		for _, p := range parts {
			tp := group.TP{Topic: t.GetTopic(), Partition: p}
			r := &coordinatorv1.ResetOffsetsPartitionResult{Topic: tp.Topic, Partition: p, PreviousOffset: -1, NewOffset: -1}
			if v, ok := before[tp]; ok {
				r.PreviousOffset = v
			}
			l, h := lo[p], hi[p]
			switch {
			case l.err != nil:
				r.Error = l.err
			case h.err != nil:
				r.Error = h.err
			default:
				switch m.GetSpec() {
				case coordinatorv1.ResetSpec_RESET_SPEC_EARLIEST:
					r.NewOffset = l.offset
				case coordinatorv1.ResetSpec_RESET_SPEC_LATEST:
					r.NewOffset = h.offset
				case coordinatorv1.ResetSpec_RESET_SPEC_OFFSET:
					r.NewOffset = min(max(m.GetOffset(), l.offset), h.offset)
				case coordinatorv1.ResetSpec_RESET_SPEC_TIMESTAMP:
					if a := at[p]; a.err != nil {
						r.Error = a.err
					} else if a.offset < 0 {
						r.NewOffset = h.offset
					} else {
						r.NewOffset = min(max(a.offset, l.offset), h.offset)
					}
				}
			}
			if r.Error == nil {
				offs = append(offs, offsetstore.Offset{Topic: tp.Topic, Partition: p, Offset: r.NewOffset, LeaderEpoch: -1, Metadata: "reset"})
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	sort.Slice(out.Partitions, func(i, j int) bool {
		a, b := out.Partitions[i], out.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	if !m.GetDryRun() && len(offs) > 0 {
		if err := c.fenceErr(ctx, og, c.store.CommitOffsets(ctx, og.fence, offs)); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(out), nil
}

// DeleteGroup implements CoordinatorService.
func (c *Coordinator) DeleteGroup(ctx context.Context, req *connect.Request[coordinatorv1.DeleteGroupRequest]) (*connect.Response[coordinatorv1.DeleteGroupResponse], error) {
	id := req.Msg.GetGroupId()
	if err := c.authorizeGroup(ctx, acl.Delete, id); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	if n := len(og.g.Members) + og.classicMembers(); n > 0 {
		return nil, apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_GROUP_NOT_EMPTY,
			"group %q has %d live members; stop them before deleting it", id, n)
	}
	ok, err := c.exists(ctx, og)
	if err != nil {
		return nil, errDatabase(err)
	}
	if !ok {
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "group %q does not exist", id)
	}
	if err := c.fenceErr(ctx, og, c.store.DeleteGroup(ctx, og.fence)); err != nil {
		return nil, err
	}
	og.g, og.cg = group.New(id, c.cfg.SessionTimeout), nil
	c.lagMu.Lock()
	for k := range c.lag {
		if k.group == id {
			delete(c.lag, k)
		}
	}
	c.lagMu.Unlock()
	return connect.NewResponse(&coordinatorv1.DeleteGroupResponse{}), nil
}

// LocateGroup implements CoordinatorService.
func (c *Coordinator) LocateGroup(ctx context.Context, req *connect.Request[coordinatorv1.LocateGroupRequest]) (*connect.Response[coordinatorv1.LocateGroupResponse], error) {
	id := req.Msg.GetGroupId()
	if req.Msg.GetKeyType() == coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		// Describe on the transactional id, as Kafka's FindCoordinator.
		if err := c.authorizeTxn(ctx, acl.Describe, id); err != nil {
			return nil, err
		}
		return c.locateTxn(ctx, id, req.Msg.GetListener()) // txn.go
	}
	// The gateway's FindCoordinator asks under its service identity,
	// which passes; a user asking directly needs describe on the group.
	if err := c.authorizeGroup(ctx, acl.Describe, id); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, id)
	if err == nil {
		epoch := og.fence.OwnerEpoch
		og.mu.Unlock()
		return connect.NewResponse(&coordinatorv1.LocateGroupResponse{
			CoordinatorId: c.id, Address: c.listenerAddress(req.Msg.GetListener()), OwnerEpoch: epoch, ListenerResolved: true,
		}), nil
	}
	if apierr.ReasonOf(err) == commonv1.Reason_REASON_NOT_COORDINATOR {
		o, _, oerr := c.store.Owner(ctx, id)
		if oerr != nil {
			return nil, errDatabase(oerr)
		}
		return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: o.OwnerID, Address: o.OwnerAddress, OwnerEpoch: o.OwnerEpoch}), nil
	}
	return nil, err
}
