package kafka

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
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
