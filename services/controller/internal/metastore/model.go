package metastore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Model is the decoded content of every key under Prefix at one etcd
// revision. It is built by Load and moved forward by Apply; it is not safe
// for concurrent use.
type Model struct {
	// Revision is the etcd revision the model reflects.
	Revision int64
	// ClusterID is the cluster id, empty before the first controller start.
	ClusterID string
	// Topics holds the stored topic records (overrides only) by name.
	Topics map[string]*commonv1.TopicMetadata
	// TopicRevs holds each topic key's ModRevision.
	TopicRevs map[string]int64
	// Partitions holds partition records by topic and index.
	Partitions map[string]map[int32]*commonv1.PartitionMetadata
	// PartitionRevs holds each partition key's ModRevision.
	PartitionRevs map[string]map[int32]int64
	// Nodes holds the registration of every node ever registered.
	Nodes map[int32]*controllerv1.NodeStatus
	// Live holds the live keys of nodes with an unexpired lease.
	Live map[int32]LiveNode
	// Controllers holds the announced controllers by id.
	Controllers map[string]*controllerv1.ControllerMember
	// Candidates holds election keys: key to candidate.
	Candidates map[string]Candidate
	// Drained holds the drained node ids.
	Drained map[int32]bool
	// Throttle is the replication throttle of moving replicas in bytes per
	// second; 0 when none. ThrottleRev is its key's ModRevision (0 absent).
	Throttle    int64
	ThrottleRev int64
	// Generation is the reassignment generation counter (see keys.go) and
	// GenerationRev its key's ModRevision (0 absent).
	Generation    int64
	GenerationRev int64
	// BalancedNodes is the node set the last automatic rebalance ran for,
	// and BalancedNodesRev its key's ModRevision (0 absent).
	BalancedNodes    string
	BalancedNodesRev int64
	// Users holds the users by name, with their token hashes.
	Users map[string]*commonv1.UserCredential
	// Acls holds the ACL bindings by key (aclKey).
	Acls map[string]*commonv1.AclBinding
	// Quotas holds the quotas by key (quotaKey).
	Quotas map[string]*commonv1.Quota
	// SCRAMMockSecret is the cluster's mock SCRAM secret, nil before
	// EnsureSCRAMMockSecret.
	SCRAMMockSecret []byte
	// Coordinators holds the live coordinator registrations by Kafka
	// node id.
	Coordinators map[int32]*controllerv1.CoordinatorRegistration
}

// LiveNode is a node's live key.
type LiveNode struct {
	Epoch       int64 // CreateRevision of the live key: the node epoch
	Incarnation string
	Lease       clientv3.LeaseID
}

// Candidate is one election key.
type Candidate struct {
	CreateRevision int64
	Hint           *commonv1.ControllerHint
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{
		Topics:        map[string]*commonv1.TopicMetadata{},
		TopicRevs:     map[string]int64{},
		Partitions:    map[string]map[int32]*commonv1.PartitionMetadata{},
		PartitionRevs: map[string]map[int32]int64{},
		Nodes:         map[int32]*controllerv1.NodeStatus{},
		Live:          map[int32]LiveNode{},
		Controllers:   map[string]*controllerv1.ControllerMember{},
		Candidates:    map[string]Candidate{},
		Drained:       map[int32]bool{},
		Users:         map[string]*commonv1.UserCredential{},
		Acls:          map[string]*commonv1.AclBinding{},
		Quotas:        map[string]*commonv1.Quota{},
		Coordinators:  map[int32]*controllerv1.CoordinatorRegistration{},
	}
}

// Load reads every key under Prefix, linearizably, at rev (0 for the
// latest revision).
func Load(ctx context.Context, kv clientv3.KV, rev int64) (*Model, error) {
	return loadPrefix(ctx, kv, Prefix, rev)
}

// loadPrefix is Load of the keys under prefix only (a prefix of Prefix):
// the rest of the model stays empty.
func loadPrefix(ctx context.Context, kv clientv3.KV, prefix string, rev int64) (*Model, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := kv.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	return modelOf(rev, resp.Kvs)
}

