package metastore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/controller/internal/placement"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// DefaultNodeSessionTimeout is the default node lease TTL.
const DefaultNodeSessionTimeout = 6 * time.Second

// Store reads and writes the metadata through one etcd client. Every
// method is safe for concurrent use and may be called on any controller:
// writes are etcd transactions guarded by what they read (see the package
// comment), so they need no active controller to serialize them.
type Store struct {
	cl *clientv3.Client
	// NodeTTL is the lease TTL of a node registration, rounded up to whole
	// seconds (etcd lease granularity); at least 1 s.
	NodeTTL time.Duration
	// steps is what StepReassignments remembers between passes.
	steps stepsState
}

// New returns a Store on cl. nodeTTL 0 means DefaultNodeSessionTimeout.
func New(cl *clientv3.Client, nodeTTL time.Duration) *Store {
	if nodeTTL <= 0 {
		nodeTTL = DefaultNodeSessionTimeout
	}
	return &Store{cl: cl, NodeTTL: nodeTTL}
}

func (s *Store) ttlSeconds() int64 {
	sec := int64((s.NodeTTL + time.Second - 1) / time.Second)
	return max(sec, 1)
}

// Client is the etcd client.
func (s *Store) Client() *clientv3.Client { return s.cl }

// EnsureClusterID creates the cluster id if absent and returns it.
func (s *Store) EnsureClusterID(ctx context.Context) (string, error) {
	id := uuid.NewString()
	resp, err := s.cl.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(KeyClusterID), "=", 0)).
		Then(clientv3.OpPut(KeyClusterID, id)).
		Else(clientv3.OpGet(KeyClusterID)).Commit()
	if err != nil {
		return "", err
	}
	if resp.Succeeded {
		return id, nil
	}
	return string(resp.Responses[0].GetResponseRange().Kvs[0].Value), nil
}

// Load reads the whole metadata at the latest revision.
func (s *Store) Load(ctx context.Context) (*Model, error) { return Load(ctx, s.cl, 0) }

// RegisterNode records a node registration under a new lease and returns
// the node epoch (the registration's etcd revision). The same incarnation
// registering again gets the same epoch.
func (s *Store) RegisterNode(ctx context.Context, node *commonv1.Node, incarnation string) (int64, error) {
	if node.GetNodeId() < 0 {
		return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative node id %d", node.GetNodeId())
	}
	if u, err := url.Parse(node.GetAddress()); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "node address %q is not an http(s) URL", node.GetAddress())
	}
	if incarnation == "" {
		return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "empty incarnation id")
	}
	names := map[string]bool{}
	for _, l := range node.GetListeners() {
		if err := serve.CheckListenerName(l.GetName()); err != nil {
			return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "node %d: %v", node.GetNodeId(), err)
		}
		if names[l.GetName()] {
			return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "node %d: listener %q named twice", node.GetNodeId(), l.GetName())
		}
		names[l.GetName()] = true
		check := serve.CheckBaseURL
		if l.GetName() == serve.KafkaListenerName {
			check = serve.CheckKafkaURL // the node's Kafka protocol listener
		}
		if err := check(l.GetAddress()); err != nil {
			return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "node %d: listener %q: %v", node.GetNodeId(), l.GetName(), err)
		}
	}
	id := node.GetNodeId()
	rec, err := proto.Marshal(&controllerv1.NodeStatus{Node: node, IncarnationId: incarnation})
	if err != nil {
		return 0, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := s.cl.Get(ctx, liveKey(id))
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) == 1 {
			kv := resp.Kvs[0]
			if string(kv.Value) == incarnation {
				// A retry of the same registration: renew and answer the same epoch.
				if _, err := s.cl.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
					return kv.CreateRevision, nil
				}
				continue
			}
			return 0, errf(commonv1.Code_CODE_ALREADY_EXISTS, commonv1.Reason_REASON_DUPLICATE_NODE_REGISTRATION,
				"node %d is registered by another live process; retry after its lease expires", id)
		}
		lease, err := s.cl.Grant(ctx, s.ttlSeconds())
		if err != nil {
			return 0, err
		}
		tx, err := s.cl.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(liveKey(id)), "=", 0)).
			Then(clientv3.OpPut(liveKey(id), incarnation, clientv3.WithLease(lease.ID)),
				clientv3.OpPut(nodeKey(id), string(rec))).Commit()
		if err != nil {
			s.cl.Revoke(context.WithoutCancel(ctx), lease.ID)
			return 0, err
		}
		if tx.Succeeded {
			return tx.Header.Revision, nil
		}
		s.cl.Revoke(ctx, lease.ID)
	}
	return 0, errf(commonv1.Code_CODE_UNAVAILABLE, 0, "node %d registration raced repeatedly; retry", id)
}

