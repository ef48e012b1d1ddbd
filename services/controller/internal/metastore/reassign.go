package metastore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Partition reassignment, as Kafka's KIP-455 does it. A move of a
// partition to target replicas T from current replicas C is three kinds of
// record change, each one etcd transaction conditioned on the partition's
// ModRevision (what the writer read):
//
//  1. grow: replicas = T followed by C−T, adding_replicas = T−C,
//     removing_replicas = C−T; leader and ISR unchanged. Storage nodes open
//     the adding replicas as followers; they catch up and the leader adds
//     them to the ISR with AlterPartition, like any follower.
//  2. lead: once every replica of T is in the ISR, if the leader is not the
//     first replica of T that can lead (alive, not drained, in the ISR),
//     that replica becomes leader (leader epoch + 1).
//  3. shrink: once every replica of T is in the ISR and the leader is in T,
//     replicas = T, ISR = ISR ∩ T, adding and removing cleared.
//
// Steps 2 and 3 are the active controller's (StepReassignments), level
// triggered from the records alone, so a controller failover resumes a
// move where it stands. The ISR never loses a member the move needs: the
// shrink waits until all of T is in the ISR, so it keeps len(T) in-sync
// replicas and never removes the only up-to-date copy.

// Target returns the replicas a partition has once its running move
// completes (replicas minus removing_replicas), or its replicas.
func Target(p *commonv1.PartitionMetadata) []int32 {
	return slices.DeleteFunc(slices.Clone(p.GetReplicas()), func(r int32) bool {
		return slices.Contains(p.GetRemovingReplicas(), r)
	})
}

// Moving reports whether a move of p runs.
func Moving(p *commonv1.PartitionMetadata) bool {
	return len(p.GetAddingReplicas()) > 0 || len(p.GetRemovingReplicas()) > 0
}

// leadership says which nodes may lead: in sync (isr.go: in the ISR,
// alive, as the incarnation that joined it) and not drained; in sync
// alone as a fallback when no undrained in-sync replica is left.
type leadership struct {
	epoch   epochOf
	drained func(int32) bool
}

func (l leadership) live(id int32) bool { return l.epoch(id) != 0 }

// can reports whether replica id of p may lead it by choice.
func (l leadership) can(p *commonv1.PartitionMetadata, id int32) bool {
	return inSync(p, id, l.epoch) && !l.drained(id)
}

// choose returns the first of candidates that is in isr (a subset of p's
// ISR) and can lead p, else the first in isr that is in sync, else -1.
func (l leadership) choose(p *commonv1.PartitionMetadata, candidates, isr []int32) int32 {
	for _, r := range candidates {
		if slices.Contains(isr, r) && l.can(p, r) {
			return r
		}
	}
	for _, r := range candidates {
		if slices.Contains(isr, r) && inSync(p, r, l.epoch) {
			return r
		}
	}
	return -1
}

func (m *Model) leadership() leadership {
	return leadership{epoch: m.nodeEpoch, drained: func(id int32) bool { return m.Drained[id] }}
}

// nodeEpoch is the epoch of node id's live registration, 0 when it holds
// no lease.
func (m *Model) nodeEpoch(id int32) int64 {
	if l, ok := m.Live[id]; ok {
		return l.Epoch
	}
	return 0
}

// withLeader returns a copy of p led by id (leader epoch bumped when it
// changes) with the partition epoch bumped.
func withLeader(p *commonv1.PartitionMetadata, id int32) *commonv1.PartitionMetadata {
	next := proto.Clone(p).(*commonv1.PartitionMetadata)
	next.OfflineReplicas = nil
	next.MinInsyncReplicas = 0 // rendered per partition by Model.Partition, never stored
	if id != p.GetLeaderId() {
		next.LeaderId = id
		next.LeaderEpoch++
	}
	next.PartitionEpoch++
	return next
}