// loadPrefixes is Load of the keys under each of prefixes (or the single
// keys named), read in one transaction so they are of one revision; the
// rest of the model stays empty. It is for the active controller's
// periodic passes, which need a few kinds of record and not, say, the
// security state.
func loadPrefixes(ctx context.Context, kv clientv3.KV, prefixes ...string) (*Model, error) {
	ops := make([]clientv3.Op, len(prefixes))
	for i, p := range prefixes {
		ops[i] = clientv3.OpGet(p, clientv3.WithPrefix())
	}
	resp, err := kv.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	ranges := make([][]*mvccpb.KeyValue, len(resp.Responses))
	for i, r := range resp.Responses {
		ranges[i] = r.GetResponseRange().GetKvs()
	}
	return modelOf(resp.Header.Revision, ranges...)
}

// modelOf decodes the keys of ranges, read at revision rev, into a model.
func modelOf(rev int64, ranges ...[]*mvccpb.KeyValue) (*Model, error) {
	m := NewModel()
	for _, kvs := range ranges {
		for _, kv := range kvs {
			if err := m.put(kv); err != nil {
				return nil, err
			}
		}
	}
	m.Revision = rev
	return m, nil
}

// Touched says which entities a set of changes affected.
type Touched struct {
	Topics      map[string]string // name to topic id at the time of the change
	Partitions  map[string]map[int32]bool
	Nodes       map[int32]bool
	Controllers bool
	// Security is set when a user, ACL or quota changed: the delta then
	// carries the whole security state.
	Security bool
	// Coordinators is set when a coordinator registration came or went:
	// the delta then carries the whole registry.
	Coordinators bool
}

func newTouched() *Touched {
	return &Touched{Topics: map[string]string{}, Partitions: map[string]map[int32]bool{}, Nodes: map[int32]bool{}}
}

func (t *Touched) partition(topic string, p int32) {
	if t.Partitions[topic] == nil {
		t.Partitions[topic] = map[int32]bool{}
	}
	t.Partitions[topic][p] = true
}

// Empty reports whether nothing was touched.
func (t *Touched) Empty() bool {
	return len(t.Topics) == 0 && len(t.Partitions) == 0 && len(t.Nodes) == 0 && !t.Controllers && !t.Security && !t.Coordinators
}

// Apply applies watch events (all of one revision) and records what they touched.
func (m *Model) Apply(events []*clientv3.Event, t *Touched) error {
	for _, ev := range events {
		k := string(ev.Kv.Key)
		switch {
		case strings.HasPrefix(k, PrefixTopics):
			name := strings.TrimPrefix(k, PrefixTopics)
			if old := m.Topics[name]; old != nil {
				t.Topics[name] = old.GetTopicId()
			} else {
				t.Topics[name] = ""
			}
		case strings.HasPrefix(k, PrefixPartitions):
			if topic, p, ok := parsePartitionKey(k); ok {
				t.partition(topic, p)
			}
		case strings.HasPrefix(k, PrefixNodes):
			if id, ok := parseNodeID(k, PrefixNodes); ok {
				t.Nodes[id] = true
			}
		case strings.HasPrefix(k, PrefixLive):
			if id, ok := parseNodeID(k, PrefixLive); ok {
				t.Nodes[id] = true
				// offline_replicas of every partition on the node change.
				for topic, parts := range m.Partitions {
					for idx, p := range parts {
						if contains(p.GetReplicas(), id) {
							t.partition(topic, idx)
						}
					}
				}
			}
		case strings.HasPrefix(k, PrefixControllers), strings.HasPrefix(k, electionKeys):
			t.Controllers = true
		case strings.HasPrefix(k, PrefixDrained):
			if id, ok := parseNodeID(k, PrefixDrained); ok {
				t.Nodes[id] = true
			}
		case k == KeyThrottle:
			// Every node's status carries the throttle.
			for id := range m.Nodes {
				t.Nodes[id] = true
			}
		case strings.HasPrefix(k, PrefixSecurity):
			t.Security = true
		case strings.HasPrefix(k, PrefixCoordinators):
			t.Coordinators = true
		}
		var err error
		if ev.Type == mvccpb.DELETE {
			m.delete(k)
		} else {
			err = m.put(ev.Kv)
		}
		if err != nil {
			return err
		}
		if ev.Kv.ModRevision > m.Revision {
			m.Revision = ev.Kv.ModRevision
		}
	}
	return nil
}