// Heartbeat renews node id's lease if epoch is its current node epoch and
// returns the lease TTL.
func (s *Store) Heartbeat(ctx context.Context, id int32, epoch int64) (time.Duration, error) {
	resp, err := s.cl.Get(ctx, liveKey(id))
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		nresp, err := s.cl.Get(ctx, nodeKey(id), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		if nresp.Count == 0 {
			return 0, errf(commonv1.Code_CODE_NOT_FOUND, 0, "node %d is not registered", id)
		}
		return 0, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH,
			"node %d lease expired; register again", id)
	}
	kv := resp.Kvs[0]
	if kv.CreateRevision != epoch {
		return 0, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH,
			"node %d epoch %d is stale (current %d); register again", id, epoch, kv.CreateRevision)
	}
	ka, err := s.cl.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH,
			"node %d lease expired; register again", id)
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// CreateTopicRequest is what CreateTopic needs.
type CreateTopicRequest struct {
	Name              string
	Partitions        int32
	ReplicationFactor int32
	Configs           map[string]string
	ValidateOnly      bool
	Internal          bool
}

// MaxPartitions bounds one topic's partition count (one etcd transaction
// writes them all).
const MaxPartitions = 10000

// CreateTopic validates req, places the replicas over the live nodes and
// writes the topic and all its partitions in one transaction.
func (s *Store) CreateTopic(ctx context.Context, req CreateTopicRequest) (*controllerv1.TopicDescription, error) {
	if err := ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	if req.Partitions < 0 || req.Partitions > MaxPartitions {
		return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "partitions %d out of range 0..%d", req.Partitions, MaxPartitions)
	}
	if req.ReplicationFactor < 0 {
		return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative replication factor %d", req.ReplicationFactor)
	}
	if err := validateConfigs(req.Configs); err != nil {
		return nil, err
	}
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	if m.Topics[req.Name] != nil {
		return nil, errf(commonv1.Code_CODE_ALREADY_EXISTS, commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, "topic %q already exists", req.Name)
	}
	var live []placement.Node
	for id := range m.Live {
		if m.Drained[id] {
			continue // a drained node receives no new replicas (rebalance.md)
		}
		live = append(live, placement.Node{ID: id, Rack: m.Nodes[id].GetNode().GetRack()})
	}
	parts := int(req.Partitions)
	if parts == 0 {
		parts = 1
	}
	rf := int(req.ReplicationFactor)
	if rf == 0 {
		rf = min(3, max(len(live), 1))
	}
	h := fnv.New32a()
	h.Write([]byte(req.Name))
	assign, err := placement.Assign(live, parts, rf, int(h.Sum32()%1024))
	if errors.Is(err, placement.ErrReplicationFactor) {
		return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR,
			"replication factor %d is larger than the %d live nodes", rf, len(live))
	}
	if err != nil {
		return nil, err
	}
	topic := &commonv1.TopicMetadata{Name: req.Name, Configs: req.Configs, Internal: req.Internal}
	if !req.ValidateOnly {
		topic.TopicId = uuid.NewString()
	}
	nm := NewModel()
	nm.Live = m.Live
	nm.Topics[req.Name] = topic
	nm.Partitions[req.Name] = map[int32]*commonv1.PartitionMetadata{}
	ops := []clientv3.Op{}
	for i, replicas := range assign {
		p := &commonv1.PartitionMetadata{Partition: int32(i), LeaderId: replicas[0], Replicas: replicas}
		assignISR(p, nil, replicas, m.nodeEpoch) // empty logs: every replica is in sync as registered now
		nm.Partitions[req.Name][int32(i)] = p
		b, err := proto.Marshal(p)
		if err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpPut(partitionKey(req.Name, int32(i)), string(b)))
	}
	if req.ValidateOnly {
		return nm.Describe(req.Name), nil
	}
	b, err := proto.Marshal(topic)
	if err != nil {
		return nil, err
	}
	// No stray partition keys can exist: DeleteTopic removes them in the
	// same transaction as the topic key.
	ops = append(ops, clientv3.OpPut(topicKey(req.Name), string(b)))
	tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(topicKey(req.Name)), "=", 0)).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !tx.Succeeded {
		return nil, errf(commonv1.Code_CODE_ALREADY_EXISTS, commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, "topic %q already exists", req.Name)
	}
	return nm.Describe(req.Name), nil
}

