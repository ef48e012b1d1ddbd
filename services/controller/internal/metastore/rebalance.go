package metastore

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/services/controller/internal/balancer"
	"github.com/strata-mq/strata/services/controller/internal/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// PartitionKey names a partition in a size map.
type PartitionKey struct {
	Topic     string
	Partition int32
}

// balancerInput is the model as the balancer sees it: every registered
// node, every partition (a moving one at its target, fixed), with sizes
// from sizes (-1 when unknown).
func (m *Model) balancerInput(sizes map[PartitionKey]int64) balancer.Input {
	var in balancer.Input
	for id, n := range m.Nodes {
		in.Nodes = append(in.Nodes, balancer.Node{ID: id, Rack: n.GetNode().GetRack(), Alive: m.IsLive(id), Drained: m.Drained[id]})
	}
	slices.SortFunc(in.Nodes, func(a, b balancer.Node) int { return cmp.Compare(a.ID, b.ID) })
	for _, name := range m.TopicNames() {
		for idx, p := range m.Partitions[name] {
			size, ok := sizes[PartitionKey{name, idx}]
			if !ok {
				size = -1
			}
			in.Partitions = append(in.Partitions, balancer.Partition{
				Topic: name, Index: idx, Replicas: Target(p), Fixed: Moving(p), Size: size,
			})
		}
	}
	return in
}