// withReplicas sets next's replicas. When that removes any of prev's, the
// leader epoch is bumped (once per record) even if the leader stays, as
// Kafka does on a reassignment that removes replicas: a removed replica's
// late fetches are fenced, and the leader forgets everything it knew of
// its followers, so a replica removed and added back starts unknown
// instead of rejoining the ISR on what its deleted copy fetched.
func withReplicas(next, prev *commonv1.PartitionMetadata, replicas []int32) {
	next.Replicas = slices.Clone(replicas)
	for _, r := range prev.GetReplicas() {
		if !slices.Contains(replicas, r) {
			if next.GetLeaderEpoch() == prev.GetLeaderEpoch() {
				next.LeaderEpoch++
			}
			return
		}
	}
}

// startMove returns p's record with a move to target started (the grow
// step). A target with the same replicas in another order changes the
// order at once, and the new preferred replica leads if it can.
func startMove(p *commonv1.PartitionMetadata, target []int32, l leadership) *commonv1.PartitionMetadata {
	cur := p.GetReplicas()
	var adding, removing []int32
	for _, r := range target {
		if !slices.Contains(cur, r) {
			adding = append(adding, r)
		}
	}
	for _, r := range cur {
		if !slices.Contains(target, r) {
			removing = append(removing, r)
		}
	}
	if len(adding) == 0 && len(removing) == 0 {
		leader := p.GetLeaderId()
		if t0 := target[0]; t0 != leader && l.can(p, t0) {
			leader = t0
		}
		next := withLeader(p, leader)
		next.Replicas = slices.Clone(target)
		return next
	}
	next := withLeader(p, p.GetLeaderId())
	next.Replicas = append(slices.Clone(target), removing...)
	next.AddingReplicas, next.RemovingReplicas = adding, removing
	return next
}

// NextMoveStep returns the next step of p's running move (lead, then
// shrink; see the comment at the top of this file) and true, or p and
// false while a target replica is still out of the ISR, the partition has
// no leader in sync, or no move runs. The shrink runs only under a leader
// in sync among the targets: the replicas it removes delete their copies,
// which must not happen while the partition is offline (they may be all
// that is left if the targets never return).
func NextMoveStep(p *commonv1.PartitionMetadata, l leadership) (*commonv1.PartitionMetadata, bool) {
	if !Moving(p) || p.GetLeaderId() < 0 {
		return p, false
	}
	target := Target(p)
	for _, r := range target {
		if !slices.Contains(p.GetIsr(), r) {
			return p, false
		}
	}
	if want := l.choose(p, target, p.GetIsr()); want >= 0 && want != p.GetLeaderId() {
		return withLeader(p, want), true
	}
	if !slices.Contains(target, p.GetLeaderId()) || !inSync(p, p.GetLeaderId(), l.epoch) {
		return p, false // no target replica can lead yet
	}
	next := withLeader(p, p.GetLeaderId())
	withReplicas(next, p, target)
	assignISR(next, p, slices.DeleteFunc(slices.Clone(p.GetIsr()), func(r int32) bool { return !slices.Contains(target, r) }), noEpoch)
	next.AddingReplicas, next.RemovingReplicas = nil, nil
	return next, true
}

// drainLeaderStep moves leadership off a drained leader, at once rather
// than when a move of the partition completes, to the first in-sync replica
// that can lead (one the partition keeps first).
func drainLeaderStep(p *commonv1.PartitionMetadata, l leadership) (*commonv1.PartitionMetadata, bool) {
	leader := p.GetLeaderId()
	if leader < 0 || !l.drained(leader) {
		return p, false
	}
	for _, cands := range [][]int32{Target(p), p.GetReplicas()} {
		for _, r := range cands {
			if r != leader && l.can(p, r) {
				return withLeader(p, r), true
			}
		}
	}
	return p, false
}

