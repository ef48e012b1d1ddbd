package kafkabridge

import (
	"context"
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/serve"
)

// Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) bridged onto the coordinator's KIP-848 groups, in which the
// coordinator assigns:
//
//   - JoinGroup sends a ConsumerGroupHeartbeat for the member (epoch 0 for
//     a new one) with the topics and owned partitions of its consumer
//     protocol metadata, and answers with the member's epoch as the
//     generation. The member is never the leader, so it runs no
//     assignor: the coordinator's assignment is the one that counts.
//   - SyncGroup heartbeats again and answers with the member's assignment
//     from the coordinator, which only ever holds partitions no other
//     member still owns.
//   - Heartbeat heartbeats for the member; when the coordinator's
//     assignment differs from what the member owns, it answers
//     REBALANCE_IN_PROGRESS, so the member rejoins (an eager one after
//     giving up everything, a cooperative one reporting what it keeps)
//     and gets its new assignment at the next SyncGroup.
//   - LeaveGroup leaves with epoch -1; OffsetCommit commits with the
//     member's current coordinator epoch, so the coordinator's fencing
//     of zombies applies to Kafka clients too.
//
// The member state kept here (the coordinator epoch behind a generation,
// what the member owns) lives in the bridge the client talks to:
// FindCoordinator names one broker per group (the owning coordinator's
// Kafka listener, or, when it has none, a storage node chosen by
// the group id), so a group's classic members meet in one bridge. When
// that bridge restarts, its members get UNKNOWN_MEMBER_ID and join again;
// the coordinator expires their old identities after its session timeout.

// classicMember is one classic protocol member as the bridge tracks it.
type classicMember struct {
	id         string // member id, also the coordinator's
	instanceID string
	clientID   string
	topics     []string
	rebalance  int32
	// epoch is the member's coordinator epoch, the last one the
	// coordinator answered; generation is the epoch the member was told
	// at its last JoinGroup, which it sends back.
	epoch, generation int32
	// owned is what the member owns: its last SyncGroup's assignment, or
	// what its JoinGroup metadata reported.
	owned []*commonv1.TopicPartitions
	// target is the coordinator's latest assignment for the member.
	target []*commonv1.TopicPartitions
	// protocol is the assignor name the member was answered with.
	protocol string
}

// classicGroups holds every classic member this bridge serves.
type classicGroups struct {
	mu      sync.Mutex
	members map[string]map[string]*classicMember // group -> member id -> member

	coordMu sync.Mutex
	coords  map[string]coordinatorv1connect.CoordinatorServiceClient // by address
}

func newClassicGroups() *classicGroups {
	return &classicGroups{members: map[string]map[string]*classicMember{}, coords: map[string]coordinatorv1connect.CoordinatorServiceClient{}}
}

func (g *classicGroups) get(group, id string) *classicMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.members[group][id]
}

func (g *classicGroups) put(group string, m *classicMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members[group] == nil {
		g.members[group] = map[string]*classicMember{}
	}
	g.members[group][m.id] = m
}

func (g *classicGroups) drop(group, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.members[group], id)
}

// groupAPIs are the group APIs every bridge serves.
func (b *Bridge) groupAPIs() []kafkawire.API {
	return []kafkawire.API{
		{Key: kmsg.FindCoordinator, MinVersion: 0, MaxVersion: 4, Handle: handler(b.findCoordinator)},
		{Key: kmsg.JoinGroup, MinVersion: 0, MaxVersion: 7, Handle: handler(b.joinGroup)},
		{Key: kmsg.SyncGroup, MinVersion: 0, MaxVersion: 5, Handle: handler(b.syncGroup)},
		{Key: kmsg.Heartbeat, MinVersion: 0, MaxVersion: 4, Handle: handler(b.heartbeat)},
		{Key: kmsg.LeaveGroup, MinVersion: 0, MaxVersion: 4, Handle: handler(b.leaveGroup)},
		{Key: kmsg.OffsetCommit, MinVersion: 0, MaxVersion: 9, Handle: handler(b.offsetCommit)},
		{Key: kmsg.OffsetFetch, MinVersion: 0, MaxVersion: 7, Handle: handler(b.offsetFetch)},
		{Key: kmsg.ListGroups, MinVersion: 0, MaxVersion: 4, Handle: handler(b.listGroups)},
		{Key: kmsg.DescribeGroups, MinVersion: 0, MaxVersion: 5, Handle: handler(b.describeGroups)},
		{Key: kmsg.DeleteGroups, MinVersion: 0, MaxVersion: 2, Handle: handler(b.deleteGroups)},
	}
}