func (m *Model) put(kv *mvccpb.KeyValue) error {
	k := string(kv.Key)
	switch {
	case k == KeyClusterID:
		m.ClusterID = string(kv.Value)
	case strings.HasPrefix(k, PrefixTopics):
		t := &commonv1.TopicMetadata{}
		if err := proto.Unmarshal(kv.Value, t); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		name := strings.TrimPrefix(k, PrefixTopics)
		m.Topics[name] = t
		m.TopicRevs[name] = kv.ModRevision
	case strings.HasPrefix(k, PrefixPartitions):
		topic, idx, ok := parsePartitionKey(k)
		if !ok {
			return nil
		}
		p := &commonv1.PartitionMetadata{}
		if err := proto.Unmarshal(kv.Value, p); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		if m.Partitions[topic] == nil {
			m.Partitions[topic] = map[int32]*commonv1.PartitionMetadata{}
			m.PartitionRevs[topic] = map[int32]int64{}
		}
		m.Partitions[topic][idx] = p
		m.PartitionRevs[topic][idx] = kv.ModRevision
	case strings.HasPrefix(k, PrefixNodes):
		id, ok := parseNodeID(k, PrefixNodes)
		if !ok {
			return nil
		}
		n := &controllerv1.NodeStatus{}
		if err := proto.Unmarshal(kv.Value, n); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Nodes[id] = n
	case strings.HasPrefix(k, PrefixLive):
		if id, ok := parseNodeID(k, PrefixLive); ok {
			m.Live[id] = LiveNode{Epoch: kv.CreateRevision, Incarnation: string(kv.Value), Lease: clientv3.LeaseID(kv.Lease)}
		}
	case strings.HasPrefix(k, PrefixControllers):
		c := &controllerv1.ControllerMember{}
		if err := proto.Unmarshal(kv.Value, c); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Controllers[strings.TrimPrefix(k, PrefixControllers)] = c
	case strings.HasPrefix(k, electionKeys):
		h := &commonv1.ControllerHint{}
		if err := proto.Unmarshal(kv.Value, h); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Candidates[k] = Candidate{CreateRevision: kv.CreateRevision, Hint: h}
	case strings.HasPrefix(k, PrefixDrained):
		if id, ok := parseNodeID(k, PrefixDrained); ok {
			m.Drained[id] = true
		}
	case k == KeyThrottle:
		v, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Throttle, m.ThrottleRev = v, kv.ModRevision
	case k == KeyGeneration:
		v, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Generation, m.GenerationRev = v, kv.ModRevision
	case k == KeyBalancedNodes:
		m.BalancedNodes, m.BalancedNodesRev = string(kv.Value), kv.ModRevision
	case k == KeySCRAMMockSecret:
		m.SCRAMMockSecret = kv.Value
	case strings.HasPrefix(k, PrefixUsers):
		u := &commonv1.UserCredential{}
		if err := proto.Unmarshal(kv.Value, u); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Users[strings.TrimPrefix(k, PrefixUsers)] = u
	case strings.HasPrefix(k, PrefixAcls):
		b := &commonv1.AclBinding{}
		if err := proto.Unmarshal(kv.Value, b); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Acls[k] = b
	case strings.HasPrefix(k, PrefixQuotas):
		q := &commonv1.Quota{}
		if err := proto.Unmarshal(kv.Value, q); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Quotas[k] = q
	case strings.HasPrefix(k, PrefixCoordinators):
		id, ok := parseNodeID(k, PrefixCoordinators)
		if !ok {
			return nil
		}
		c := &controllerv1.CoordinatorRegistration{}
		if err := proto.Unmarshal(kv.Value, c); err != nil {
			return fmt.Errorf("metastore: decode %s: %w", k, err)
		}
		m.Coordinators[id] = c
	}
	return nil
}