// EligibleNodes returns the sorted ids of the live, undrained nodes, as
// text ("1,2,3"): the node set an automatic rebalance runs for.
func (m *Model) EligibleNodes() string {
	var ids []int32
	for id := range m.Live {
		if !m.Drained[id] && m.Nodes[id] != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}

// countedNodes is the node set the last automatic rebalance counted.
func (m *Model) countedNodes() []string {
	if m.BalancedNodes == "" {
		return nil
	}
	return strings.Split(m.BalancedNodes, ",")
}

// RebalanceDue reports whether an automatic rebalance is due: a live,
// undrained node was not counted by the last one (it joined, or was
// undrained), or a counted node is drained. A counted node that died is no
// reason: when it returns it holds what it held.
func (m *Model) RebalanceDue() bool {
	counted := m.countedNodes()
	for _, id := range strings.Split(m.EligibleNodes(), ",") {
		if id != "" && !slices.Contains(counted, id) {
			return true
		}
	}
	for id := range m.Drained {
		if slices.Contains(counted, strconv.Itoa(int(id))) {
			return true
		}
	}
	return false
}

// nextCounted is the node set an automatic rebalance records: the counted
// nodes still undrained (dead ones included) and every live, undrained
// node, sorted by id.
func (m *Model) nextCounted() string {
	set := map[int32]bool{}
	for _, s := range m.countedNodes() {
		if id, err := strconv.Atoi(s); err == nil && !m.Drained[int32(id)] {
			set[int32(id)] = true
		}
	}
	for _, s := range strings.Split(m.EligibleNodes(), ",") {
		if id, err := strconv.Atoi(s); err == nil {
			set[int32(id)] = true
		}
	}
	ids := make([]int32, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.Itoa(int(id))
	}
	return strings.Join(out, ",")
}

// LoadNodeSet is Load of what decides whether an automatic rebalance is
// due (the node registrations, their liveness, the drain marks and the
// reassignment keys), without the partitions: the automatic rebalance
// looks at it every second, and at the partitions only once the node set
// has changed and stayed the same for its delay.
func (s *Store) LoadNodeSet(ctx context.Context) (*Model, error) {
	return loadPrefixes(ctx, s.cl, PrefixNodes, PrefixLive, PrefixDrained, KeyBalancedNodes)
}

// RecordBalancedNodes records m's node set as counted without planning,
// if nothing is recorded yet and guard holds.
func (s *Store) RecordBalancedNodes(ctx context.Context, m *Model, guard clientv3.Cmp) error {
	tx, err := s.cl.Txn(ctx).If(guard, clientv3.Compare(clientv3.ModRevision(KeyBalancedNodes), "=", m.BalancedNodesRev)).
		Then(clientv3.OpPut(KeyBalancedNodes, m.nextCounted())).
		Else(clientv3.OpTxn([]clientv3.Cmp{guard}, nil, nil)).Commit()
	if err != nil {
		return err
	}
	if !tx.Succeeded && !tx.Responses[0].GetResponseTxn().GetSucceeded() {
		return ErrNotActive
	}
	return nil
}

// MovesRunning counts the partitions with a running move.
func (m *Model) MovesRunning() int {
	n := 0
	for _, parts := range m.Partitions {
		for _, p := range parts {
			if Moving(p) {
				n++
			}
		}
	}
	return n
}

// PlanOptions configure Rebalance.
type PlanOptions struct {
	// DryRun computes the plan and starts nothing.
	DryRun bool
	// Throttle, when above 0, is set with the moves.
	Throttle int64
	// Sizes are partition sizes in bytes, for choosing the smallest moves;
	// partitions missing count as unknown.
	Sizes map[PartitionKey]int64
	// OnlyIfNodesChanged makes the plan conditional, for the automatic
	// rebalance: it runs only when RebalanceDue, and records the node set
	// it counted in the same transaction (even when nothing moves).
	OnlyIfNodesChanged bool
	// Guard, when set, must hold for the moves to start (the active
	// controller's election key).
	Guard *clientv3.Cmp
}

// Rebalance plans the moves that even out the cluster (see package
// balancer) and, unless opts.DryRun, starts them all, conditioned on the
// partitions and the reassignment generation being what the plan was made
// from; on a conflict it plans again.
func (s *Store) Rebalance(ctx context.Context, opts PlanOptions) (*controllerv1.RebalanceResponse, error) {
	if opts.Throttle < 0 {
		return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative throttle %d", opts.Throttle)
	}
	for attempt := 0; attempt < 5; attempt++ {
		m, err := s.Load(ctx)
		if err != nil {
			return nil, err
		}
		if opts.OnlyIfNodesChanged && !m.RebalanceDue() {
			return &controllerv1.RebalanceResponse{}, nil
		}
		if m.EligibleNodes() == "" {
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, 0, "no storage node is alive and undrained")
		}
		in := m.balancerInput(opts.Sizes)
		moves := balancer.Plan(in)
		res := &controllerv1.RebalanceResponse{
			Moves: plannedMoves(moves), InProgress: int32(m.MovesRunning()),
			Before: nodeLoads(balancer.Loads(in.Nodes, in.Partitions)),
			After:  nodeLoads(balancer.Loads(in.Nodes, balancer.Apply(in.Partitions, moves))),
		}
		if opts.DryRun || (len(moves) == 0 && !opts.OnlyIfNodesChanged) {
			return res, nil
		}
		changes := m.moveChanges(moves)
		var extra []clientv3.Op
		if opts.OnlyIfNodesChanged {
			extra = append(extra, clientv3.OpPut(KeyBalancedNodes, m.nextCounted()))
		}
		err = s.commitGuarded(ctx, m, changes, opts.Throttle, opts.Guard, opts.OnlyIfNodesChanged, extra...)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		res.Started = len(moves) > 0
		return res, nil
	}
	return nil, movesConflict()
}

// commitGuarded is commitMoves with, optionally, the election guard and
// the recorded node set (as read in m) among the first transaction's
// conditions. It reports errConflict, or ErrNotActive when the guard no
// longer holds.
func (s *Store) commitGuarded(ctx context.Context, m *Model, changes []change, throttle int64, guard *clientv3.Cmp, nodesCond bool, extra ...clientv3.Op) error {
	var cmps []clientv3.Cmp
	if guard != nil {
		cmps = append(cmps, *guard)
	}
	if nodesCond {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(KeyBalancedNodes), "=", m.BalancedNodesRev))
	}
	err := s.commitMoves(ctx, m, changes, throttle, cmps, extra...)
	if errors.Is(err, errConflict) && guard != nil {
		tx, terr := s.cl.Txn(ctx).If(*guard).Commit()
		if terr != nil {
			return terr
		}
		if !tx.Succeeded {
			return ErrNotActive
		}
	}
	return err
}

// moveChanges turns planned moves into the records that start them.
func (m *Model) moveChanges(moves []balancer.Move) []change {
	l := m.leadership()
	out := make([]change, 0, len(moves))
	for _, mv := range moves {
		p := m.Partitions[mv.Topic][mv.Index]
		out = append(out, change{mv.Topic, mv.Index, startMove(p, mv.To, l)})
	}
	return out
}

