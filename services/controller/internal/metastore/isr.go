package metastore

import (
	"slices"
	"strconv"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
)

// Who may lead, and who counts as in sync, is decided here for every step
// that writes a partition record: the liveness pass (NextPartitionState),
// the move steps, drains, preferred and unclean elections.
//
// An ISR member is in sync only as the incarnation it joined under
// (KIP-903): the record keeps, for each member, the node epoch of that
// registration (isr_node_epochs). A node that registered again since
// (restarted, perhaps with a shorter or empty log) is not in sync, even
// before the liveness pass has removed it from the ISR: between its old
// lease expiring and that pass, it is alive and still listed.

// epochOf returns the node epoch of a node's live registration, 0 when it
// holds no lease.
type epochOf func(id int32) int64

// inSync reports whether replica r of p is in p's ISR, alive, and
// registered as the incarnation it joined the ISR under. A member with no
// recorded epoch (a record from before epochs were kept) is in sync while
// alive.
func inSync(p *commonv1.PartitionMetadata, r int32, epoch epochOf) bool {
	if !slices.Contains(p.GetIsr(), r) {
		return false
	}
	e := epoch(r)
	if e == 0 {
		return false
	}
	rec := p.GetIsrNodeEpochs()[r]
	return rec == 0 || rec == e
}

// assignISR sets next's ISR to isr and records the node epoch of each
// member: the one prev recorded for a member it already had (so that a
// member whose node registered again stays recognisable as stale), else
// joined(r), the incarnation vouched for by whoever adds it (0 leaves it
// unrecorded).
func assignISR(next, prev *commonv1.PartitionMetadata, isr []int32, joined epochOf) {
	next.Isr, next.IsrNodeEpochs = slices.Clone(isr), isrEpochs(prev, isr, joined)
}

// isrEpochs is the isr_node_epochs assignISR records.
func isrEpochs(prev *commonv1.PartitionMetadata, isr []int32, joined epochOf) map[int32]int64 {
	epochs := make(map[int32]int64, len(isr))
	for _, r := range isr {
		e, kept := prev.GetIsrNodeEpochs()[r]
		if !kept || !slices.Contains(prev.GetIsr(), r) {
			e = joined(r)
		}
		if e != 0 {
			epochs[r] = e
		}
	}
	return epochs
}

// noEpoch is the joined function of a change that adds no ISR member.
func noEpoch(int32) int64 { return 0 }

// partitionMinInsync is the effective min.insync.replicas of partition p
// of a topic with overrides: the override when there is one, else the
// default lowered to the partition's replica count before its running
// move adds any (a move's new replicas are not in sync yet). Kept per
// partition: after a move, partitions of one topic can have different
// replication factors.
func partitionMinInsync(overrides map[string]string, p *commonv1.PartitionMetadata) int {
	if v, ok := overrides[topicconfig.MinInsyncReplicas]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			return n
		}
	}
	current := 0
	for _, r := range p.GetReplicas() {
		if !slices.Contains(p.GetAddingReplicas(), r) {
			current++
		}
	}
	return max(1, min(topicconfig.DefaultMinInsyncReplicas, current))
}