func (m *Model) delete(k string) {
	switch {
	case strings.HasPrefix(k, PrefixTopics):
		name := strings.TrimPrefix(k, PrefixTopics)
		delete(m.Topics, name)
		delete(m.TopicRevs, name)
	case strings.HasPrefix(k, PrefixPartitions):
		if topic, idx, ok := parsePartitionKey(k); ok {
			delete(m.Partitions[topic], idx)
			delete(m.PartitionRevs[topic], idx)
			if len(m.Partitions[topic]) == 0 {
				delete(m.Partitions, topic)
				delete(m.PartitionRevs, topic)
			}
		}
	case strings.HasPrefix(k, PrefixNodes):
		if id, ok := parseNodeID(k, PrefixNodes); ok {
			delete(m.Nodes, id)
		}
	case strings.HasPrefix(k, PrefixLive):
		if id, ok := parseNodeID(k, PrefixLive); ok {
			delete(m.Live, id)
		}
	case strings.HasPrefix(k, PrefixControllers):
		delete(m.Controllers, strings.TrimPrefix(k, PrefixControllers))
	case strings.HasPrefix(k, electionKeys):
		delete(m.Candidates, k)
	case strings.HasPrefix(k, PrefixDrained):
		if id, ok := parseNodeID(k, PrefixDrained); ok {
			delete(m.Drained, id)
		}
	case k == KeyThrottle:
		m.Throttle, m.ThrottleRev = 0, 0
	case k == KeyGeneration:
		m.Generation, m.GenerationRev = 0, 0
	case k == KeyBalancedNodes:
		m.BalancedNodes, m.BalancedNodesRev = "", 0
	case k == KeySCRAMMockSecret:
		m.SCRAMMockSecret = nil
	case strings.HasPrefix(k, PrefixUsers):
		delete(m.Users, strings.TrimPrefix(k, PrefixUsers))
	case strings.HasPrefix(k, PrefixAcls):
		delete(m.Acls, k)
	case strings.HasPrefix(k, PrefixQuotas):
		delete(m.Quotas, k)
	case strings.HasPrefix(k, PrefixCoordinators):
		if id, ok := parseNodeID(k, PrefixCoordinators); ok {
			delete(m.Coordinators, id)
		}
	}
}

// IsLive reports whether node id holds an unexpired lease.
func (m *Model) IsLive(id int32) bool { _, ok := m.Live[id]; return ok }

// Active returns the active controller: the election candidate with the
// lowest CreateRevision, or nil.
func (m *Model) Active() *commonv1.ControllerHint {
	var best *Candidate
	for _, c := range m.Candidates {
		if best == nil || c.CreateRevision < best.CreateRevision {
			c := c
			best = &c
		}
	}
	if best == nil {
		return nil
	}
	return best.Hint
}

// Quorum renders the controllers.
func (m *Model) Quorum() *controllerv1.ControllerQuorum {
	q := &controllerv1.ControllerQuorum{}
	active := m.Active()
	if active != nil {
		q.ActiveControllerId = active.GetControllerId()
	}
	ids := make([]string, 0, len(m.Controllers))
	for id := range m.Controllers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := m.Controllers[id]
		q.Members = append(q.Members, &controllerv1.ControllerMember{
			ControllerId: id, Address: c.GetAddress(), Active: id == q.ActiveControllerId, Healthy: true,
		})
	}
	return q
}

// Partition renders one partition with its offline replicas.
func (m *Model) Partition(topic string, idx int32) *commonv1.PartitionMetadata {
	p := m.Partitions[topic][idx]
	if p == nil {
		return nil
	}
	out := proto.Clone(p).(*commonv1.PartitionMetadata)
	out.OfflineReplicas = nil
	out.MinInsyncReplicas = int32(m.minInsync(topic, p))
	for _, r := range p.GetReplicas() {
		if !m.IsLive(r) {
			out.OfflineReplicas = append(out.OfflineReplicas, r)
		}
	}
	return out
}

// ReplicationFactor is the replica count of a topic's partitions, for
// display and for placing new partitions: of the lowest-numbered one not
// being moved if there is one (a moving partition lists the replicas it is
// adding and removing too), else the target of the lowest-numbered one.
// After a move partitions may differ; what acks=all needs is decided per
// partition (PartitionMetadata.min_insync_replicas), never from this.
func (m *Model) ReplicationFactor(topic string) int {
	rf := 0
	for _, idx := range slices.Sorted(maps.Keys(m.Partitions[topic])) {
		p := m.Partitions[topic][idx]
		if !Moving(p) {
			return len(p.GetReplicas())
		}
		if rf == 0 {
			rf = len(Target(p))
		}
	}
	return rf
}

// Topic renders a topic with effective configs and every partition.
func (m *Model) Topic(name string) *commonv1.TopicMetadata {
	t := m.Topics[name]
	if t == nil {
		return nil
	}
	out := &commonv1.TopicMetadata{
		Name: name, TopicId: t.GetTopicId(), Internal: t.GetInternal(),
		Configs: topicconfig.Effective(t.GetConfigs(), m.ReplicationFactor(name)),
	}
	idxs := make([]int32, 0, len(m.Partitions[name]))
	for idx := range m.Partitions[name] {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		out.Partitions = append(out.Partitions, m.Partition(name, idx))
	}
	return out
}

