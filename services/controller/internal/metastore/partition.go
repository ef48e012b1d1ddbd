package metastore

import (
	"cmp"
	"context"
	"maps"
	"slices"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// NextPartitionState is the controller's reaction to node liveness for one
// partition. epoch gives each node's live registration (0 when it holds no
// lease); unclean is the topic's unclean.leader.election.enable. It
// returns the new state and true when the state must change; epochs are
// already bumped.
//
// Rules:
//   - members that are not in sync (isr.go: dead, or registered again since
//     they joined) leave the ISR, except that the ISR never becomes empty:
//     its last member stays (the old leader when it was in the ISR) so that
//     it can lead again when it returns, even as a new incarnation, since
//     no other replica is known to hold what it had;
//   - a partition whose leader is not in sync gets the first replica (in
//     replica order) that is, else no leader (-1);
//   - only with unclean set, an offline partition may elect any live
//     replica, whose ISR then is itself alone;
//   - a leader change, or the same leader as a new incarnation, bumps the
//     leader epoch; any change bumps the partition epoch.
func NextPartitionState(p *commonv1.PartitionMetadata, epoch epochOf, unclean bool) (*commonv1.PartitionMetadata, bool) {
	var isr []int32
	for _, r := range p.GetIsr() {
		if inSync(p, r, epoch) {
			isr = append(isr, r)
		}
	}
	leader := p.GetLeaderId()
	if leader < 0 || !slices.Contains(isr, leader) {
		leader = -1
		for _, r := range p.GetReplicas() {
			if slices.Contains(isr, r) {
				leader = r
				break
			}
		}
	}
	// joined records the incarnation of a member that rejoins as itself
	// alone: the last member, back as a new registration.
	joined := noEpoch
	if len(isr) == 0 && len(p.GetIsr()) > 0 {
		last := p.GetIsr()[0]
		if p.GetLeaderId() >= 0 && slices.Contains(p.GetIsr(), p.GetLeaderId()) {
			last = p.GetLeaderId()
		}
		isr = []int32{last}
		if e := epoch(last); e != 0 {
			leader = last
			joined = func(int32) int64 { return e }
		}
	}
	if leader < 0 && unclean {
		for _, r := range p.GetReplicas() {
			// A replica a move is adding may hold nothing yet.
			if e := epoch(r); e != 0 && !slices.Contains(p.GetAddingReplicas(), r) {
				leader, isr = r, []int32{r}
				joined = func(int32) int64 { return e }
				break
			}
		}
	}
	prev := p
	if joined(leader) != 0 {
		prev = nil // a rejoined incarnation replaces the member's recorded one
	}
	// Decided before the record is copied: a pass over every partition
	// mostly finds nothing to change.
	epochs := isrEpochs(prev, isr, joined)
	leaderChanged := leader != p.GetLeaderId() || joined(leader) != 0 && joined(leader) != p.GetIsrNodeEpochs()[leader]
	if !leaderChanged && slices.Equal(isr, p.GetIsr()) && maps.Equal(epochs, p.GetIsrNodeEpochs()) {
		return p, false
	}
	next := proto.Clone(p).(*commonv1.PartitionMetadata)
	next.OfflineReplicas = nil
	next.Isr, next.IsrNodeEpochs = slices.Clone(isr), epochs
	if leaderChanged {
		next.LeaderId = leader
		next.LeaderEpoch++
	}
	next.PartitionEpoch++
	return next, true
}

// Reconcile applies NextPartitionState to every partition. The changed
// records are written in transactions of up to maxBatch partitions, those
// that lose their leader first; each transaction is guarded by the
// ModRevision of every partition it writes and by guard (the active
// controller's election key, so a deposed controller writes nothing and
// gets ErrNotActive). It is level-triggered and idempotent: a controller
// that fails over mid-way leaves every partition either old or new, and
// the next active controller finishes the rest. A transaction that finds
// a partition changed since it was read writes nothing; the partitions
// that changed are decided again from their current records, read by
// that same transaction, and written with the others in a later one
// (putAll). It returns how many partitions changed.
func (s *Store) Reconcile(ctx context.Context, guard clientv3.Cmp) (int, error) {
	n, _, err := s.reconcile(ctx, guard)
	return n, err
}

// reconcile is Reconcile, also returning the revision it read when it
// found every partition as NextPartitionState would leave it (0 when it
// had something to write).
func (s *Store) reconcile(ctx context.Context, guard clientv3.Cmp) (int, int64, error) {
	m, err := loadPrefixes(ctx, s.cl, PrefixTopics, PrefixPartitions, PrefixLive)
	if err != nil {
		return 0, 0, err
	}
	decide := func(topic string, _ int32, p *commonv1.PartitionMetadata) (*commonv1.PartitionMetadata, bool) {
		return NextPartitionState(p, m.nodeEpoch, uncleanElection(m.Topics[topic]))
	}
	ws := m.writes(decide)
	// A partition without its leader is unavailable until written; one
	// that only loses a follower from its ISR is not.
	rank := func(w partWrite) int {
		if w.next.GetLeaderId() != w.prev.GetLeaderId() {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(ws, func(a, b partWrite) int { return cmp.Compare(rank(a), rank(b)) })
	if len(ws) == 0 {
		return 0, m.Revision, nil
	}
	done, err := s.putAll(ctx, guard, ws, decide)
	for _, w := range done {
		partitionChanged(ctx, w.topic, w.index, w.prev, w.next, uncleanElection(m.Topics[w.topic])) // telemetry.go
	}
	return len(done), 0, err
}

// uncleanElection reports whether topic t allows unclean leader election
// (unclean.leader.election.enable).
func uncleanElection(t *commonv1.TopicMetadata) bool {
	return topicconfig.Effective(t.GetConfigs(), 0)[topicconfig.UncleanLeaderElectionEnable] == "true"
}

// AlterPartition applies a leader's ISR change requests. Each is a
// compare-and-set: it applies only when the sender leads the partition at
// the given leader epoch and the partition epoch is the one the leader saw;
// the new ISR must be live replicas and include the leader, and every
// member it adds must be named with the node epoch of its current
// registration (KIP-903): the leader vouches for an incarnation it saw
// fetch, and a node that registered again since may have come back with a
// shorter or empty log.
//
// The items are read in transactions of alterReadBatch and the accepted
// ones written in transactions of many partitions (a leader that lost a
// follower sends one item for each partition it leads, thousands at
// 10 000 partitions), each transaction compared on every record and
// registration its items read. A transaction that fails writes nothing,
// and its items are tried again one by one (alterOne), each read afresh,
// so every item is answered as if alone.
func (s *Store) AlterPartition(ctx context.Context, nodeID int32, nodeEpoch int64, items []*controllerv1.AlterPartitionItem) ([]*controllerv1.AlterPartitionResult, error) {
	lresp, err := s.cl.Get(ctx, PrefixLive, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	live := map[int32]int64{}
	for _, kv := range lresp.Kvs {
		if id, ok := parseNodeID(string(kv.Key), PrefixLive); ok {
			live[id] = kv.CreateRevision
		}
	}
	if live[nodeID] != nodeEpoch || nodeEpoch == 0 {
		return nil, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH,
			"node %d epoch %d is not current; register again", nodeID, nodeEpoch)
	}
	out := make([]*controllerv1.AlterPartitionResult, len(items))
	answer := func(i int, state *commonv1.PartitionMetadata, err error) error {
		res := &controllerv1.AlterPartitionResult{Topic: items[i].GetTopic(), Partition: items[i].GetPartition(), State: state}
		if err != nil {
			if res.Error = Detail(err); res.Error == nil {
				return err
			}
		}
		out[i] = res
		return nil
	}
	var plans []alterPlan
	for start := 0; start < len(items); start += alterReadBatch {
		chunk := items[start:min(start+alterReadBatch, len(items))]
		ops := make([]clientv3.Op, 0, 2*len(chunk))
		for _, it := range chunk {
			ops = append(ops, clientv3.OpGet(topicKey(it.GetTopic())), clientv3.OpGet(partitionKey(it.GetTopic(), it.GetPartition())))
		}
		resp, err := s.cl.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for j, it := range chunk {
			tkvs, pkvs := resp.Responses[2*j].GetResponseRange().Kvs, resp.Responses[2*j+1].GetResponseRange().Kvs
			plan, state, err := checkAlter(nodeID, nodeEpoch, it, tkvs, pkvs, live)
			if err != nil {
				if err := answer(start+j, state, err); err != nil {
					return nil, err
				}
				continue
			}
			plan.item = start + j
			plans = append(plans, plan)
		}
	}
	// Batches: the sender's registration, then each item's record and the
	// registrations it adds, within etcd's default --max-txn-ops (128)
	// compares; a partition named twice goes in a later batch.
	var alone []alterPlan
	for len(plans) > 0 {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(liveKey(nodeID)), "=", nodeEpoch)}
		var puts []clientv3.Op
		keys, members := map[string]bool{}, map[int32]bool{}
		var batch, rest []alterPlan
		for _, pl := range plans {
			need := 1
			for _, r := range pl.added {
				if !members[r] {
					need++
				}
			}
			if keys[pl.key] || len(batch) > 0 && len(cmps)+need > 128 {
				rest = append(rest, pl)
				continue
			}
			keys[pl.key] = true
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(pl.key), "=", pl.rev))
			for _, r := range pl.added {
				if !members[r] {
					members[r] = true
					cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(liveKey(r)), "=", live[r]))
				}
			}
			b, err := proto.Marshal(pl.next)
			if err != nil {
				return nil, err
			}
			puts = append(puts, clientv3.OpPut(pl.key, string(b)))
			batch = append(batch, pl)
		}
		plans = rest
		tx, err := s.cl.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return nil, err
		}
		if !tx.Succeeded {
			alone = append(alone, batch...)
			continue
		}
		for _, pl := range batch {
			isrChanged(ctx, pl.it.GetTopic(), pl.it.GetPartition(), pl.prev.GetIsr(), pl.next.GetIsr()) // telemetry.go
			if err := answer(pl.item, pl.next, nil); err != nil {
				return nil, err
			}
		}
	}
	for _, pl := range alone {
		state, err := s.alterOne(ctx, nodeID, nodeEpoch, pl.it, live)
		if err := answer(pl.item, state, err); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// alterReadBatch is how many AlterPartition items one read transaction
// covers: two reads each, within etcd's default --max-txn-ops of 128.
const alterReadBatch = 64

// alterPlan is an AlterPartition item checked against the records read:
// the partition record to write over the one read at rev.
type alterPlan struct {
	it    *controllerv1.AlterPartitionItem
	item  int // its index in the request
	key   string
	rev   int64
	prev  *commonv1.PartitionMetadata
	next  *commonv1.PartitionMetadata
	added []int32 // members the change adds, whose registrations it relies on
}

// alterOne applies one item in its own transaction, read afresh.
func (s *Store) alterOne(ctx context.Context, nodeID int32, nodeEpoch int64, it *controllerv1.AlterPartitionItem, live map[int32]int64) (*commonv1.PartitionMetadata, error) {
	tk, pk := topicKey(it.GetTopic()), partitionKey(it.GetTopic(), it.GetPartition())
	resp, err := s.cl.Txn(ctx).Then(clientv3.OpGet(tk), clientv3.OpGet(pk)).Commit()
	if err != nil {
		return nil, err
	}
	pl, state, err := checkAlter(nodeID, nodeEpoch, it, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, live)
	if err != nil {
		return state, err
	}
	b, err := proto.Marshal(pl.next)
	if err != nil {
		return nil, err
	}
	// The CAS: the partition unchanged since read (every write bumps the
	// partition epoch, so ModRevision equality is partition-epoch equality),
	// the sender still the same incarnation, and so is every added member.
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(pk), "=", pl.rev),
		clientv3.Compare(clientv3.CreateRevision(liveKey(nodeID)), "=", nodeEpoch),
	}
	for _, r := range pl.added {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(liveKey(r)), "=", live[r]))
	}
	tx, err := s.cl.Txn(ctx).If(cmps...).Then(clientv3.OpPut(pk, string(b))).Else(clientv3.OpGet(pk)).Commit()
	if err != nil {
		return nil, err
	}
	if !tx.Succeeded {
		cur := pl.prev
		if kvs := tx.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			cur = &commonv1.PartitionMetadata{}
			_ = proto.Unmarshal(kvs[0].Value, cur)
		}
		return cur, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_PARTITION_EPOCH,
			"partition %s-%d changed concurrently (epoch %d)", it.GetTopic(), it.GetPartition(), cur.GetPartitionEpoch())
	}
	isrChanged(ctx, it.GetTopic(), it.GetPartition(), pl.prev.GetIsr(), pl.next.GetIsr()) // telemetry.go
	return pl.next, nil
}

