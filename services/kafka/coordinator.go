package kafka

import (
	"slices"
	"strings"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/serve"
)

// coordinatorBrokers are the coordinators with a Kafka listener that
// Metadata lists after the storage nodes: those the gateway lists
// (registered with the controller, or located by it) whose broker id is
// theirs (CoordinatorNodeID) and no storage node's.
func coordinatorBrokers(nodes []*commonv1.Node, storage []broker) []broker {
	var out []broker
	for _, b := range brokers(nodes) {
		if b.id < brokerid.CoordinatorBase || slices.ContainsFunc(storage, func(s broker) bool { return s.id == b.id }) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// coordinatorBroker is the broker FindCoordinator names for a group owned
// by the coordinator coordID whose owner answered addr for the listener
// named "kafka": its Kafka listener, unless it has none (addr is then its
// Connect address) or its broker id is a storage node's.
func coordinatorBroker(coordID, addr string, storage []broker) (broker, bool) {
	hp, ok := strings.CutPrefix(addr, serve.KafkaScheme)
	if !ok || coordID == "" {
		return broker{}, false
	}
	host, port, ok := splitHostPort(hp)
	if !ok {
		return broker{}, false
	}
	id := brokerid.Coordinator(coordID)
	if slices.ContainsFunc(storage, func(s broker) bool { return s.id == id }) {
		return broker{}, false
	}
	return broker{id: id, host: host, port: port}, true
}