// Describe renders a topic as admin tools show it.
func (m *Model) Describe(name string) *controllerv1.TopicDescription {
	t := m.Topic(name)
	if t == nil {
		return nil
	}
	return &controllerv1.TopicDescription{
		Name: name, TopicId: t.TopicId, ReplicationFactor: int32(m.ReplicationFactor(name)),
		Partitions: t.Partitions, Configs: configEntries(m.Topics[name].GetConfigs(), m.ReplicationFactor(name)),
		Internal: t.Internal,
	}
}

// TopicNames returns every topic name, sorted.
func (m *Model) TopicNames() []string {
	out := make([]string, 0, len(m.Topics))
	for n := range m.Topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Node renders one node's status.
func (m *Model) Node(id int32) *controllerv1.NodeStatus {
	n := m.Nodes[id]
	if n == nil {
		return nil
	}
	out := &controllerv1.NodeStatus{Node: n.GetNode(), IncarnationId: n.GetIncarnationId(), LastHeartbeatMs: -1,
		Drained: m.Drained[id], ReplicationThrottleBytesPerSecond: m.Throttle}
	if l, ok := m.Live[id]; ok {
		out.NodeEpoch = l.Epoch
		out.IncarnationId = l.Incarnation
		out.State = controllerv1.NodeState_NODE_STATE_ALIVE
	} else {
		out.NodeEpoch = -1
		out.State = controllerv1.NodeState_NODE_STATE_DEAD
	}
	return out
}

// NodeList renders every node sorted by id.
func (m *Model) NodeList() []*controllerv1.NodeStatus {
	ids := make([]int32, 0, len(m.Nodes))
	for id := range m.Nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]*controllerv1.NodeStatus, 0, len(ids))
	for _, id := range ids {
		out = append(out, m.Node(id))
	}
	return out
}

// Snapshot renders the whole metadata, the security state included
// (never nil, empty when there are no users, ACLs or quotas).
func (m *Model) Snapshot() *controllerv1.MetadataSnapshot {
	s := &controllerv1.MetadataSnapshot{ClusterId: m.ClusterID, Nodes: m.NodeList(), Controllers: m.Quorum(), Security: m.Security(),
		Coordinators: m.CoordinatorRegistry()}
	for _, n := range m.TopicNames() {
		s.Topics = append(s.Topics, m.Topic(n))
	}
	return s
}

// Delta renders what t touched, against the model after the change.
func (m *Model) Delta(t *Touched) *controllerv1.MetadataDelta {
	d := &controllerv1.MetadataDelta{}
	names := make([]string, 0, len(t.Topics))
	for n := range t.Topics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if tm := m.Topic(n); tm != nil {
			d.Topics = append(d.Topics, tm)
		} else if t.Topics[n] != "" {
			d.DeletedTopics = append(d.DeletedTopics, &controllerv1.DeletedTopic{Name: n, TopicId: t.Topics[n]})
		}
	}
	ptopics := make([]string, 0, len(t.Partitions))
	for n := range t.Partitions {
		ptopics = append(ptopics, n)
	}
	sort.Strings(ptopics)
	for _, n := range ptopics {
		if _, whole := t.Topics[n]; whole || m.Topics[n] == nil {
			continue
		}
		idxs := make([]int32, 0, len(t.Partitions[n]))
		for idx := range t.Partitions[n] {
			idxs = append(idxs, idx)
		}
		sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
		for _, idx := range idxs {
			if p := m.Partition(n, idx); p != nil {
				d.Partitions = append(d.Partitions, &controllerv1.PartitionChange{Topic: n, TopicId: m.Topics[n].GetTopicId(), Partition: p})
			}
		}
	}
	ids := make([]int32, 0, len(t.Nodes))
	for id := range t.Nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if n := m.Node(id); n != nil {
			d.Nodes = append(d.Nodes, n)
		} else {
			d.RemovedNodeIds = append(d.RemovedNodeIds, id)
		}
	}
	if t.Controllers {
		d.Controllers = m.Quorum()
	}
	if t.Security {
		// Whole, and empty rather than nil once the last entry is gone:
		// nil means unchanged.
		d.Security = m.Security()
	}
	if t.Coordinators {
		d.Coordinators = m.CoordinatorRegistry()
	}
	return d
}

func contains(s []int32, x int32) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
