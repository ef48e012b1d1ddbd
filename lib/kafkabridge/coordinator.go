package kafkabridge

import (
	"hash/fnv"
	"math"
	"slices"
	"strings"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/serve"
)

// CoordinatorNodeIDBase is the lowest broker id a coordinator's Kafka
// listener is named by in FindCoordinator and Metadata. Coordinator ids
// map into [CoordinatorNodeIDBase, math.MaxInt32], the top 2^20 ids, so
// they never meet storage node ids below it; a storage node id inside the
// range is never shadowed either: a coordinator whose id would collide
// with a live storage node's is left out, and FindCoordinator then names
// a storage node as before.
const CoordinatorNodeIDBase int32 = math.MaxInt32 - (1<<20 - 1)

// CoordinatorNodeID is the broker id of the coordinator instance named id:
// a hash of the id (FNV-1a, 32 bits, modulo 2^20) into the coordinators'
// range, the same in every process and across restarts. The coordinator
// registers under it, and the controller keeps it unique among live
// coordinators (docs/kafka.md, "Groups"). Changing the hash changes every
// coordinator's broker id: clients would follow, but only after a
// metadata refresh.
func CoordinatorNodeID(id string) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return CoordinatorNodeIDBase + int32(h.Sum32()%(1<<20))
}

// coordinatorBrokers are the coordinators with a Kafka listener that
// Metadata lists after the storage nodes: those the gateway lists
// (registered with the controller, or located by it) whose broker id is
// theirs (CoordinatorNodeID) and no storage node's.
func coordinatorBrokers(nodes []*commonv1.Node, storage []broker) []broker {
	var out []broker
	for _, b := range brokers(nodes) {
		if b.id < CoordinatorNodeIDBase || slices.ContainsFunc(storage, func(s broker) bool { return s.id == b.id }) {
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
	id := CoordinatorNodeID(coordID)
	if slices.ContainsFunc(storage, func(s broker) bool { return s.id == id }) {
		return broker{}, false
	}
	return broker{id: id, host: host, port: port}, true
}
