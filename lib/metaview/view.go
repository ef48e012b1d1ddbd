// Package metaview is the one copy of the cluster metadata that services
// other than the controller keep: the state the controller's WatchMetadata
// stream describes, a full snapshot followed by deltas in version order.
//
// A View is one consistent, immutable state at one version. Apply builds
// the next View from a stream message without touching the previous one
// (copy-on-write: maps are copied, a changed topic is rebuilt with a new
// partition slice), so a reader holding a View never sees half a delta.
// Cache publishes the latest View for lock-free readers, and Watch feeds a
// Cache from the controllers, reconnecting with jittered exponential
// backoff.
//
// The rules of applying a message, shared by every service:
//   - A snapshot replaces everything the view held, whatever its version
//     (a controller whose etcd member is behind may legitimately answer a
//     reconnect with an older one).
//   - A delta whose version is not newer than the view's is skipped: it is
//     a progress notice or a duplicate after a resume.
//   - A delta applies its deleted topics first (only the incarnation it
//     names, when it names a topic id), then its topics whole, then its
//     partition changes, each only to the topic incarnation it names, so a
//     late change for a deleted topic never lands on a new topic of the
//     same name. Partitions stay ordered by index.
//   - Nodes are replaced whole, then removed ones dropped; the controller
//     quorum, the security state and the coordinator registry are
//     replaced when the delta carries them.
//   - A delta before any snapshot fails with ErrNoSnapshot.
package metaview

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// ErrNoSnapshot is returned by Apply for a delta that arrives before any
// snapshot: there is nothing to apply it to.
var ErrNoSnapshot = errors.New("metaview: delta before the first snapshot")

// View is the cluster metadata at one version. Immutable once built:
// nothing in it (the protobuf messages included) is modified afterwards,
// and callers must not modify what they read either.
type View struct {
	// Version is the metadata version (etcd revision) of the last applied
	// message; 0 in a view built by hand before any message.
	Version int64
	// ClusterID is the cluster's UUID text.
	ClusterID string
	// Topics by name.
	Topics map[string]*commonv1.TopicMetadata
	// Nodes by node id: every registered node, dead ones included.
	Nodes map[int32]*controllerv1.NodeStatus
	// Controllers is the controller quorum; nil when never reported.
	Controllers *controllerv1.ControllerQuorum
	// Security is the users, ACLs and quotas (lib/guard applies them);
	// nil when never reported.
	Security *commonv1.SecurityState
	// Coordinators is the live coordinator instances that registered with
	// the controller (RegisterCoordinator), sorted by Kafka node id; nil
	// when never reported (a controller that predates the registry).
	Coordinators *controllerv1.CoordinatorRegistry
}

// Partition returns the metadata of one partition, or nil when the topic
// or the partition does not exist.
func (v *View) Partition(topic string, partition int32) *commonv1.PartitionMetadata {
	t := v.Topics[topic]
	if t == nil {
		return nil
	}
	if i, ok := partitionIndex(t.GetPartitions(), partition); ok {
		return t.GetPartitions()[i]
	}
	return nil
}

// NodeAddress returns the Connect base URL of a node and whether the node
// is known, not dead and has an address: where a request may be routed.
func (v *View) NodeAddress(id int32) (string, bool) {
	n := v.Nodes[id]
	if n == nil || n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD || n.GetNode().GetAddress() == "" {
		return "", false
	}
	return n.GetNode().GetAddress(), true
}

// RegisteredAddress returns the Connect base URL a node registered with,
// dead or not, or "" for an unknown node.
func (v *View) RegisteredAddress(id int32) string {
	return v.Nodes[id].GetNode().GetAddress()
}

// Apply returns the view after msg. v may be nil (nothing applied yet).
// A stale delta returns v itself; see the package documentation for the
// rules. v is never modified.
func (v *View) Apply(msg *controllerv1.WatchMetadataResponse) (*View, error) {
	switch ch := msg.GetChange().(type) {
	case *controllerv1.WatchMetadataResponse_Snapshot:
		return fromSnapshot(msg.GetVersion(), ch.Snapshot), nil
	case *controllerv1.WatchMetadataResponse_Delta:
		if v == nil {
			return nil, ErrNoSnapshot
		}
		if msg.GetVersion() <= v.Version {
			return v, nil
		}
		return v.applyDelta(msg.GetVersion(), ch.Delta), nil
	default:
		return nil, fmt.Errorf("metaview: message at version %d has neither snapshot nor delta", msg.GetVersion())
	}
}