// cancelMove returns p's record with its running move undone: the
// replicas it had (replicas minus adding), the ISR without the adding
// replicas, led by one of them. It fails when fewer than minISR (or all,
// if fewer) of the previous replicas are in sync: going back would
// strand the partition below min.insync.replicas, so the move must finish.
func cancelMove(p *commonv1.PartitionMetadata, minISR int, l leadership) (*commonv1.PartitionMetadata, error) {
	orig := slices.DeleteFunc(slices.Clone(p.GetReplicas()), func(r int32) bool {
		return slices.Contains(p.GetAddingReplicas(), r)
	})
	isr := slices.DeleteFunc(slices.Clone(p.GetIsr()), func(r int32) bool { return !slices.Contains(orig, r) })
	synced := slices.DeleteFunc(slices.Clone(isr), func(r int32) bool { return !inSync(p, r, l.epoch) })
	if len(synced) == 0 || len(synced) < min(minISR, len(orig)) {
		return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
			"cannot cancel: only %d of the previous replicas %v are in sync (min.insync.replicas %d); let the move complete",
			len(synced), orig, minISR)
	}
	leader := p.GetLeaderId()
	if !slices.Contains(synced, leader) {
		if leader = l.choose(p, orig, synced); leader < 0 {
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA,
				"cannot cancel: none of the previous replicas %v can lead", orig)
		}
	}
	next := withLeader(p, leader)
	withReplicas(next, p, orig)
	assignISR(next, p, isr, noEpoch)
	next.AddingReplicas, next.RemovingReplicas = nil, nil
	return next, nil
}

// minInsync is the effective min.insync.replicas of a topic's partition
// (isr.go's partitionMinInsync).
func (m *Model) minInsync(topic string, p *commonv1.PartitionMetadata) int {
	return partitionMinInsync(m.Topics[topic].GetConfigs(), p)
}

// errConflict means a compare of a move transaction failed: what it read
// changed; the caller reloads and tries again.
var errConflict = errors.New("metastore: metadata changed concurrently")

// movesConflict is what a caller sees after repeated conflicts.
func movesConflict() error {
	return errf(commonv1.Code_CODE_ABORTED, 0, "partitions changed concurrently while starting the moves; retry")
}

// change is one partition record to write.
type change struct {
	topic string
	index int32
	next  *commonv1.PartitionMetadata
}

// maxMovesPerTxn bounds one transaction of commitMoves (etcd caps a
// request's size; a plan over many partitions takes several).
const maxMovesPerTxn = 500

// commitMoves writes changes read in m, in transactions of at most
// maxMovesPerTxn, each conditioned on every partition it writes being
// unchanged since m and on the reassignment generation being what m (or
// the previous transaction of this call) left, and each bumping the
// generation. throttle > 0 sets the throttle, and extra conditions and
// ops (the election guard, drain marks) ride in the first transaction. errConflict means nothing of the first
// transaction was written (later ones may fail after earlier ones
// committed: each transaction is a consistent set of moves on its own).
func (s *Store) commitMoves(ctx context.Context, m *Model, changes []change, throttle int64, cond []clientv3.Cmp, extra ...clientv3.Op) error {
	genRev := m.GenerationRev
	gen := m.Generation
	first := true
	for first || len(changes) > 0 {
		n := min(len(changes), maxMovesPerTxn)
		batch := changes[:n]
		changes = changes[n:]
		gen++
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(KeyGeneration), "=", genRev)}
		ops := []clientv3.Op{clientv3.OpPut(KeyGeneration, strconv.FormatInt(gen, 10))}
		for _, c := range batch {
			key := partitionKey(c.topic, c.index)
			b, err := proto.Marshal(c.next)
			if err != nil {
				return err
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", m.PartitionRevs[c.topic][c.index]))
			ops = append(ops, clientv3.OpPut(key, string(b)))
		}
		if first {
			cmps = append(cmps, cond...)
			if throttle > 0 {
				ops = append(ops, clientv3.OpPut(KeyThrottle, strconv.FormatInt(throttle, 10)))
			}
			ops = append(ops, extra...)
		}
		tx, err := s.cl.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if !tx.Succeeded {
			return errConflict
		}
		genRev = tx.Header.Revision
		first = false
	}
	return nil
}

// MoveRequest is one partition's target replicas; empty Replicas cancels
// its running move.
type MoveRequest struct {
	Topic     string
	Partition int32
	Replicas  []int32
}