// coordinator returns a client of the coordinator instance that owns
// group, found through the gateway.
func (b *Bridge) coordinator(ctx context.Context, group string) (coordinatorv1connect.CoordinatorServiceClient, error) {
	loc, err := b.cfg.Gateway.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: group}))
	if err != nil {
		return nil, err
	}
	addr := loc.Msg.GetAddress()
	g := b.groups
	g.coordMu.Lock()
	defer g.coordMu.Unlock()
	c := g.coords[addr]
	if c == nil {
		c = coordinatorv1connect.NewCoordinatorServiceClient(b.cfg.HTTPClient, addr, b.cfg.ClientOptions...)
		if b.cfg.Guard != nil {
			c = guardedCoordinator{CoordinatorServiceClient: c, g: b.cfg.Guard}
		}
		g.coords[addr] = c
	}
	return c, nil
}

// groupBroker is the broker FindCoordinator names for a key when its
// coordinator has no Kafka listener: one of the live brokers, chosen by a
// hash of the key, so every bridge answers alike and a group's members
// meet in one bridge.
func groupBroker(bs []broker, key string) (broker, bool) {
	if len(bs) == 0 {
		return broker{}, false
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return bs[h.Sum32()%uint32(len(bs))], true
}

// groupCoordinator is the broker FindCoordinator names for group: the
// Kafka listener of the coordinator instance that owns it, as the gateway
// locates it, or else groupBroker's storage node.
func (b *Bridge) groupCoordinator(ctx context.Context, bs []broker, group string) (broker, bool) {
	loc, err := b.cfg.Gateway.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: group, Listener: serve.KafkaListenerName}))
	if err == nil {
		if br, ok := coordinatorBroker(loc.Msg.GetCoordinatorId(), loc.Msg.GetAddress(), bs); ok {
			return br, true
		}
	}
	return groupBroker(bs, group)
}

func (b *Bridge) findCoordinator(ctx context.Context, version int16, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	keys := req.CoordinatorKeys
	if version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	md, err := b.clusterMetadata(ctx, []string{})
	var bs []broker
	if err == nil {
		bs = brokers(md.GetNodes())
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID = key, -1
		switch {
		case req.CoordinatorType != 0:
			// Transaction coordinators: Strata has no transactions yet.
			c.ErrorCode = errUnsupportedVersion
		case b.cfg.Guard != nil && !b.cfg.Guard.Allowed(ctx, acl.Describe, acl.Group, key):
			// As Kafka: describe on the group, as for the Connect API's
			// FindCoordinator.
			c.ErrorCode = errGroupAuthorizationFailed
		default:
			if br, ok := b.groupCoordinator(ctx, bs, key); ok {
				c.NodeID, c.Host, c.Port = br.id, br.host, br.port
			} else {
				c.ErrorCode = errCoordinatorNotAvailable
			}
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if version < 4 && len(resp.Coordinators) == 1 {
		c := resp.Coordinators[0]
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.NodeID, c.Host, c.Port
	}
	return resp, nil
}

// newMemberID is a random UUID (version 4) text.
func newMemberID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

// memberCode is a coordinator error as the classic protocol's code: a
// fenced or unknown member must join again from scratch.
func memberCode(err error) int16 {
	code := kafkaCode(err, groupPlane)
	if code == errFencedMemberEpoch || code == errStaleMemberEpoch {
		return errUnknownMemberID
	}
	return code
}

// beat sends one ConsumerGroupHeartbeat for m at its current epoch with
// owned, and records the answer in m.
func (b *Bridge) beat(ctx context.Context, group string, m *classicMember, owned []*commonv1.TopicPartitions) error {
	c, err := b.coordinator(ctx, group)
	if err != nil {
		return err
	}
	resp, err := c.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: group, MemberId: m.id, MemberEpoch: m.epoch, InstanceId: m.instanceID,
		RebalanceTimeoutMs: m.rebalance, SubscribedTopicNames: m.topics, OwnedPartitions: owned, ClientId: m.clientID,
	}))
	if err != nil {
		return err
	}
	m.epoch = resp.Msg.GetMemberEpoch()
	if a := resp.Msg.GetAssignment(); a != nil {
		m.target = a.GetPartitions()
	}
	return nil
}

