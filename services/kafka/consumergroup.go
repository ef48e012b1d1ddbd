package kafka

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// Kafka's ConsumerGroupHeartbeat (API 68, KIP-848) mapped onto the
// coordinator's ConsumerGroupHeartbeat, which is the same protocol: the
// member joins with epoch 0, heartbeats with its epoch and what it owns,
// is answered its epoch and, when it changed, its whole assignment, and
// leaves with epoch -1; the coordinator assigns. What differs:
//
//   - Kafka names topics by id in owned partitions and assignments; the
//     coordinator by name. The bridge turns one into the other with the
//     controller's topic ids, the ones Metadata (v10+) gives.
//   - A Kafka member sends each field only when it changed (null
//     otherwise); the coordinator wants the subscription and the owned
//     partitions on every heartbeat. The bridge keeps, per member, what
//     it last sent and fills the gaps.
//   - Regular expression subscriptions (v1) go to the coordinator, which
//     resolves them on each heartbeat; on a listener enforcing ACLs the
//     bridge resolves them against the topics the principal may describe
//     and sends names. A server assignor the coordinator does not have is
//     refused (it has "uniform", sticky
//     and balanced, and "range", co-partitioning; the group uses the one
//     most members ask for).
//
// A heartbeat whose owned partitions are null ("unchanged") releases
// nothing for Kafka: the owned list it stands for is the last one sent.
// The bridge sends the coordinator that list together with every
// assignment answered since, so a partition granted after the list was
// built and already revoked again is not taken as given up while the
// client may still be committing it (franz-go sends null owned partitions
// while it revokes). Only a full list from the client gives partitions
// up, as with Kafka.
//
// The member state lives in the bridge the member talks to (the group's
// coordinator broker, as for the classic protocol). A bridge that does not
// know a member heartbeating at an epoch above 0 (it restarted) answers
// FENCED_MEMBER_EPOCH, and the member joins again under the same id with
// everything it sends on a join; the coordinator takes that join as the
// member starting over.

// consumerMember is what the bridge keeps of one KIP-848 member.
type consumerMember struct {
	mu sync.Mutex // one heartbeat of a member at a time
	// Last sent, for heartbeats that leave them null.
	topics                                      []string
	instanceID, rackID, client, assignor, regex string
	rebalance                                   int32
	// owned is the member's last full owned list; mayOwn is owned and
	// every assignment answered since, what a heartbeat with null owned
	// partitions is reported to the coordinator as.
	owned, mayOwn []*commonv1.TopicPartitions
	// epoch is the member epoch last answered.
	epoch int32
	// seen is when the member last heartbeated, in Unix nanoseconds.
	seen atomic.Int64
	// gone: left or forgotten; a heartbeat that waited must look again.
	gone atomic.Bool
}

// forgetAfter is how long the bridge keeps a silent member: far longer
// than any session timeout, after which the coordinator has removed it.
// One that comes back later is answered FENCED_MEMBER_EPOCH and joins
// again.
const forgetAfter = 10 * time.Minute

// consumerGroups holds the KIP-848 members this bridge serves, and the
// topic names of the topic ids it has seen (a topic id is never reused).
type consumerGroups struct {
	mu      sync.Mutex
	members map[string]map[string]*consumerMember // group -> member id -> member
	names   map[[16]byte]string
}

func newConsumerGroups() *consumerGroups {
	return &consumerGroups{members: map[string]map[string]*consumerMember{}, names: map[[16]byte]string{}}
}

func (g *consumerGroups) get(group, id string) *consumerMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.members[group][id]
}

// put adds a joining member, replacing one of the same id, and forgets
// members silent for forgetAfter (members that died without leaving).
func (g *consumerGroups) put(group, id string, m *consumerMember, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m.seen.Store(now.UnixNano())
	for gid, ms := range g.members {
		for mid, old := range ms {
			if now.Sub(time.Unix(0, old.seen.Load())) > forgetAfter {
				old.gone.Store(true)
				delete(ms, mid)
			}
		}
		if len(ms) == 0 {
			delete(g.members, gid)
		}
	}
	if g.members[group] == nil {
		g.members[group] = map[string]*consumerMember{}
	}
	if old := g.members[group][id]; old != nil && old != m {
		old.gone.Store(true)
	}
	g.members[group][id] = m
}

func (g *consumerGroups) drop(group, id string, m *consumerMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m.gone.Store(true)
	if g.members[group][id] == m {
		delete(g.members[group], id)
		if len(g.members[group]) == 0 {
			delete(g.members, group)
		}
	}
}

// serverAssignors are the coordinator's server-side assignors (its
// assignor.Names): "uniform", sticky and balanced, and "range", which
// co-partitions, as Kafka's.
var serverAssignors = []string{"uniform", "range"}

// errUnsupportedAssignor is KIP-848's UNSUPPORTED_ASSIGNOR.
const errUnsupportedAssignor int16 = 112

// errInvalidRegularExpression is KIP-848's INVALID_REGULAR_EXPRESSION.
const errInvalidRegularExpression int16 = 128