// AlterPartitionReassignments starts or cancels moves (KIP-455). The
// valid requests are written in one transaction with the throttle (when
// above 0); each invalid one is answered with its own error.
func (s *Store) AlterPartitionReassignments(ctx context.Context, reqs []MoveRequest, throttle int64) ([]*controllerv1.PartitionReassignmentResult, error) {
	if throttle < 0 {
		return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative throttle %d", throttle)
	}
	for attempt := 0; attempt < 5; attempt++ {
		m, err := s.Load(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]*controllerv1.PartitionReassignmentResult, len(reqs))
		var changes []change
		seen := map[string]bool{}
		for i, r := range reqs {
			res := &controllerv1.PartitionReassignmentResult{Topic: r.Topic, Partition: r.Partition}
			out[i] = res
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if seen[k] {
				res.Error = Detail(errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "partition %s-%d named twice", r.Topic, r.Partition))
				continue
			}
			seen[k] = true
			next, err := m.reassignment(r)
			if err != nil {
				res.Error = Detail(err)
				if res.Error == nil {
					return nil, err
				}
				res.State = m.Partition(r.Topic, r.Partition)
				continue
			}
			res.State = next
			if next != m.Partitions[r.Topic][r.Partition] {
				changes = append(changes, change{r.Topic, r.Partition, next})
			}
		}
		if len(changes) == 0 && throttle <= 0 {
			return out, nil
		}
		err = s.commitMoves(ctx, m, changes, throttle, nil)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, movesConflict()
}

// reassignment validates one request against m and returns the record to
// write, or m's own record when nothing changes.
func (m *Model) reassignment(r MoveRequest) (*commonv1.PartitionMetadata, error) {
	p := m.Partitions[r.Topic][r.Partition]
	if m.Topics[r.Topic] == nil || p == nil {
		return nil, errf(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
			"partition %s-%d not found", r.Topic, r.Partition)
	}
	l := m.leadership()
	if len(r.Replicas) == 0 {
		if !Moving(p) {
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, 0, "no move of %s-%d is running", r.Topic, r.Partition)
		}
		return cancelMove(p, m.minInsync(r.Topic, p), l)
	}
	seen := map[int32]bool{}
	for _, id := range r.Replicas {
		if id < 0 || seen[id] {
			return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "replicas %v: node %d is negative or named twice", r.Replicas, id)
		}
		seen[id] = true
	}
	if Moving(p) {
		if slices.Equal(Target(p), r.Replicas) {
			return p, nil // the same move again: already running
		}
		return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, 0,
			"a move of %s-%d to %v is running; wait for it or cancel it first", r.Topic, r.Partition, Target(p))
	}
	if slices.Equal(p.GetReplicas(), r.Replicas) {
		return p, nil
	}
	if mi := m.minInsync(r.Topic, p); len(r.Replicas) < mi {
		return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR,
			"%d replicas are fewer than the topic's min.insync.replicas %d", len(r.Replicas), mi)
	}
	for _, id := range r.Replicas {
		if slices.Contains(p.GetReplicas(), id) {
			continue
		}
		switch {
		case m.Nodes[id] == nil:
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "node %d is not registered", id)
		case !m.IsLive(id):
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "node %d is not alive", id)
		case m.Drained[id]:
			return nil, errf(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "node %d is drained", id)
		}
	}
	return startMove(p, r.Replicas, l), nil
}

