// Package metacache holds the gateway's copy of the cluster metadata, fed by
// the controller's WatchMetadata stream: a full snapshot replaces everything,
// each delta replaces the elements it names.
//
// The cache is copy-on-write: every applied message publishes a new
// immutable State, so readers take one consistent view without locks and
// never see half a delta. Nothing in a published State (the protobuf
// messages included) is modified afterwards; callers must not modify what
// they read either.
package metacache

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// ErrNoSnapshot is returned by Apply for a delta that arrives before any
// snapshot: there is nothing to apply it to.
var ErrNoSnapshot = errors.New("metacache: delta before the first snapshot")

// State is one consistent view of the cluster metadata at one version.
// Immutable once published.
type State struct {
	// Version is the metadata version (etcd revision) of the last applied
	// message.
	Version int64
	// ClusterID is the cluster's UUID text.
	ClusterID string
	// Topics by name.
	Topics map[string]*commonv1.TopicMetadata
	// Nodes by node id: every registered node, dead ones included.
	Nodes map[int32]*controllerv1.NodeStatus
	// Controllers is the controller quorum; nil when never reported.
	Controllers *controllerv1.ControllerQuorum
}

// Partition returns the metadata of one partition, or nil when the topic
// or the partition does not exist.
func (s *State) Partition(topic string, partition int32) *commonv1.PartitionMetadata {
	t := s.Topics[topic]
	if t == nil {
		return nil
	}
	return findPartition(t.GetPartitions(), partition)
}

// NodeAddress returns the Connect base URL of a node and whether the node
// is known and not dead.
func (s *State) NodeAddress(id int32) (string, bool) {
	n := s.Nodes[id]
	if n == nil || n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD || n.GetNode().GetAddress() == "" {
		return "", false
	}
	return n.GetNode().GetAddress(), true
}

func findPartition(ps []*commonv1.PartitionMetadata, partition int32) *commonv1.PartitionMetadata {
	// Partitions are ordered by index, so the index is normally the position.
	if partition >= 0 && int(partition) < len(ps) && ps[partition].GetPartition() == partition {
		return ps[partition]
	}
	for _, p := range ps {
		if p.GetPartition() == partition {
			return p
		}
	}
	return nil
}

// Cache is the gateway's metadata. The zero value is not usable; use New.
// Safe for concurrent use: Apply is serialized internally, readers never
// block.
type Cache struct {
	mu      sync.Mutex // serializes Apply
	state   atomic.Pointer[State]
	ready   chan struct{}
	readyMu sync.Once
}

// New returns an empty cache, not ready until the first snapshot.
func New() *Cache {
	return &Cache{ready: make(chan struct{})}
}

// Load returns the current state, or nil before the first snapshot.
func (c *Cache) Load() *State { return c.state.Load() }

// Ready reports whether a snapshot has been applied.
func (c *Cache) Ready() bool { return c.state.Load() != nil }

// ReadyNotify is closed when the first snapshot has been applied.
func (c *Cache) ReadyNotify() <-chan struct{} { return c.ready }

// Apply applies one message of the WatchMetadata stream. A snapshot
// replaces the whole state. A delta replaces the topics, partitions and
// nodes it names, removes deleted topics and removed nodes, and is skipped
// when its version is not newer than the state's (a duplicate after a
// resume). A delta before any snapshot fails with ErrNoSnapshot.
func (c *Cache) Apply(msg *controllerv1.WatchMetadataResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ch := msg.GetChange().(type) {
	case *controllerv1.WatchMetadataResponse_Snapshot:
		c.state.Store(fromSnapshot(msg.GetVersion(), ch.Snapshot))
		c.readyMu.Do(func() { close(c.ready) })
		return nil
	case *controllerv1.WatchMetadataResponse_Delta:
		old := c.state.Load()
		if old == nil {
			return ErrNoSnapshot
		}
		if msg.GetVersion() <= old.Version {
			return nil
		}
		c.state.Store(applyDelta(old, msg.GetVersion(), ch.Delta))
		return nil
	default:
		return fmt.Errorf("metacache: message at version %d has neither snapshot nor delta", msg.GetVersion())
	}
}

func fromSnapshot(version int64, s *controllerv1.MetadataSnapshot) *State {
	st := &State{
		Version:     version,
		ClusterID:   s.GetClusterId(),
		Topics:      make(map[string]*commonv1.TopicMetadata, len(s.GetTopics())),
		Nodes:       make(map[int32]*controllerv1.NodeStatus, len(s.GetNodes())),
		Controllers: s.GetControllers(),
	}
	for _, t := range s.GetTopics() {
		st.Topics[t.GetName()] = t
	}
	for _, n := range s.GetNodes() {
		st.Nodes[n.GetNode().GetNodeId()] = n
	}
	return st
}

// applyDelta builds the state after d from old without touching old: maps
// are copied, changed topics are rebuilt with a new partition slice.
func applyDelta(old *State, version int64, d *controllerv1.MetadataDelta) *State {
	st := &State{
		Version:     version,
		ClusterID:   old.ClusterID,
		Topics:      old.Topics,
		Nodes:       old.Nodes,
		Controllers: old.Controllers,
	}
	if len(d.GetTopics()) > 0 || len(d.GetPartitions()) > 0 || len(d.GetDeletedTopics()) > 0 {
		st.Topics = maps.Clone(old.Topics)
		for _, t := range d.GetTopics() {
			st.Topics[t.GetName()] = t
		}
		for _, pc := range d.GetPartitions() {
			t := st.Topics[pc.GetTopic()]
			if t == nil || (pc.GetTopicId() != "" && t.GetTopicId() != pc.GetTopicId()) {
				continue // a change for a topic we do not have (or an older incarnation)
			}
			st.Topics[t.GetName()] = withPartition(t, pc.GetPartition())
		}
		for _, dt := range d.GetDeletedTopics() {
			t := st.Topics[dt.GetName()]
			if t != nil && (dt.GetTopicId() == "" || dt.GetTopicId() == t.GetTopicId()) {
				delete(st.Topics, dt.GetName())
			}
		}
	}
	if len(d.GetNodes()) > 0 || len(d.GetRemovedNodeIds()) > 0 {
		st.Nodes = maps.Clone(old.Nodes)
		for _, n := range d.GetNodes() {
			st.Nodes[n.GetNode().GetNodeId()] = n
		}
		for _, id := range d.GetRemovedNodeIds() {
			delete(st.Nodes, id)
		}
	}
	if d.GetControllers() != nil {
		st.Controllers = d.GetControllers()
	}
	return st
}

// withPartition returns a copy of t with partition p replaced (or added,
// keeping the slice ordered by index).
func withPartition(t *commonv1.TopicMetadata, p *commonv1.PartitionMetadata) *commonv1.TopicMetadata {
	parts := slices.Clone(t.GetPartitions())
	i, found := slices.BinarySearchFunc(parts, p.GetPartition(), func(e *commonv1.PartitionMetadata, idx int32) int {
		return int(e.GetPartition()) - int(idx)
	})
	if found {
		parts[i] = p
	} else {
		parts = slices.Insert(parts, i, p)
	}
	return &commonv1.TopicMetadata{
		Name:       t.GetName(),
		TopicId:    t.GetTopicId(),
		Partitions: parts,
		Configs:    t.GetConfigs(),
		Internal:   t.GetInternal(),
	}
}