// wholeName is a subscription regex as it is matched: against the whole
// topic name, as Kafka's Pattern.matches (the coordinator does the same).
func wholeName(regex string) string { return "^(?:" + regex + ")$" }

// validRegex reports whether a subscription regex compiles (RE2 syntax,
// which Kafka's RE2/J follows); "" is none.
func validRegex(regex string) bool {
	_, err := regexp.Compile(wholeName(regex))
	return regex == "" || err == nil
}

// matchingTopics lists the topics the principal may describe whose whole
// name regex matches.
func (b *Bridge) matchingTopics(ctx context.Context, regex string) ([]string, error) {
	re, err := regexp.Compile(wholeName(regex))
	if err != nil {
		return nil, err
	}
	md, err := b.clusterMetadata(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range md.GetTopics() {
		if re.MatchString(t.GetName()) {
			out = append(out, t.GetName())
		}
	}
	return out, nil
}

// consumerGroupAPIs are the KIP-848 APIs every bridge serves.
func (b *Bridge) consumerGroupAPIs() []kafkawire.API {
	return []kafkawire.API{
		{Key: kmsg.ConsumerGroupHeartbeat, MinVersion: 0, MaxVersion: 1, Handle: func(ctx context.Context, r *kafkawire.Request) (kmsg.Response, error) {
			return b.consumerGroupHeartbeat(ctx, r.Version, r.ClientID, r.Body.(*kmsg.ConsumerGroupHeartbeatRequest))
		}},
	}
}

// topicIDs are the controller's ids of the named topics (those the
// gateway knows and the principal may describe), and remembers their
// names by id.
func (b *Bridge) topicIDs(ctx context.Context, names []string) (map[string][16]byte, error) {
	out := map[string][16]byte{}
	if len(names) == 0 {
		return out, nil
	}
	md, err := b.clusterMetadata(ctx, names)
	if err != nil {
		return nil, err
	}
	b.consumers.mu.Lock()
	defer b.consumers.mu.Unlock()
	for _, t := range md.GetTopics() {
		id := topicID(t.GetTopicId())
		if id == ([16]byte{}) {
			continue
		}
		out[t.GetName()] = id
		b.consumers.names[id] = t.GetName()
	}
	return out, nil
}

// topicNames resolves owned partitions named by topic id. An id no topic
// has (deleted, or one the principal may not describe) is left out: the
// member holds nothing there the coordinator could give to another.
func (b *Bridge) topicNames(ctx context.Context, topics []kmsg.ConsumerGroupHeartbeatRequestTopic) ([]*commonv1.TopicPartitions, error) {
	lookup := func(id [16]byte) (string, bool) {
		b.consumers.mu.Lock()
		defer b.consumers.mu.Unlock()
		n, ok := b.consumers.names[id]
		return n, ok
	}
	var out []*commonv1.TopicPartitions
	asked := false
	for _, t := range topics {
		name, ok := lookup(t.TopicID)
		if !ok && !asked {
			// One look at every topic the principal may describe.
			asked = true
			md, err := b.clusterMetadata(ctx, nil)
			if err != nil {
				return nil, err
			}
			var names []string
			for _, mt := range md.GetTopics() {
				names = append(names, mt.GetName())
			}
			if _, err := b.topicIDs(ctx, names); err != nil {
				return nil, err
			}
			name, ok = lookup(t.TopicID)
		}
		if ok {
			out = append(out, &commonv1.TopicPartitions{Topic: name, Partitions: slices.Clone(t.Partitions)})
		}
	}
	return out, nil
}

// unionPartitions is a with b's partitions added.
func unionPartitions(a, b []*commonv1.TopicPartitions) []*commonv1.TopicPartitions {
	out := make([]*commonv1.TopicPartitions, 0, len(a)+len(b))
	at := map[string]int{}
	for _, src := range [][]*commonv1.TopicPartitions{a, b} {
		for _, t := range src {
			i, ok := at[t.GetTopic()]
			if !ok {
				i = len(out)
				at[t.GetTopic()] = i
				out = append(out, &commonv1.TopicPartitions{Topic: t.GetTopic()})
			}
			for _, p := range t.GetPartitions() {
				if !slices.Contains(out[i].Partitions, p) {
					out[i].Partitions = append(out[i].Partitions, p)
				}
			}
		}
	}
	for _, t := range out {
		slices.Sort(t.Partitions)
	}
	return out
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
	// heartbeat, so topics created later join. Where the listener
	// enforces ACLs it is resolved here instead, against the topics the
	// principal may describe (the coordinator sees the listener's own
	// identity), and sent as names.
	subscribed, regex := next.topics, next.regex
	if regex != "" && b.cfg.Guard != nil && b.cfg.Guard.Enforcing() {
		matched, err := b.matchingTopics(ctx, regex)
		if err != nil {
			return fail(kafkaCode(err, groupPlane), *message(err))
		}
		subscribed = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(next.topics), matched...))))
		regex = ""
	}
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