func plannedMoves(moves []balancer.Move) []*controllerv1.PlannedMove {
	out := make([]*controllerv1.PlannedMove, 0, len(moves))
	for _, mv := range moves {
		out = append(out, &controllerv1.PlannedMove{Topic: mv.Topic, Partition: mv.Index, FromReplicas: mv.From, ToReplicas: mv.To, SizeBytes: mv.Size})
	}
	return out
}

func nodeLoads(loads []balancer.Load) []*controllerv1.NodeLoad {
	out := make([]*controllerv1.NodeLoad, 0, len(loads))
	for _, l := range loads {
		out = append(out, &controllerv1.NodeLoad{NodeId: l.ID, Replicas: int32(l.Replicas), Leaders: int32(l.Leaders), Eligible: l.Eligible})
	}
	return out
}

// DrainNode marks node id drained (or not) and, for a drain, starts the
// moves that take every replica off it, in the same transaction.
func (s *Store) DrainNode(ctx context.Context, id int32, undrain bool, throttle int64, sizes map[PartitionKey]int64) (*controllerv1.DrainNodeResponse, error) {
	if throttle < 0 {
		return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative throttle %d", throttle)
	}
	for attempt := 0; attempt < 5; attempt++ {
		m, err := s.Load(ctx)
		if err != nil {
			return nil, err
		}
		if m.Nodes[id] == nil {
			return nil, errf(commonv1.Code_CODE_NOT_FOUND, 0, "node %d is not registered", id)
		}
		if undrain {
			if _, err := s.cl.Delete(ctx, drainedKey(id)); err != nil {
				return nil, err
			}
			delete(m.Drained, id)
			return &controllerv1.DrainNodeResponse{Node: m.Node(id), Replicas: int32(m.replicaCount(id))}, nil
		}
		m.Drained[id] = true
		if m.EligibleNodes() == "" {
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, 0,
				"draining node %d would leave no node alive and undrained to take its replicas", id)
		}
		in := m.balancerInput(sizes)
		in.OnlyEvict = true
		moves := balancer.Plan(in)
		err = s.commitMoves(ctx, m, m.moveChanges(moves), throttle, nil, clientv3.OpPut(drainedKey(id), ""))
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &controllerv1.DrainNodeResponse{Node: m.Node(id), Moves: plannedMoves(moves), Replicas: int32(m.replicaCount(id))}, nil
	}
	return nil, movesConflict()
}

// replicaCount counts the partitions that list node id in their replicas
// (a replica being added or removed included).
func (m *Model) replicaCount(id int32) int {
	n := 0
	for _, parts := range m.Partitions {
		for _, p := range parts {
			if slices.Contains(p.GetReplicas(), id) {
				n++
			}
		}
	}
	return n
}

// preferredChoice returns who should lead p after a preferred-leader
// election and why not when nobody: the first replica (the preferred one),
// if it is alive, undrained and in sync.
func preferredChoice(p *commonv1.PartitionMetadata, l leadership) (int32, error) {
	if len(p.GetReplicas()) == 0 {
		return -1, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "partition has no replicas")
	}
	pref := p.GetReplicas()[0]
	switch {
	case !l.live(pref):
		return -1, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "preferred replica %d is not alive", pref)
	case l.drained(pref):
		return -1, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "preferred replica %d is drained", pref)
	case !slices.Contains(p.GetIsr(), pref):
		return -1, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "preferred replica %d is not in the ISR %v", pref, p.GetIsr())
	case !inSync(p, pref, l.epoch):
		return -1, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
			"preferred replica %d registered again since it joined the ISR; it must catch up first", pref)
	}
	return pref, nil
}

