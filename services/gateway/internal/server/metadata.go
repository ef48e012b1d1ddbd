package server

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
)

// Metadata answers from the cache: the requested topics (or every
// non-internal one) with leaders, replicas, ISR and epochs, the nodes their
// leader ids resolve against, and the names that do not exist. A caller
// sees only the topics it may describe: a named topic it may not describe
// is refused (PERMISSION_DENIED, whether the topic exists or not, so a
// refusal says nothing about existence), and the list of all topics leaves
// such topics out.
func (g *Gateway) Metadata(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	if err := g.authorizeTopics(ctx, acl.Describe, req.Msg.GetTopics()...); err != nil {
		return nil, err
	}
	st := g.cache.Load()
	if st == nil {
		return nil, errNoMetadata()
	}
	out := &gatewayv1.MetadataResponse{ClusterId: st.ClusterID, MetadataVersion: st.Version}
	for _, n := range st.Nodes {
		if n.GetState() != controllerv1.NodeState_NODE_STATE_DEAD && n.GetNode() != nil {
			out.Nodes = append(out.Nodes, g.clientNode(n.GetNode()))
		}
	}
	slices.SortFunc(out.Nodes, func(a, b *commonv1.Node) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) })
	out.KafkaCoordinators = g.kafkaCoordinatorNodes(st)
	if names := req.Msg.GetTopics(); len(names) > 0 {
		for _, name := range names {
			if t := st.Topics[name]; t != nil {
				out.Topics = append(out.Topics, t)
			} else {
				out.UnknownTopics = append(out.UnknownTopics, name)
			}
		}
	} else {
		for _, t := range st.Topics {
			if !t.GetInternal() {
				out.Topics = append(out.Topics, t)
			}
		}
		out.Topics = visible(ctx, g, acl.Topic, out.Topics, (*commonv1.TopicMetadata).GetName)
		slices.SortFunc(out.Topics, func(a, b *commonv1.TopicMetadata) int { return cmp.Compare(a.GetName(), b.GetName()) })
	}
	return connect.NewResponse(out), nil
}

// clientNode is node as this gateway's clients see it: with the address of
// --client-listener when the node advertises that listener, else as it is
// (its default address). The cached node is never modified.
func (g *Gateway) clientNode(n *commonv1.Node) *commonv1.Node {
	if g.clientListener == "" {
		return n
	}
	for _, l := range n.GetListeners() {
		if l.GetName() == g.clientListener {
			c := proto.CloneOf(n)
			c.Address = l.GetAddress()
			return c
		}
	}
	return n
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }
