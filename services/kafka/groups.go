package kafka

import (
	"context"
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/serve"
)

// coordinatorClients caches a client per coordinator instance address.
type coordinatorClients struct {
	mu     sync.Mutex
	coords map[string]coordinatorv1connect.CoordinatorServiceClient // by address
}

func newCoordinatorClients() *coordinatorClients {
	return &coordinatorClients{coords: map[string]coordinatorv1connect.CoordinatorServiceClient{}}
}

// groupAPIs are the group APIs every bridge serves.
func (b *Bridge) groupAPIs() []kafkawire.API {
	return []kafkawire.API{
		{Key: kmsg.FindCoordinator, MinVersion: 0, MaxVersion: 4, Handle: handler(b.findCoordinator)},
		{Key: kmsg.JoinGroup, MinVersion: 0, MaxVersion: 7, Handle: func(ctx context.Context, r *kafkawire.Request) (kmsg.Response, error) {
			return b.joinGroup(ctx, r.Version, r.ClientID, r.RemoteAddr, r.Body.(*kmsg.JoinGroupRequest)) // classicgroup.go
		}},
		{Key: kmsg.SyncGroup, MinVersion: 0, MaxVersion: 5, Handle: handler(b.syncGroup)},
		{Key: kmsg.Heartbeat, MinVersion: 0, MaxVersion: 4, Handle: handler(b.heartbeat)},
		{Key: kmsg.LeaveGroup, MinVersion: 0, MaxVersion: 4, Handle: handler(b.leaveGroup)},
		{Key: kmsg.OffsetCommit, MinVersion: 0, MaxVersion: 9, Handle: handler(b.offsetCommit)},
		{Key: kmsg.OffsetFetch, MinVersion: 0, MaxVersion: 9, Handle: handler(b.offsetFetch)},
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
	g := b.coords
	g.mu.Lock()
	defer g.mu.Unlock()
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
			b.located.add(br.id, loc.Msg.GetAddress())
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
			c.ErrorCode = kerr.UnsupportedVersion.Code
		case b.cfg.Guard != nil && !b.cfg.Guard.Allowed(ctx, acl.Describe, acl.Group, key):
			// As Kafka: describe on the group, as for the Connect API's
			// FindCoordinator.
			c.ErrorCode = kerr.GroupAuthorizationFailed.Code
		default:
			if br, ok := b.groupCoordinator(ctx, bs, key); ok {
				c.NodeID, c.Host, c.Port = br.id, br.host, br.port
			} else {
				c.ErrorCode = kerr.CoordinatorNotAvailable.Code
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

func (b *Bridge) offsetCommit(ctx context.Context, version int16, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	creq := &coordinatorv1.OffsetCommitRequest{GroupId: req.Group, MemberEpoch: -1}
	var code int16
	kip848 := false // a KIP-848 member's commit (consumergroup.go)
	if req.MemberID != "" || req.Generation >= 0 {
		// A group member's commit, checked by the coordinator: a classic
		// member's against its group's generation, a KIP-848 member's
		// (whose generation is its member epoch) against its epoch. A
		// standalone one (no member, generation -1) is not checked.
		creq.MemberId, creq.MemberEpoch = req.MemberID, req.Generation
		switch {
		case b.consumers.get(req.Group, req.MemberID) != nil && version < 9:
			// As Kafka: KIP-848 members commit with version 9 or above.
			code = kerr.UnsupportedVersion.Code
		case version >= 9:
			kip848 = true
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
	if code == 0 && len(creq.Partitions) > 0 {
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
			code = classicCode(err) // classicgroup.go
			if kip848 && code == kerr.FencedMemberEpoch.Code {
				// As Kafka answers from OffsetCommit v9: an epoch that is
				// not the member's is STALE_MEMBER_EPOCH, after which the
				// member retries with its newer epoch the partitions it
				// still owns.
				code = kerr.StaleMemberEpoch.Code
			} else if code == kerr.FencedMemberEpoch.Code || code == kerr.StaleMemberEpoch.Code {
				code = kerr.UnknownMemberID.Code // a KIP-848 member committing below v9
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
			if code == 0 {
				if rp.ErrorCode = detailCode(results[i].GetError(), groupPlane, nil); rp.ErrorCode == kerr.FencedMemberEpoch.Code || rp.ErrorCode == kerr.StaleMemberEpoch.Code {
					rp.ErrorCode = kerr.IllegalGeneration.Code
					if kip848 {
						rp.ErrorCode = kerr.StaleMemberEpoch.Code
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
	if version >= 8 {
		return b.offsetFetchGroups(ctx, req)
	}
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
		if resp.ErrorCode == kerr.GroupIDNotFound.Code {
			// A group that never committed has no offsets, not an error.
			resp.ErrorCode = 0
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

// offsetFetchGroups answers OffsetFetch v8 and v9 (KIP-709): several
// groups in one request, each fetched as a v7 request for one group is
// (each from its own coordinator, whichever listener is asked) and
// answered in its own entry with its own error code. v9's member id and
// epoch (KIP-848) are not checked: a fetch changes nothing, and commits
// are fenced.
func (b *Bridge) offsetFetchGroups(ctx context.Context, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetFetchResponse()
	for _, g := range req.Groups {
		one := kmsg.NewPtrOffsetFetchRequest()
		one.Group, one.RequireStable = g.Group, req.RequireStable
		if g.Topics != nil {
			one.Topics = []kmsg.OffsetFetchRequestTopic{}
		}
		for _, t := range g.Topics {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = t.Topic, t.Partitions
			one.Topics = append(one.Topics, rt)
		}
		r, err := b.offsetFetch(ctx, 7, one)
		if err != nil {
			return nil, err
		}
		v7 := r.(*kmsg.OffsetFetchResponse)
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, v7.ErrorCode
		for _, t := range v7.Topics {
			gt := kmsg.NewOffsetFetchResponseGroupTopic()
			gt.Topic = t.Topic
			for _, p := range t.Partitions {
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				gt.Partitions = append(gt.Partitions, gp)
			}
			rg.Topics = append(rg.Topics, gt)
		}
		resp.Groups = append(resp.Groups, rg)
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
		if pt := g.GetProtocolType(); pt != "" {
			rg.ProtocolType = pt // a classic group's own
		}
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
			if rg.ErrorCode = kafkaCode(err, groupPlane); rg.ErrorCode == kerr.GroupIDNotFound.Code {
				rg.ErrorCode, rg.State = 0, "Dead"
			}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := out.Msg.GetGroup()
		rg.State, rg.Protocol = groupState(g.GetState()), g.GetAssignor()
		classic := g.GetProtocolType() != ""
		if classic {
			// A classic group: its state, protocol type and each
			// member's bytes as the coordinator holds them.
			rg.State, rg.ProtocolType = g.GetClassicState(), g.GetProtocolType()
		}
		for _, m := range g.GetMembers() {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost = m.GetMemberId(), m.GetClientId(), m.GetClientHost()
			if m.GetInstanceId() != "" {
				iid := m.GetInstanceId()
				rm.InstanceID = &iid
			}
			if classic {
				rm.ProtocolMetadata, rm.MemberAssignment = m.GetClassicMetadata(), m.GetClassicAssignment()
				rg.Members = append(rg.Members, rm)
				continue
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
