package guard

import (
	"context"
	"slices"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
)

// DescribableGroup leaves out of a group's description, in place, what
// the caller may not describe, as OffsetFetch leaves out such topics'
// offsets: the lag rows, subscribed topics and assigned partitions of
// topics it may not describe. A classic member's metadata and assignment
// are the group protocol's own bytes, which Kafka's DescribeGroups returns
// to anyone who may describe the group; they stay. The coordinator
// applies it, to direct calls and to those a door forwards alike.
func (g *Guard) DescribableGroup(ctx context.Context, d *coordinatorv1.GroupDescription) *coordinatorv1.GroupDescription {
	if d == nil || !g.Enforcing() {
		return d
	}
	ok := map[string]bool{}
	may := func(topic string) bool {
		v, seen := ok[topic]
		if !seen {
			v = g.Allowed(ctx, acl.Describe, acl.Topic, topic)
			ok[topic] = v
		}
		return v
	}
	d.Partitions = slices.DeleteFunc(d.Partitions, func(p *coordinatorv1.PartitionLag) bool { return !may(p.GetTopic()) })
	for _, m := range d.Members {
		m.SubscribedTopicNames = slices.DeleteFunc(m.SubscribedTopicNames, func(t string) bool { return !may(t) })
		for _, a := range []*coordinatorv1.Assignment{m.GetAssignment(), m.GetTargetAssignment()} {
			if a != nil {
				a.Partitions = slices.DeleteFunc(a.Partitions, func(tp *commonv1.TopicPartitions) bool { return !may(tp.GetTopic()) })
			}
		}
	}
	return d
}