// uncleanChoice returns who leads p after an unclean election, and its
// ISR. Unclean applies only when no ISR member is in sync: the in-sync
// leader stays; else the first in-sync replica leads with the in-sync
// members as ISR (a clean election, as Kafka's unclean election also
// tries first); only with none, the first live replica that is not being
// added (an adding replica may hold nothing at all) leads alone.
//
// fresh reports an unclean leader: its ISR starts over, recording the
// incarnation alive now.
func uncleanChoice(p *commonv1.PartitionMetadata, l leadership) (leader int32, isr []int32, fresh bool, err error) {
	var synced []int32
	for _, r := range p.GetIsr() {
		if inSync(p, r, l.epoch) {
			synced = append(synced, r)
		}
	}
	if len(synced) > 0 {
		if slices.Contains(synced, p.GetLeaderId()) {
			return p.GetLeaderId(), p.GetIsr(), false, nil
		}
		for _, r := range p.GetReplicas() {
			if slices.Contains(synced, r) {
				return r, synced, false, nil
			}
		}
	}
	for _, r := range p.GetReplicas() {
		if l.live(r) && !slices.Contains(p.GetAddingReplicas(), r) {
			return r, []int32{r}, true, nil
		}
	}
	return -1, nil, false, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "no replica is alive")
}

// ElectLeaders runs preferred (or unclean) leader elections, each
// partition a compare-and-set on its record, retried on a concurrent
// change. Empty parts means every partition not led by its preferred
// replica (every offline one for unclean).
func (s *Store) ElectLeaders(ctx context.Context, typ controllerv1.ElectionType, parts []*commonv1.TopicPartitions) ([]*controllerv1.ElectLeadersResult, error) {
	unclean := typ == controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	type tp struct {
		topic string
		idx   int32
	}
	var want []tp
	if len(parts) == 0 {
		for _, name := range m.TopicNames() {
			for idx, p := range m.Partitions[name] {
				offline := p.GetLeaderId() < 0 || !m.IsLive(p.GetLeaderId())
				if (unclean && offline) || (!unclean && len(p.GetReplicas()) > 0 && p.GetLeaderId() != p.GetReplicas()[0]) {
					want = append(want, tp{name, idx})
				}
			}
		}
		slices.SortFunc(want, func(a, b tp) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.idx, b.idx)) })
	} else {
		for _, t := range parts {
			idxs := t.GetPartitions()
			if len(idxs) == 0 {
				for idx := range m.Partitions[t.GetTopic()] {
					idxs = append(idxs, idx)
				}
				slices.Sort(idxs)
			}
			for _, idx := range idxs {
				want = append(want, tp{t.GetTopic(), idx})
			}
		}
	}
	out := make([]*controllerv1.ElectLeadersResult, 0, len(want))
	for _, w := range want {
		res := &controllerv1.ElectLeadersResult{Topic: w.topic, Partition: w.idx, LeaderId: -1}
		out = append(out, res)
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				if m, err = s.Load(ctx); err != nil {
					return nil, err
				}
			}
			p := m.Partitions[w.topic][w.idx]
			if p == nil {
				res.Error = Detail(errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d not found", w.topic, w.idx))
				break
			}
			res.LeaderId, res.LeaderEpoch = p.GetLeaderId(), p.GetLeaderEpoch()
			var leader int32
			isr, fresh := p.GetIsr(), false
			if unclean {
				leader, isr, fresh, err = uncleanChoice(p, m.leadership())
			} else {
				leader, err = preferredChoice(p, m.leadership())
			}
			if err != nil {
				res.Error = Detail(err)
				break
			}
			if leader == p.GetLeaderId() {
				break
			}
			next := withLeader(p, leader)
			if fresh {
				assignISR(next, nil, isr, m.nodeEpoch)
			} else {
				assignISR(next, p, isr, noEpoch)
			}
			b, err := proto.Marshal(next)
			if err != nil {
				return nil, err
			}
			key := partitionKey(w.topic, w.idx)
			tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", m.PartitionRevs[w.topic][w.idx])).
				Then(clientv3.OpPut(key, string(b))).Commit()
			if err != nil {
				return nil, err
			}
			if tx.Succeeded {
				res.LeaderId, res.LeaderEpoch = next.GetLeaderId(), next.GetLeaderEpoch()
				break
			}
			if attempt == 4 {
				res.Error = Detail(errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_PARTITION_EPOCH,
					"partition %s-%d changed concurrently; retry", w.topic, w.idx))
				break
			}
		}
	}
	return out, nil
}