// consumerMetadata decodes a member's consumer protocol metadata. Some
// clients (segmentio/kafka-go) label version 1 metadata that ends after
// the user data, without the owned partitions; it is read as version 0.
func consumerMetadata(b []byte) (kmsg.ConsumerMemberMetadata, bool) {
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(b); err == nil {
		return meta, true
	}
	if len(b) < 2 {
		return meta, false
	}
	v0 := append([]byte{0, 0}, b[2:]...)
	meta = kmsg.ConsumerMemberMetadata{}
	if err := meta.ReadFrom(v0); err != nil {
		return meta, false
	}
	return meta, true
}

// partitionsOf is a consumer protocol's owned list in Strata's shape.
func partitionsOf(owned []kmsg.ConsumerMemberMetadataOwnedPartition) []*commonv1.TopicPartitions {
	var out []*commonv1.TopicPartitions
	for _, o := range owned {
		out = append(out, &commonv1.TopicPartitions{Topic: o.Topic, Partitions: o.Partitions})
	}
	return out
}

// samePartitions reports whether a and b name the same partitions.
func samePartitions(a, b []*commonv1.TopicPartitions) bool {
	flat := func(x []*commonv1.TopicPartitions) []string {
		var out []string
		for _, t := range x {
			for _, p := range t.GetPartitions() {
				out = append(out, fmt.Sprintf("%s\x00%d", t.GetTopic(), p))
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(flat(a), flat(b))
}

func (b *Bridge) joinGroup(ctx context.Context, version int16, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation = -1
	if req.ProtocolType != "consumer" || len(req.Protocols) == 0 {
		resp.ErrorCode = errInconsistentGroupProtocol
		return resp, nil
	}
	meta, ok := consumerMetadata(req.Protocols[0].Metadata)
	if !ok {
		resp.ErrorCode = errInconsistentGroupProtocol
		return resp, nil
	}
	m := &classicMember{}
	if req.MemberID != "" {
		old := b.groups.get(req.Group, req.MemberID)
		if old == nil {
			resp.ErrorCode, resp.MemberID = errUnknownMemberID, req.MemberID
			return resp, nil
		}
		*m = *old
	} else {
		m.id = newMemberID()
	}
	m.topics, m.rebalance, m.protocol = meta.Topics, req.RebalanceTimeoutMillis, req.Protocols[0].Name
	if req.InstanceID != nil {
		m.instanceID = *req.InstanceID
	}
	if m.rebalance <= 0 {
		m.rebalance = req.SessionTimeoutMillis
	}
	// An eager member gave up everything before it rejoined; a
	// cooperative one reports what it keeps.
	m.owned = partitionsOf(meta.OwnedPartitions)
	if err := b.beat(ctx, req.Group, m, m.owned); err != nil {
		resp.ErrorCode = memberCode(err)
		if resp.ErrorCode == errUnknownMemberID {
			b.groups.drop(req.Group, m.id)
		}
		return resp, nil
	}
	m.generation = m.epoch
	b.groups.put(req.Group, m)
	resp.Generation, resp.MemberID = m.generation, m.id
	resp.Protocol, resp.ProtocolType = &m.protocol, &req.ProtocolType
	// Never the member itself: no member runs a client-side assignor.
	resp.LeaderID = "strata-coordinator"
	return resp, nil
}

// member finds a classic member and checks its generation; it returns
// the error code to answer otherwise.
func (b *Bridge) member(group, id string, generation int32) (*classicMember, int16) {
	m := b.groups.get(group, id)
	switch {
	case m == nil:
		return nil, errUnknownMemberID
	case generation != m.generation:
		return nil, errIllegalGeneration
	}
	return m, errNone
}

// beatMember finds a classic member, checks its generation and
// heartbeats it to the coordinator with what it owns. It returns the
// member's updated copy, not yet stored, or the error code to answer; a
// member the coordinator no longer knows is forgotten here too.
func (b *Bridge) beatMember(ctx context.Context, group, id string, generation int32) (*classicMember, int16) {
	m, code := b.member(group, id, generation)
	if code != errNone {
		return nil, code
	}
	c := *m
	if err := b.beat(ctx, group, &c, c.owned); err != nil {
		code := memberCode(err)
		if code == errUnknownMemberID {
			b.groups.drop(group, m.id)
		}
		return nil, code
	}
	return &c, errNone
}

func (b *Bridge) syncGroup(ctx context.Context, version int16, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSyncGroupResponse()
	c, code := b.beatMember(ctx, req.Group, req.MemberID, req.Generation)
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	c.owned = c.target
	b.groups.put(req.Group, c)
	var a kmsg.ConsumerMemberAssignment
	for _, t := range c.target {
		a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.GetTopic(), Partitions: t.GetPartitions()})
	}
	resp.MemberAssignment = a.AppendTo(nil)
	pt := "consumer"
	resp.ProtocolType, resp.Protocol = &pt, &c.protocol
	return resp, nil
}

func (b *Bridge) heartbeat(ctx context.Context, version int16, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrHeartbeatResponse()
	c, code := b.beatMember(ctx, req.Group, req.MemberID, req.Generation)
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	b.groups.put(req.Group, c)
	if !samePartitions(c.target, c.owned) {
		resp.ErrorCode = errRebalanceInProgress
	}
	return resp, nil
}

func (b *Bridge) leaveGroup(ctx context.Context, version int16, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrLeaveGroupResponse()
	members := req.Members
	if version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	for _, lm := range members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = lm.MemberID, lm.InstanceID
		m := b.groups.get(req.Group, lm.MemberID)
		if m == nil {
			rm.ErrorCode = errUnknownMemberID
		} else {
			c := *m
			c.epoch = -1
			if err := b.beat(ctx, req.Group, &c, nil); err != nil {
				rm.ErrorCode = memberCode(err)
			}
			b.groups.drop(req.Group, m.id)
		}
		resp.Members = append(resp.Members, rm)
	}
	if version < 3 && len(resp.Members) == 1 {
		resp.ErrorCode = resp.Members[0].ErrorCode
	}
	return resp, nil
}

