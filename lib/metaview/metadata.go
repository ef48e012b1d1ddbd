package metaview

import (
	"cmp"
	"slices"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// Metadata is the answer to GatewayService's Metadata from v, as the
// gateway gives it from its cache and a Kafka listener gives it from its
// process's own view: the live nodes by id (each passed through node, when
// set, to pick the address its clients use); the named topics that exist,
// and the names that do not as unknown; or, with no names, every
// non-internal topic, by name. A topic for which describable (may the
// caller describe it) is false is left out altogether, named or not. The
// answer shares v's topics and nodes, which nobody modifies;
// KafkaCoordinators is left for the caller.
func (v *View) Metadata(names []string, describable func(string) bool, node func(*commonv1.Node) *commonv1.Node) *gatewayv1.MetadataResponse {
	out := &gatewayv1.MetadataResponse{ClusterId: v.ClusterID, MetadataVersion: v.Version}
	for _, n := range v.Nodes {
		if n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD || n.GetNode() == nil {
			continue
		}
		if node != nil {
			out.Nodes = append(out.Nodes, node(n.GetNode()))
		} else {
			out.Nodes = append(out.Nodes, n.GetNode())
		}
	}
	slices.SortFunc(out.Nodes, func(a, b *commonv1.Node) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) })
	if len(names) > 0 {
		for _, name := range names {
			switch t := v.Topics[name]; {
			case !describable(name):
			case t != nil:
				out.Topics = append(out.Topics, t)
			default:
				out.UnknownTopics = append(out.UnknownTopics, name)
			}
		}
		return out
	}
	for _, t := range v.Topics {
		if !t.GetInternal() && describable(t.GetName()) {
			out.Topics = append(out.Topics, t)
		}
	}
	slices.SortFunc(out.Topics, func(a, b *commonv1.TopicMetadata) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}
