package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) consumerGroupHeartbeatAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ConsumerGroupHeartbeat, MinVersion: 0, MaxVersion: 1, Handle: func(ctx context.Context, r *kafkawire.Request) (kmsg.Response, error) {
		return b.consumerGroupHeartbeat(ctx, r.Version, r.ClientID, r.Body.(*kmsg.ConsumerGroupHeartbeatRequest))
	}}
}

func (b *Bridge) consumerGroupHeartbeat(ctx context.Context, version int16, clientID string, req *kmsg.ConsumerGroupHeartbeatRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp, nil
	}
	memberID := req.MemberID
	switch {
	case req.Group == "":
		return fail(kerr.InvalidRequest.Code, "the group id is empty")
	case memberID == "" && version >= 1:
		return fail(kerr.InvalidRequest.Code, "the member id is empty: from version 1 the member generates its own")
	case memberID == "" && req.MemberEpoch != 0:
		return fail(kerr.UnknownMemberID.Code, "a member without an id can only join (epoch 0)")
	case req.MemberEpoch < -2:
		return fail(kerr.InvalidRequest.Code, "a member epoch below -2")
	case req.SubscribedTopicRegex != nil && !validRegex(*req.SubscribedTopicRegex):
		return fail(errInvalidRegularExpression, fmt.Sprintf("subscribed topic regex %q does not compile (RE2 syntax)", *req.SubscribedTopicRegex))
	case req.ServerAssignor != nil && *req.ServerAssignor != "" && !slices.Contains(serverAssignors, *req.ServerAssignor):
		return fail(errUnsupportedAssignor, fmt.Sprintf("server assignor %q is not one of %q", *req.ServerAssignor, serverAssignors))
	case req.MemberEpoch == 0 && len(req.SubscribedTopicNames) == 0 && (req.SubscribedTopicRegex == nil || *req.SubscribedTopicRegex == ""):
		return fail(kerr.InvalidRequest.Code, "a join needs subscribed topic names")
	case req.MemberEpoch == 0 && len(req.Topics) > 0:
		return fail(kerr.InvalidRequest.Code, "a join cannot own partitions")
	case req.MemberEpoch > 0 && req.SubscribedTopicNames != nil && len(req.SubscribedTopicNames) == 0 && (req.SubscribedTopicRegex == nil || *req.SubscribedTopicRegex == ""):
		// The coordinator keeps a member's subscription when it is
		// sent empty.
		return fail(kerr.InvalidRequest.Code, "an empty subscription is not supported; leave the group instead")
	}
	if memberID == "" {
		memberID = newMemberID() // v0: the coordinator names new members
	}
	resp.MemberID = &memberID

	c, err := b.coordinator(ctx, req.Group)
	if err != nil {
		return fail(kafkaCode(err, groupPlane), *message(err))
	}
	beat := func(creq *coordinatorv1.ConsumerGroupHeartbeatRequest) (*coordinatorv1.ConsumerGroupHeartbeatResponse, error) {
		out, err := c.ConsumerGroupHeartbeat(ctx, connect.NewRequest(creq))
		if err != nil {
			return nil, err
		}
		return out.Msg, nil
	}

	if req.MemberEpoch < 0 {
		// Leaving: -1 for good, -2 a static member's leave for a restart,
		// for which the coordinator keeps its partitions until its
		// session timeout.
		if m := b.consumers.get(req.Group, memberID); m != nil {
			b.consumers.drop(req.Group, memberID, m)
		}
		if _, err := beat(&coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: req.Group, MemberId: memberID, MemberEpoch: req.MemberEpoch}); err != nil {
			return fail(kafkaCode(err, groupPlane), *message(err))
		}
		resp.MemberEpoch = req.MemberEpoch
		return resp, nil
	}

	m := b.consumers.get(req.Group, memberID)
	if req.MemberEpoch == 0 {
		m = &consumerMember{}
		b.consumers.put(req.Group, memberID, m, time.Now())
	} else if m == nil {
		return fail(kerr.FencedMemberEpoch.Code, "this listener does not know the member (it restarted or forgot it); join again")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone.Load() {
		return fail(kerr.FencedMemberEpoch.Code, "the member left or joined again meanwhile")
	}
	m.seen.Store(time.Now().UnixNano())

	// What the member sent, over what it left null.
	next := struct {
		topics                                      []string
		instanceID, rackID, client, assignor, regex string
		rebalance                                   int32
		owned, mayOwn                               []*commonv1.TopicPartitions
	}{m.topics, m.instanceID, m.rackID, clientID, m.assignor, m.regex, m.rebalance, m.owned, m.mayOwn}
	if req.SubscribedTopicNames != nil {
		next.topics = slices.Clone(req.SubscribedTopicNames)
	}
	if req.InstanceID != nil {
		next.instanceID = *req.InstanceID
	}
	if req.RackID != nil {
		next.rackID = *req.RackID
	}
	if req.ServerAssignor != nil {
		next.assignor = *req.ServerAssignor
	}
	if req.SubscribedTopicRegex != nil {
		next.regex = *req.SubscribedTopicRegex
	}
	// A regular expression is resolved by the coordinator, on every
	// heartbeat, so topics created later join; it leaves out of the
	// assignment the topics the principal may not describe.
	subscribed, regex := next.topics, next.regex
	if req.RebalanceTimeoutMillis >= 0 {
		next.rebalance = req.RebalanceTimeoutMillis
	}
	owned := next.mayOwn
	if req.Topics != nil {
		named, err := b.topicNames(ctx, req.Topics)
		if err != nil {
			return fail(kafkaCode(err, groupPlane), *message(err))
		}
		next.owned, owned = named, named
		if req.MemberEpoch >= m.epoch {
			next.mayOwn = named
		} else {
			// A list older than the last answer (a request delivered
			// late) may predate a grant answered since: it gives up
			// nothing that grant brought.
			next.mayOwn = unionPartitions(next.mayOwn, named)
		}
	}
	out, err := beat(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: req.Group, MemberId: memberID, MemberEpoch: req.MemberEpoch, InstanceId: next.instanceID, RackId: next.rackID,
		RebalanceTimeoutMs: next.rebalance, SubscribedTopicNames: subscribed, SubscribedTopicRegex: regex, ServerAssignor: next.assignor,
		OwnedPartitions: owned, ClientId: next.client,
	})
	if err != nil {
		code := kafkaCode(err, groupPlane)
		if code == kerr.UnknownMemberID.Code {
			b.consumers.drop(req.Group, memberID, m)
		}
		return fail(code, *message(err))
	}
	if a := out.GetAssignment(); a != nil {
		var names []string
		for _, t := range a.GetPartitions() {
			names = append(names, t.GetTopic())
		}
		ids, err := b.topicIDs(ctx, names)
		if err != nil {
			// The coordinator moved on; a retry at this epoch, or at the
			// one before, gets the assignment again.
			return fail(kerr.CoordinatorNotAvailable.Code, "topic ids: "+*message(err))
		}
		ka := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, t := range a.GetPartitions() {
			id, ok := ids[t.GetTopic()]
			if !ok || len(t.GetPartitions()) == 0 {
				continue // deleted since
			}
			kt := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			kt.TopicID, kt.Partitions = id, slices.Clone(t.GetPartitions())
			ka.Topics = append(ka.Topics, kt)
		}
		resp.Assignment = &ka
		next.mayOwn = unionPartitions(next.mayOwn, a.GetPartitions())
	}
	m.topics, m.instanceID, m.rackID, m.client, m.assignor, m.regex, m.rebalance = next.topics, next.instanceID, next.rackID, next.client, next.assignor, next.regex, next.rebalance
	m.owned, m.mayOwn, m.epoch = next.owned, next.mayOwn, out.GetMemberEpoch()
	resp.MemberEpoch, resp.HeartbeatIntervalMillis = out.GetMemberEpoch(), out.GetHeartbeatIntervalMs()
	return resp, nil
}