func (b *Bridge) offsetCommit(ctx context.Context, version int16, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	creq := &coordinatorv1.OffsetCommitRequest{GroupId: req.Group, MemberEpoch: -1}
	code := errNone
	kip848 := false // a KIP-848 member's commit (consumergroup.go)
	if req.MemberID != "" || req.Generation >= 0 {
		// A group member's commit: fenced by its coordinator epoch. A
		// standalone one (no member, generation -1) is not.
		m, c := b.member(req.Group, req.MemberID, req.Generation)
		switch {
		case c == errNone:
			creq.MemberId, creq.MemberEpoch = m.id, m.epoch
		case c == errUnknownMemberID && version >= 9:
			// Not a classic member here: a KIP-848 member, whose
			// generation is its member epoch, checked by the
			// coordinator itself.
			kip848 = true
			creq.MemberId, creq.MemberEpoch = req.MemberID, req.Generation
		case c == errUnknownMemberID && b.consumers.get(req.Group, req.MemberID) != nil:
			// As Kafka: KIP-848 members commit with version 9 or above.
			code = errUnsupportedVersion
		default:
			code = c
		}
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			cp := &coordinatorv1.OffsetCommitPartition{Topic: t.Topic, Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: p.LeaderEpoch}
			if version < 6 {
				cp.CommittedLeaderEpoch = -1
			}
			if p.Metadata != nil {
				cp.Metadata = *p.Metadata
			}
			creq.Partitions = append(creq.Partitions, cp)
		}
	}
	var results []*coordinatorv1.OffsetCommitPartitionResult
	if code == errNone && len(creq.Partitions) > 0 {
		c, err := b.coordinator(ctx, req.Group)
		if err == nil {
			var out *connect.Response[coordinatorv1.OffsetCommitResponse]
			out, err = c.OffsetCommit(ctx, connect.NewRequest(creq))
			if err == nil {
				results = out.Msg.GetPartitions()
			}
			if err == nil && len(results) != len(creq.Partitions) {
				err = connect.NewError(connect.CodeInternal, nil)
			}
		}
		if err != nil {
			if code = memberCode(err); kip848 {
				code = consumerCommitCode(err)
			}
		}
	}
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == errNone {
				if rp.ErrorCode = detailCode(results[i].GetError(), groupPlane, nil); rp.ErrorCode == errFencedMemberEpoch || rp.ErrorCode == errStaleMemberEpoch {
					rp.ErrorCode = errIllegalGeneration
					if kip848 {
						rp.ErrorCode = errStaleMemberEpoch
					}
				}
			}
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (b *Bridge) offsetFetch(ctx context.Context, version int16, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetFetchResponse()
	creq := &coordinatorv1.OffsetFetchRequest{GroupId: req.Group}
	for _, t := range req.Topics {
		creq.Topics = append(creq.Topics, &commonv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.OffsetFetchResponse]
	if err == nil {
		out, err = c.OffsetFetch(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		if resp.ErrorCode == errGroupIDNotFound {
			// A group that never committed has no offsets, not an error.
			resp.ErrorCode = errNone
		} else if version < 2 {
			// No top-level code before v2: the error goes in each
			// partition asked for.
			if r := kafkawire.ErrorResponseFor(version, req, resp.ErrorCode); r != nil {
				return r, nil
			}
			return nil, err
		} else {
			return resp, nil
		}
	}
	var offsets []*coordinatorv1.CommittedOffset
	if err == nil {
		offsets = out.Msg.GetOffsets()
	}
	byTopic := map[string]int{}
	for _, o := range offsets {
		i, ok := byTopic[o.GetTopic()]
		if !ok {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = o.GetTopic()
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			byTopic[o.GetTopic()] = i
		}
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		md := o.GetMetadata()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = o.GetPartition(), o.GetCommittedOffset(), o.GetCommittedLeaderEpoch(), &md
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	// Named partitions the coordinator did not answer have no offset.
	for _, t := range req.Topics {
		i, ok := byTopic[t.Topic]
		if !ok {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			byTopic[t.Topic] = i
		}
		for _, p := range t.Partitions {
			if !slices.ContainsFunc(resp.Topics[i].Partitions, func(rp kmsg.OffsetFetchResponseTopicPartition) bool { return rp.Partition == p }) {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset = p, -1
				resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
			}
		}
	}
	return resp, nil
}

// groupState is a coordinator group state as Kafka names it.
func groupState(s coordinatorv1.GroupState) string {
	switch s {
	case coordinatorv1.GroupState_GROUP_STATE_EMPTY:
		return "Empty"
	case coordinatorv1.GroupState_GROUP_STATE_RECONCILING:
		return "CompletingRebalance"
	case coordinatorv1.GroupState_GROUP_STATE_STABLE:
		return "Stable"
	case coordinatorv1.GroupState_GROUP_STATE_DEAD:
		return "Dead"
	}
	return "Unknown"
}

func (b *Bridge) listGroups(ctx context.Context, version int16, req *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrListGroupsResponse()
	out, err := b.cfg.Gateway.ListGroups(ctx, connect.NewRequest(&gatewayv1.ListGroupsRequest{}))
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		return resp, nil
	}
	for _, g := range out.Msg.GetGroups() {
		state := groupState(g.GetState())
		if len(req.StatesFilter) > 0 && !slices.Contains(req.StatesFilter, state) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState = g.GetGroupId(), "consumer", state
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (b *Bridge) describeGroups(ctx context.Context, version int16, req *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ProtocolType = id, "consumer"
		out, err := b.cfg.Gateway.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: id}))
		if err != nil {
			if rg.ErrorCode = kafkaCode(err, groupPlane); rg.ErrorCode == errGroupIDNotFound {
				rg.ErrorCode, rg.State = errNone, "Dead"
			}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := out.Msg.GetGroup()
		rg.State, rg.Protocol = groupState(g.GetState()), g.GetAssignor()
		for _, m := range g.GetMembers() {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost = m.GetMemberId(), m.GetClientId(), m.GetClientHost()
			if m.GetInstanceId() != "" {
				iid := m.GetInstanceId()
				rm.InstanceID = &iid
			}
			md := kmsg.ConsumerMemberMetadata{Topics: m.GetSubscribedTopicNames()}
			rm.ProtocolMetadata = md.AppendTo(nil)
			var a kmsg.ConsumerMemberAssignment
			for _, t := range m.GetAssignment().GetPartitions() {
				a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.GetTopic(), Partitions: t.GetPartitions()})
			}
			rm.MemberAssignment = a.AppendTo(nil)
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (b *Bridge) deleteGroups(ctx context.Context, version int16, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if _, err := b.cfg.Gateway.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: id})); err != nil {
			rg.ErrorCode = kafkaCode(err, groupPlane)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
