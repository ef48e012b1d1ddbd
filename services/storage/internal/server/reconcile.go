package server

import (
	"os"
	"slices"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/services/storage/internal/replication"
)

// fullPassEvery is how often reconcile visits every partition again when
// no change asks for it: a safety net under the incremental passes, which
// visit only what a delta changed.
const fullPassEvery = 30 * time.Second

// reconcilePasses is what reconcile remembers between views.
type reconcilePasses struct {
	done   bool               // a full pass ran
	fullAt time.Duration      // Clock.Mono of the last full pass
	retry  map[tpKey]struct{} // partitions whose last visit failed; visited again on the next view
	visits int                // partitions visited, ever (tests read it)
}

// viewChange is what reconcile visits for a view: every partition (all),
// or the topics whose metadata object differs from the previous view's.
// lib/metaview builds a view from a delta copy-on-write: a changed topic
// gets a new object, and in it only the changed partitions do, so comparing
// pointers finds what a delta changed without comparing contents.
type viewChange struct {
	all    bool
	topics map[string]bool // new, changed or gone; nil when all
}

func (c viewChange) topic(name string) bool { return c.all || c.topics[name] }

// topicsOf returns the topics of v that c names: every one when c.all,
// else the changed ones v still has, without a walk over all of v.
func (c viewChange) topicsOf(v *metaview.View) []*commonv1.TopicMetadata {
	if c.all {
		out := make([]*commonv1.TopicMetadata, 0, len(v.Topics))
		for _, t := range v.Topics {
			out = append(out, t)
		}
		return out
	}
	out := make([]*commonv1.TopicMetadata, 0, len(c.topics))
	for name := range c.topics {
		if t := v.Topics[name]; t != nil {
			out = append(out, t)
		}
	}
	return out
}

// changeOf is what reconcile must visit for view v after prev.
func (n *Node) changeOf(prev, v *metaview.View) viewChange {
	ps := &n.passes
	if !ps.done || !sameNodes(prev, v) || n.cfg.Clock.Mono()-ps.fullAt >= fullPassEvery {
		// Nodes reach every replica: their epochs (KIP-903) and addresses.
		return viewChange{all: true}
	}
	ch := viewChange{topics: map[string]bool{}}
	for name, t := range v.Topics {
		if prev.Topics[name] != t {
			ch.topics[name] = true
		}
	}
	for name := range prev.Topics {
		if v.Topics[name] == nil {
			ch.topics[name] = true
		}
	}
	for k := range ps.retry {
		ch.topics[k.topic] = true
	}
	return ch
}

// sameNodes reports whether two views hold the same node records.
func sameNodes(a, b *metaview.View) bool {
	if len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for id, ns := range a.Nodes {
		if b.Nodes[id] != ns {
			return false
		}
	}
	return true
}

// reconcile makes the hosted replicas match a new metadata view: it opens
// replicas assigned to this node, applies their state, starts and stops
// follower loops, and closes and deletes replicas no longer assigned.
//
// Its work is proportional to what changed, not to the partitions there
// are: it visits only the partitions whose metadata differs from the
// previous view's (changeOf), those whose last visit failed, and every
// partition when the nodes changed, on the first view and every
// fullPassEvery. At thousands of partitions a pass over all of them on each
// delta (one per ISR change anywhere) kept a node busy.
func (n *Node) reconcile(v *metaview.View) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	prev := n.view
	n.view = v
	n.mu.Unlock()
	n.applySecurity(v) // security.go
	ch := n.changeOf(prev, v)
	n.throttle.update(v, ch)

	ps := &n.passes
	retry := ps.retry
	ps.retry = nil
	if ch.all {
		ps.done, ps.fullAt = true, n.cfg.Clock.Mono()
	}
	nodeEpochs := make(map[int32]int64, len(v.Nodes))
	for id, ns := range v.Nodes {
		nodeEpochs[id] = ns.GetNodeEpoch()
	}
	want := map[tpKey]bool{}
	for _, t := range ch.topicsOf(v) {
		name := t.GetName()
		var before []*commonv1.PartitionMetadata
		if ot := prev.Topics[name]; !ch.all && ot != nil && ot.GetTopicId() == t.GetTopicId() {
			before = ot.GetPartitions()
		}
		for i, p := range t.GetPartitions() {
			if !slices.Contains(p.GetReplicas(), n.cfg.NodeID) {
				continue
			}
			k := tpKey{t.GetName(), p.GetPartition()}
			want[k] = true
			if _, failed := retry[k]; !failed && i < len(before) && before[i] == p {
				continue // unchanged since the last view
			}
			if !n.visit(k, t, p, nodeEpochs) {
				if ps.retry == nil {
					ps.retry = map[tpKey]struct{}{}
				}
				ps.retry[k] = struct{}{}
			}
		}
	}
	if !n.straysChecked {
		n.straysChecked = true
		n.removeStrays(want) // copies left while this node was down (strays.go)
	}
	n.mu.Lock()
	var drop []*hosted
	for k, h := range n.replicas {
		if ch.topic(k.topic) && !want[k] {
			drop = append(drop, h)
			delete(n.replicas, k)
			n.hosted = nil
		}
	}
	n.mu.Unlock()
	for _, h := range drop {
		if h.stopFollow != nil {
			h.stopFollow()
		}
		dir := h.r.Log().Dir()
		if err := h.r.Discard(); err != nil { // nothing written, as it is removed next
			n.logger.Warn("closing replica", "dir", dir, "err", err)
		}
		n.logger.Info("replica no longer hosted; deleting", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			n.logger.Warn("deleting replica", "dir", dir, "err", err)
		}
	}
}

// visit applies partition p of topic t, assigned to this node, to its
// replica, opening it first if needed. It reports false when the replica
// cannot be opened, to be tried again on the next view.
func (n *Node) visit(k tpKey, t *commonv1.TopicMetadata, p *commonv1.PartitionMetadata, nodeEpochs map[int32]int64) bool {
	n.passes.visits++
	h, err := n.ensure(t, p)
	if err != nil {
		n.logger.Error("cannot open replica", "topic", k.topic, "partition", k.partition, "err", err)
		return false
	}
	if h.r.ApplyState(replication.StateOf(p)) {
		if _, ok := n.tieredTopic(k.topic); ok {
			n.kickTier() // a new leader or follower learns the tiered end now (tiering.go)
		}
	}
	// A follower that registered again is forgotten before the
	// next ISR check (KIP-903).
	h.r.ObserveNodeEpochs(nodeEpochs)
	n.syncFollower(k, h)
	return true
}