// checkAlter checks item it from nodeID against the topic and partition
// records read (tkvs, pkvs) and the live registrations, and returns the
// record to write; or the error to answer with the partition's state.
func checkAlter(nodeID int32, nodeEpoch int64, it *controllerv1.AlterPartitionItem, tkvs, pkvs []*mvccpb.KeyValue, live map[int32]int64) (alterPlan, *commonv1.PartitionMetadata, error) {
	notFound := errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
		"partition %s-%d not found", it.GetTopic(), it.GetPartition())
	if len(tkvs) == 0 || len(pkvs) == 0 {
		return alterPlan{}, nil, notFound
	}
	t := &commonv1.TopicMetadata{}
	p := &commonv1.PartitionMetadata{}
	if err := proto.Unmarshal(tkvs[0].Value, t); err != nil {
		return alterPlan{}, nil, err
	}
	if err := proto.Unmarshal(pkvs[0].Value, p); err != nil {
		return alterPlan{}, nil, err
	}
	if it.GetTopicId() != "" && it.GetTopicId() != t.GetTopicId() {
		return alterPlan{}, nil, notFound
	}
	if p.GetLeaderId() != nodeID {
		return alterPlan{}, p, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER,
			"node %d does not lead %s-%d (leader %d)", nodeID, it.GetTopic(), it.GetPartition(), p.GetLeaderId())
	}
	if it.GetLeaderEpoch() != p.GetLeaderEpoch() {
		return alterPlan{}, p, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_FENCED_LEADER_EPOCH,
			"leader epoch %d is not current (%d)", it.GetLeaderEpoch(), p.GetLeaderEpoch())
	}
	if it.GetPartitionEpoch() != p.GetPartitionEpoch() {
		return alterPlan{}, p, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_PARTITION_EPOCH,
			"partition epoch %d is stale (current %d)", it.GetPartitionEpoch(), p.GetPartitionEpoch())
	}
	seen := map[int32]bool{}
	for _, r := range it.GetNewIsr() {
		if seen[r] || !slices.Contains(p.GetReplicas(), r) || live[r] == 0 {
			return alterPlan{}, p, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
				"node %d is not a live replica of %s-%d (or is named twice)", r, it.GetTopic(), it.GetPartition())
		}
		seen[r] = true
	}
	if !seen[nodeID] {
		return alterPlan{}, p, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
			"the new ISR of %s-%d must include the leader %d", it.GetTopic(), it.GetPartition(), nodeID)
	}
	epochs := map[int32]int64{}
	for _, m := range it.GetNewIsrMembers() {
		epochs[m.GetNodeId()] = m.GetNodeEpoch()
	}
	// Members added: each must be the incarnation the leader saw fetch.
	// The compare-and-set also checks that their registrations have not
	// changed since they were read.
	var added []int32
	for _, r := range it.GetNewIsr() {
		if r == nodeID || slices.Contains(p.GetIsr(), r) {
			continue
		}
		if e, ok := epochs[r]; !ok || e != live[r] {
			return alterPlan{}, p, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
				"node %d cannot join the ISR of %s-%d: the leader saw node epoch %d fetch, its current registration is %d; it must fetch again",
				r, it.GetTopic(), it.GetPartition(), epochs[r], live[r])
		}
		added = append(added, r)
	}
	if rec := p.GetIsrNodeEpochs()[nodeID]; rec != 0 && rec != nodeEpoch {
		return alterPlan{}, p, errf(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH,
			"node %d leads %s-%d as registration %d, but its ISR entry is registration %d's; the controller elects again",
			nodeID, it.GetTopic(), it.GetPartition(), nodeEpoch, rec)
	}
	next := proto.Clone(p).(*commonv1.PartitionMetadata)
	assignISR(next, p, it.GetNewIsr(), func(r int32) int64 {
		if r == nodeID {
			return nodeEpoch
		}
		return epochs[r]
	})
	next.PartitionEpoch++
	pk := partitionKey(it.GetTopic(), it.GetPartition())
	return alterPlan{it: it, key: pk, rev: pkvs[0].ModRevision, prev: p, next: next, added: added}, nil, nil
}