// StepReassignments takes the next step of every running move (lead, then
// shrink) and moves leadership off drained nodes, in transactions of up
// to maxBatch partitions guarded by their ModRevisions and by guard (the
// active controller's election key). With no move left it lifts the
// throttle. It is level-triggered and idempotent, like Reconcile, and
// returns how many partitions changed.
//
// A pass that finds no move running, no drained node alive and no
// throttle set remembers the reassignment generation's ModRevision. Moves
// start only in transactions that bump the generation (commitMoves), and
// a dead node leads nothing once Reconcile has run, so while the
// generation is the same and no drained node is alive the next pass has
// nothing to do: it reads those few keys (stepsQuiet) instead of loading
// every partition.
func (s *Store) StepReassignments(ctx context.Context, guard clientv3.Cmp) (int, error) {
	if quiet, err := s.stepsQuiet(ctx); err != nil || quiet {
		return 0, err
	}
	m, err := s.Load(ctx)
	if err != nil {
		return 0, err
	}
	moving := m.MovesRunning()
	drainedLive := m.drainedLive()
	l := m.leadership()
	decide := func(_ string, _ int32, p *commonv1.PartitionMetadata) (*commonv1.PartitionMetadata, bool) {
		if next, ok := NextMoveStep(p, l); ok {
			return next, true
		}
		return drainLeaderStep(p, l)
	}
	var ws []partWrite
	if moving > 0 || len(m.Drained) > 0 {
		ws = m.writes(decide)
	}
	done, err := s.putAll(ctx, guard, ws, decide)
	if err != nil {
		return len(done), err
	}
	for _, w := range done {
		if Moving(w.prev) && !Moving(w.next) {
			moving--
		}
	}
	// A partition whose step found it changed may still be moving; the
	// generation compare below sees moves started since the load.
	if moving == 0 && m.ThrottleRev != 0 {
		tx, err := s.cl.Txn(ctx).If(guard,
			clientv3.Compare(clientv3.ModRevision(KeyGeneration), "=", m.GenerationRev),
			clientv3.Compare(clientv3.ModRevision(KeyThrottle), "=", m.ThrottleRev),
		).Then(clientv3.OpDelete(KeyThrottle)).Else(clientv3.OpTxn([]clientv3.Cmp{guard}, nil, nil)).Commit()
		if err != nil {
			return len(done), err
		}
		if !tx.Succeeded {
			if !tx.Responses[0].GetResponseTxn().GetSucceeded() {
				return len(done), ErrNotActive
			}
			return len(done), nil
		}
		m.ThrottleRev = 0
	}
	if m.MovesRunning() == 0 && !drainedLive && m.ThrottleRev == 0 {
		s.steps.setQuiet(m.GenerationRev)
	}
	return len(done), nil
}

// drainedLive reports whether a drained node is alive: only such a node
// can come to lead a partition (a dead one leaves every leadership at the
// next Reconcile).
func (m *Model) drainedLive() bool {
	for id := range m.Drained {
		if m.IsLive(id) {
			return true
		}
	}
	return false
}

// stepsState is what StepReassignments remembers between passes.
type stepsState struct {
	mu sync.Mutex
	// quiet is set by a pass that found nothing to step and no throttle
	// to lift; genRev is the generation key's ModRevision it read (0:
	// absent).
	quiet  bool
	genRev int64
}

func (st *stepsState) setQuiet(genRev int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.quiet, st.genRev = true, genRev
}

// stepsQuiet reports whether StepReassignments has nothing to do without
// loading the partitions: a pass found nothing to step and since then the
// generation has not changed (no move started), no drained node is alive
// and no throttle is set. It reads the generation key, the drain marks
// and live keys (keys only) and counts the throttle key, in one
// transaction.
func (s *Store) stepsQuiet(ctx context.Context) (bool, error) {
	s.steps.mu.Lock()
	quiet, genRev := s.steps.quiet, s.steps.genRev
	s.steps.mu.Unlock()
	if !quiet {
		return false, nil
	}
	tx, err := s.cl.Txn(ctx).Then(
		clientv3.OpGet(KeyGeneration, clientv3.WithKeysOnly()),
		clientv3.OpGet(KeyThrottle, clientv3.WithCountOnly()),
		clientv3.OpGet(PrefixDrained, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(PrefixLive, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return false, err
	}
	r := tx.Responses
	var rev int64
	if kvs := r[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		rev = kvs[0].ModRevision
	}
	if rev != genRev || r[1].GetResponseRange().GetCount() > 0 {
		return false, nil
	}
	m := NewModel()
	for _, kv := range append(r[2].GetResponseRange().GetKvs(), r[3].GetResponseRange().GetKvs()...) {
		if err := m.put(kv); err != nil {
			return false, err
		}
	}
	return !m.drainedLive(), nil
}

// ListReassignments returns every partition with a running move, in
// topics (all when empty), sorted by topic and partition, and the
// throttle.
func (s *Store) ListReassignments(ctx context.Context, topics []string) ([]*controllerv1.PartitionChange, int64, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return nil, 0, err
	}
	var out []*controllerv1.PartitionChange
	for _, name := range m.TopicNames() {
		if len(topics) > 0 && !slices.Contains(topics, name) {
			continue
		}
		t := m.Topic(name)
		for _, p := range t.GetPartitions() {
			if Moving(p) {
				out = append(out, &controllerv1.PartitionChange{Topic: name, TopicId: t.GetTopicId(), Partition: p})
			}
		}
	}
	return out, m.Throttle, nil
}