func fromSnapshot(version int64, s *controllerv1.MetadataSnapshot) *View {
	v := &View{
		Version:     version,
		ClusterID:   s.GetClusterId(),
		Topics:      make(map[string]*commonv1.TopicMetadata, len(s.GetTopics())),
		Nodes:       make(map[int32]*controllerv1.NodeStatus, len(s.GetNodes())),
		Controllers: s.GetControllers(),
		Security:    s.GetSecurity(),

		Coordinators: s.GetCoordinators(),
	}
	for _, t := range s.GetTopics() {
		v.Topics[t.GetName()] = t
	}
	for _, n := range s.GetNodes() {
		v.Nodes[n.GetNode().GetNodeId()] = n
	}
	return v
}

// applyDelta builds the view after d from old without touching old.
func (old *View) applyDelta(version int64, d *controllerv1.MetadataDelta) *View {
	v := &View{
		Version:     version,
		ClusterID:   old.ClusterID,
		Topics:      old.Topics,
		Nodes:       old.Nodes,
		Controllers: old.Controllers,
		Security:    old.Security,

		Coordinators: old.Coordinators,
	}
	if len(d.GetTopics()) > 0 || len(d.GetPartitions()) > 0 || len(d.GetDeletedTopics()) > 0 {
		v.Topics = maps.Clone(old.Topics)
		if v.Topics == nil {
			v.Topics = map[string]*commonv1.TopicMetadata{}
		}
		for _, dt := range d.GetDeletedTopics() {
			t := v.Topics[dt.GetName()]
			if t != nil && (dt.GetTopicId() == "" || dt.GetTopicId() == t.GetTopicId()) {
				delete(v.Topics, dt.GetName())
			}
		}
		for _, t := range d.GetTopics() {
			v.Topics[t.GetName()] = t
		}
		for _, pc := range d.GetPartitions() {
			t := v.Topics[pc.GetTopic()]
			if t == nil || pc.GetPartition() == nil || (pc.GetTopicId() != "" && t.GetTopicId() != pc.GetTopicId()) {
				continue // a topic we do not have, or an older incarnation of it
			}
			v.Topics[t.GetName()] = withPartition(t, pc.GetPartition())
		}
	}
	if len(d.GetNodes()) > 0 || len(d.GetRemovedNodeIds()) > 0 {
		v.Nodes = maps.Clone(old.Nodes)
		if v.Nodes == nil {
			v.Nodes = map[int32]*controllerv1.NodeStatus{}
		}
		for _, n := range d.GetNodes() {
			v.Nodes[n.GetNode().GetNodeId()] = n
		}
		for _, id := range d.GetRemovedNodeIds() {
			delete(v.Nodes, id)
		}
	}
	if d.GetSecurity() != nil {
		v.Security = d.GetSecurity()
	}
	if d.GetControllers() != nil {
		v.Controllers = d.GetControllers()
	}
	if d.GetCoordinators() != nil {
		v.Coordinators = d.GetCoordinators()
	}
	return v
}

// partitionIndex finds partition p in ps, which the controller keeps
// ordered by index, so the index is normally the position; an unordered
// slice (as a hand-built view may have) is searched whole.
func partitionIndex(ps []*commonv1.PartitionMetadata, p int32) (int, bool) {
	if p >= 0 && int(p) < len(ps) && ps[p].GetPartition() == p {
		return int(p), true
	}
	i := slices.IndexFunc(ps, func(e *commonv1.PartitionMetadata) bool { return e.GetPartition() == p })
	return i, i >= 0
}

// withPartition returns a copy of t with partition p replaced, or inserted
// before the first partition of a higher index.
func withPartition(t *commonv1.TopicMetadata, p *commonv1.PartitionMetadata) *commonv1.TopicMetadata {
	parts := slices.Clone(t.GetPartitions())
	if i, ok := partitionIndex(parts, p.GetPartition()); ok {
		parts[i] = p
	} else {
		at := slices.IndexFunc(parts, func(e *commonv1.PartitionMetadata) bool { return e.GetPartition() > p.GetPartition() })
		if at < 0 {
			at = len(parts)
		}
		parts = slices.Insert(parts, at, p)
	}
	return &commonv1.TopicMetadata{
		Name:       t.GetName(),
		TopicId:    t.GetTopicId(),
		Partitions: parts,
		Configs:    t.GetConfigs(),
		Internal:   t.GetInternal(),
	}
}