// DeleteTopic deletes a topic and its partitions; topicID, when not empty,
// must match.
func (s *Store) DeleteTopic(ctx context.Context, name, topicID string) (string, error) {
	for {
		resp, err := s.cl.Get(ctx, topicKey(name))
		if err != nil {
			return "", err
		}
		if len(resp.Kvs) == 0 {
			return "", errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q not found", name)
		}
		t := &commonv1.TopicMetadata{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, t); err != nil {
			return "", err
		}
		if topicID != "" && t.GetTopicId() != topicID {
			return "", errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
				"topic %q with id %s not found", name, topicID)
		}
		tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(topicKey(name)), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(topicKey(name)), clientv3.OpDelete(partitionsPrefix(name), clientv3.WithPrefix())).Commit()
		if err != nil {
			return "", err
		}
		if tx.Succeeded {
			return t.GetTopicId(), nil
		}
	}
}

// AlterTopicConfig sets and deletes overrides in one CAS on the topic key.
func (s *Store) AlterTopicConfig(ctx context.Context, name string, set map[string]string, del []string, validateOnly bool) ([]*controllerv1.ConfigEntry, error) {
	if err := validateConfigs(set); err != nil {
		return nil, err
	}
	for _, k := range del {
		if !topicconfig.Known(k) {
			return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_CONFIG, "unknown topic config key %q", k)
		}
		if _, ok := set[k]; ok {
			return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_CONFIG, "topic config key %q both set and deleted", k)
		}
	}
	for {
		resp, err := s.cl.Get(ctx, topicKey(name))
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return nil, errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q not found", name)
		}
		t := &commonv1.TopicMetadata{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, t); err != nil {
			return nil, err
		}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		for k, v := range set {
			t.Configs[k] = v
		}
		for _, k := range del {
			delete(t.Configs, k)
		}
		p0, err := s.cl.Get(ctx, partitionKey(name, 0))
		if err != nil {
			return nil, err
		}
		rf := 0
		if len(p0.Kvs) == 1 {
			pm := &commonv1.PartitionMetadata{}
			if proto.Unmarshal(p0.Kvs[0].Value, pm) == nil {
				rf = len(pm.Replicas)
			}
		}
		if validateOnly {
			return configEntries(t.Configs, rf), nil
		}
		b, err := proto.Marshal(t)
		if err != nil {
			return nil, err
		}
		tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(topicKey(name)), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(topicKey(name), string(b))).Commit()
		if err != nil {
			return nil, err
		}
		if tx.Succeeded {
			return configEntries(t.Configs, rf), nil
		}
	}
}

// AllocateProducerIDs reserves count ids by CAS on the counter; blocks
// never overlap.
func (s *Store) AllocateProducerIDs(ctx context.Context, count int32) (int64, error) {
	if count < 1 || count > 10000 {
		return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "count %d out of range 1..10000", count)
	}
	for {
		resp, err := s.cl.Get(ctx, KeyProducerIDs)
		if err != nil {
			return 0, err
		}
		var next, rev int64
		if len(resp.Kvs) == 1 {
			next, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("metastore: bad producer id counter: %w", err)
			}
			rev = resp.Kvs[0].ModRevision
		}
		tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(KeyProducerIDs), "=", rev)).
			Then(clientv3.OpPut(KeyProducerIDs, strconv.FormatInt(next+int64(count), 10))).Commit()
		if err != nil {
			return 0, err
		}
		if tx.Succeeded {
			return next, nil
		}
	}
}
