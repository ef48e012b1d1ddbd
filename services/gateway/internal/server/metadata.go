package server

import (
	"context"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
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
	out := st.Metadata(req.Msg.GetTopics(), func(name string) bool {
		return g.guard.Allowed(ctx, acl.Describe, acl.Topic, name)
	}, g.clientNode)
	out.KafkaCoordinators = g.kafkaCoordinatorNodes(st)
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
