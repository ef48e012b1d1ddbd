// Package brokerid is the one home of the Kafka broker ids Strata hands
// out beyond its storage nodes' own (--node-id): the coordinators'. The
// controller checks a coordinator's registration against it, and the
// Kafka door (services/kafka) names coordinators by it in Metadata and
// FindCoordinator; it imports nothing, so the controller need not link
// Kafka's codecs to share it.
package brokerid

import (
	"hash/fnv"
	"math"
)

// CoordinatorBase is the lowest broker id a coordinator's Kafka listener
// is named by. Coordinator ids map into [CoordinatorBase, math.MaxInt32],
// the top 2^20 ids of int32, far above the storage node ids operators
// choose; a storage node id inside the range is never shadowed either: a
// coordinator whose id would collide with a live storage node's is left
// out, and FindCoordinator then names a storage node (docs/kafka.md,
// "Groups").
const CoordinatorBase int32 = math.MaxInt32 - (1<<20 - 1)

// Coordinator is the broker id of the coordinator instance named id: a
// hash of the id (FNV-1a, 32 bits, modulo 2^20) into the coordinators'
// range, the same in every process and across restarts. The coordinator
// registers under it, and the controller keeps it unique among live
// coordinators. Changing the hash changes every coordinator's broker id:
// clients would follow, but only after a metadata refresh.
func Coordinator(id string) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return CoordinatorBase + int32(h.Sum32()%(1<<20))
}
