package kafka

import (
	"cmp"
	"context"
	"encoding/hex"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/serve"
)

// broker is one Kafka broker of the Metadata answer: a storage node with
// a Kafka listener.
type broker struct {
	id   int32
	host string
	port int32
	rack *string
}

// brokers returns the nodes of a gateway Metadata answer that advertise a
// Kafka listener, sorted by id, as Kafka brokers.
func brokers(nodes []*commonv1.Node) []broker {
	var out []broker
	for _, n := range nodes {
		addr := KafkaAddress(n)
		if addr == "" {
			continue
		}
		host, port, ok := splitHostPort(addr)
		if !ok {
			continue
		}
		b := broker{id: n.GetNodeId(), host: host, port: port}
		if r := n.GetRack(); r != "" {
			b.rack = &r
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b broker) int { return int(a.id) - int(b.id) })
	return out
}

// KafkaAddress returns the host:port of the Kafka listener a node
// advertises (its listener named serve.KafkaListenerName), or "" when it
// has none.
func KafkaAddress(n *commonv1.Node) string {
	for _, l := range n.GetListeners() {
		if l.GetName() == serve.KafkaListenerName {
			return strings.TrimPrefix(l.GetAddress(), serve.KafkaScheme)
		}
	}
	return ""
}

func splitHostPort(addr string) (string, int32, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, false
	}
	return host, int32(port), true
}

// topicID parses a topic id's canonical UUID text into Kafka's 16 bytes;
// zero when it does not parse.
func topicID(s string) [16]byte {
	var id [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err == nil && len(b) == 16 {
		copy(id[:], b)
	}
	return id
}

// clusterMetadata is the cluster with the named topics (all when none),
// as Metadata and DescribeCluster answer it: from the process's own view
// once it has one (Config.View), else from the gateway. Either way it
// holds only the topics the principal may describe.
func (b *Bridge) clusterMetadata(ctx context.Context, names []string) (*gatewayv1.MetadataResponse, error) {
	if b.cfg.View != nil {
		if v := b.cfg.View(); v != nil && v.Version > 0 {
			return b.viewMetadata(ctx, v, names), nil
		}
	}
	if g := b.cfg.Guard; g != nil && g.Enforcing() && len(names) > 0 {
		// Named topics the principal may not describe are not asked
		// for: the gateway would refuse the whole request, where Kafka
		// answers those TOPIC_AUTHORIZATION_FAILED one by one.
		names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !g.Allowed(ctx, acl.Describe, acl.Topic, n) })
	}
	resp, err := b.cfg.Gateway.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: names}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// viewMetadata answers as the gateway's Metadata handler does, from v (View.Metadata): a name the principal may
// not describe is neither found nor unknown, and metadata answers it
// TOPIC_AUTHORIZATION_FAILED; the coordinators are those registered in v
// and those FindCoordinator located through this bridge.
func (b *Bridge) viewMetadata(ctx context.Context, v *metaview.View, names []string) *gatewayv1.MetadataResponse {
	out := v.Metadata(names, func(name string) bool {
		return b.cfg.Guard == nil || b.cfg.Guard.Allowed(ctx, acl.Describe, acl.Topic, name)
	}, nil)
	out.KafkaCoordinators = b.located.Nodes(v.Coordinators.GetCoordinators())
	return out
}

// LocatedCoordinators are the coordinator instances with a Kafka listener
// that a FindCoordinator located and that have not registered with the
// controller (started without --controller), by coordinator id. Metadata
// lists them after the registered ones (Nodes), since Kafka clients
// connect only to a coordinator whose broker id Metadata lists: the
// gateway keeps one for its Metadata, and a bridge answering from its own
// view keeps one of its own. The zero value is empty and ready; safe for
// concurrent use.
type LocatedCoordinators struct {
	mu    sync.Mutex
	addrs map[string]string // coordinator id -> kafka://host:port
}

// Note records the Kafka listener address of coordinator id, or forgets
// it when addr is not a Kafka address (the instance has no listener).
func (l *LocatedCoordinators) Note(id, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if serve.CheckKafkaURL(addr) != nil {
		delete(l.addrs, id)
		return
	}
	if l.addrs == nil {
		l.addrs = map[string]string{}
	}
	l.addrs[id] = addr
}

// Forget drops coordinator id (the controller's registry lists it).
func (l *LocatedCoordinators) Forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.addrs, id)
}

// Nodes are the coordinators a Metadata answer lists as Kafka brokers,
// sorted by broker id: every live registration with a Kafka listener
// (from the metadata view, so every listener lists them all), then each
// located one whose broker id (brokerid.Coordinator) no registration
// holds.
func (l *LocatedCoordinators) Nodes(registered []*controllerv1.CoordinatorRegistration) []*commonv1.Node {
	var out []*commonv1.Node
	held := map[int32]bool{}
	for _, r := range registered {
		held[r.GetKafkaNodeId()] = true
		for _, li := range r.GetListeners() {
			if li.GetName() == serve.KafkaListenerName && serve.CheckKafkaURL(li.GetAddress()) == nil {
				out = append(out, coordinatorNode(r.GetKafkaNodeId(), li.GetAddress()))
			}
		}
	}
	l.mu.Lock()
	for id, addr := range l.addrs {
		if nodeID := brokerid.Coordinator(id); !held[nodeID] {
			out = append(out, coordinatorNode(nodeID, addr))
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *commonv1.Node) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) })
	return out
}

// coordinatorNode is a node that is only a Kafka listener at addr.
func coordinatorNode(nodeID int32, addr string) *commonv1.Node {
	return &commonv1.Node{NodeId: nodeID, Listeners: []*commonv1.Listener{{Name: serve.KafkaListenerName, Address: addr}}}
}

// controllerID is the broker id Kafka's admin clients send controller
// requests to (CreateTopics, DeleteTopics, ...): the lowest broker, since
// every bridge passes them to the controller through the gateway.
func controllerID(bs []broker) int32 {
	if len(bs) == 0 {
		return -1
	}
	return bs[0].id
}