// BalanceLeaders is the automatic preferred-leader election (Kafka's
// auto.leader.rebalance.enable): for every live, undrained node whose
// share of partitions led by someone else, among those it is the
// preferred replica of, is above thresholdPct percent, the preferred
// replica takes back each of them where it can (alive, in the ISR). Moving
// partitions are left to their move. Writes go in transactions of up to
// maxBatch partitions guarded by guard (putAll). It returns how many
// leaders moved.
func (s *Store) BalanceLeaders(ctx context.Context, guard clientv3.Cmp, thresholdPct int) (int, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return 0, err
	}
	l := m.leadership()
	preferred, notLed := map[int32]int{}, map[int32]int{}
	for _, parts := range m.Partitions {
		for _, p := range parts {
			if Moving(p) || len(p.GetReplicas()) == 0 {
				continue
			}
			pref := p.GetReplicas()[0]
			preferred[pref]++
			if p.GetLeaderId() != pref {
				notLed[pref]++
			}
		}
	}
	decide := func(_ string, _ int32, p *commonv1.PartitionMetadata) (*commonv1.PartitionMetadata, bool) {
		if Moving(p) || len(p.GetReplicas()) == 0 || p.GetLeaderId() == p.GetReplicas()[0] {
			return p, false
		}
		pref := p.GetReplicas()[0]
		if notLed[pref]*100 <= thresholdPct*preferred[pref] {
			return p, false
		}
		if _, err := preferredChoice(p, l); err != nil {
			return p, false
		}
		return withLeader(p, pref), true
	}
	ws := m.writes(decide)
	done, err := s.putAll(ctx, guard, ws, decide)
	return len(done), err
}

// CreatePartitions adds partitions to a topic so it has total, placed over
// the live, undrained nodes as CreateTopic would place a topic of total
// partitions (the new ones continue its round robin), in one transaction
// conditioned on the topic record. The topic record is written again
// unchanged, so the metadata stream sends the whole topic.
func (s *Store) CreatePartitions(ctx context.Context, topic string, total int32, validateOnly bool) (*controllerv1.TopicDescription, error) {
	for attempt := 0; attempt < 5; attempt++ {
		m, err := s.Load(ctx)
		if err != nil {
			return nil, err
		}
		t := m.Topics[topic]
		if t == nil {
			return nil, errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q not found", topic)
		}
		cur := int32(len(m.Partitions[topic]))
		if total <= cur || total > MaxPartitions {
			return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0,
				"topic %q has %d partitions; the new total must be more, up to %d", topic, cur, MaxPartitions)
		}
		var live []placement.Node
		for id := range m.Live {
			if !m.Drained[id] && m.Nodes[id] != nil {
				live = append(live, placement.Node{ID: id, Rack: m.Nodes[id].GetNode().GetRack()})
			}
		}
		rf := m.ReplicationFactor(topic)
		h := fnv.New32a()
		h.Write([]byte(topic))
		assign, err := placement.Assign(live, int(total), rf, int(h.Sum32()%1024))
		if errors.Is(err, placement.ErrReplicationFactor) {
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR,
				"replication factor %d is larger than the %d live, undrained nodes", rf, len(live))
		}
		if err != nil {
			return nil, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(topicKey(topic)), "=", m.TopicRevs[topic])}
		tb, err := proto.Marshal(t)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{clientv3.OpPut(topicKey(topic), string(tb))}
		for i := cur; i < total; i++ {
			replicas := assign[i]
			p := &commonv1.PartitionMetadata{Partition: i, LeaderId: replicas[0], Replicas: replicas}
			assignISR(p, nil, replicas, m.nodeEpoch) // empty logs: in sync as registered now
			m.Partitions[topic][i] = p
			b, err := proto.Marshal(p)
			if err != nil {
				return nil, err
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(partitionKey(topic, i)), "=", 0))
			ops = append(ops, clientv3.OpPut(partitionKey(topic, i), string(b)))
		}
		if validateOnly {
			return m.Describe(topic), nil
		}
		tx, err := s.cl.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		if tx.Succeeded {
			return m.Describe(topic), nil
		}
	}
	return nil, errf(commonv1.Code_CODE_ABORTED, 0, "topic %q changed concurrently; retry", topic)
}
