package metastore

import (
	"context"
	"slices"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/services/controller/internal/balancer"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// alwaysActive is an election guard that always holds.
var alwaysActive = clientv3.Compare(clientv3.CreateRevision(KeyClusterID), "=", 0)

// partition reads one partition record.
func partition(t *testing.T, s *Store, topic string, idx int32) *commonv1.PartitionMetadata {
	t.Helper()
	m, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := m.Partitions[topic][idx]
	if p == nil {
		t.Fatalf("no partition %s-%d", topic, idx)
	}
	return p
}

// setISR writes the ISR as a leader's AlterPartition would (the test plays
// the leader), bumping the partition epoch.
func setISR(t *testing.T, s *Store, topic string, idx int32, isr ...int32) *commonv1.PartitionMetadata {
	t.Helper()
	p := proto.Clone(partition(t, s, topic, idx)).(*commonv1.PartitionMetadata)
	m, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	assignISR(p, proto.Clone(p).(*commonv1.PartitionMetadata), isr, m.nodeEpoch)
	p.PartitionEpoch++
	b, _ := proto.Marshal(p)
	if _, err := s.cl.Put(context.Background(), partitionKey(topic, idx), string(b)); err != nil {
		t.Fatal(err)
	}
	return p
}

// step runs StepReassignments until it changes nothing, and returns the
// number of changes.
func step(t *testing.T, s *Store) int {
	t.Helper()
	total := 0
	for range 10 {
		n, err := s.StepReassignments(context.Background(), alwaysActive)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("StepReassignments keeps changing partitions")
	return 0
}

func move(t *testing.T, s *Store, topic string, idx int32, replicas ...int32) *controllerv1.PartitionReassignmentResult {
	t.Helper()
	res, err := s.AlterPartitionReassignments(context.Background(), []MoveRequest{{Topic: topic, Partition: idx, Replicas: replicas}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func oneTopic(t *testing.T, nodes int) (*Store, *commonv1.PartitionMetadata) {
	t.Helper()
	s := startStore(t, 6*time.Second)
	epochs := map[int32]int64{}
	for id := int32(1); id <= int32(nodes); id++ {
		epochs[id] = register(t, s, id, "")
	}
	// Place the partition on 1, 2, 3 whatever the nodes: create with
	// three nodes' worth of placement, then pin it.
	if _, err := s.CreateTopic(context.Background(), CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	p := proto.Clone(partition(t, s, "t", 0)).(*commonv1.PartitionMetadata)
	p.Replicas, p.Isr, p.LeaderId = []int32{1, 2, 3}, []int32{1, 2, 3}, 1
	p.IsrNodeEpochs = map[int32]int64{1: epochs[1], 2: epochs[2], 3: epochs[3]}
	b, _ := proto.Marshal(p)
	if _, err := s.cl.Put(context.Background(), partitionKey("t", 0), string(b)); err != nil {
		t.Fatal(err)
	}
	return s, partition(t, s, "t", 0)
}

// A whole move, KIP-455 style: grow, wait for the ISR, lead, shrink. Every
// record on the way keeps at least min.insync.replicas (2) in the ISR and
// never drops a replica before the target is in sync.
func TestMoveGrowsLeadsShrinks(t *testing.T) {
	s, p0 := oneTopic(t, 5)
	res := move(t, s, "t", 0, 4, 5, 1)
	if res.Error != nil {
		t.Fatalf("start: %v", res.Error)
	}
	p := partition(t, s, "t", 0)
	if !slices.Equal(p.Replicas, []int32{4, 5, 1, 2, 3}) || !slices.Equal(p.AddingReplicas, []int32{4, 5}) ||
		!slices.Equal(p.RemovingReplicas, []int32{2, 3}) || !slices.Equal(p.Isr, p0.Isr) || p.LeaderId != 1 || p.LeaderEpoch != p0.LeaderEpoch {
		t.Fatalf("after grow: %v", p)
	}
	if !slices.Equal(Target(p), []int32{4, 5, 1}) {
		t.Fatalf("target %v", Target(p))
	}
	// Nothing happens while the adding replicas are out of the ISR, or
	// only one of them is in.
	if n := step(t, s); n != 0 {
		t.Fatalf("stepped %d partitions before the targets were in sync", n)
	}
	setISR(t, s, "t", 0, 1, 2, 3, 4)
	if n := step(t, s); n != 0 {
		t.Fatalf("stepped with node 5 out of the ISR")
	}
	before := setISR(t, s, "t", 0, 1, 2, 3, 4, 5)
	// Lead: node 4, the target's first replica, takes over while 2 and 3
	// are still replicas.
	if _, err := s.StepReassignments(context.Background(), alwaysActive); err != nil {
		t.Fatal(err)
	}
	p = partition(t, s, "t", 0)
	if p.LeaderId != 4 || p.LeaderEpoch != before.LeaderEpoch+1 || len(p.Replicas) != 5 {
		t.Fatalf("after the lead step: %v", p)
	}
	// Shrink.
	step(t, s)
	p = partition(t, s, "t", 0)
	if !slices.Equal(p.Replicas, []int32{4, 5, 1}) || len(p.AddingReplicas)+len(p.RemovingReplicas) != 0 ||
		!slices.Equal(p.Isr, []int32{1, 4, 5}) || p.LeaderId != 4 {
		t.Fatalf("after the shrink: %v", p)
	}
	// Removing replicas bumps the leader epoch though the leader stays:
	// the removed ones are fenced, and the leader forgets its followers.
	if p.LeaderEpoch != before.LeaderEpoch+2 {
		t.Fatalf("leader epoch %d after the lead step and the shrink, want %d", p.LeaderEpoch, before.LeaderEpoch+2)
	}
	if p.PartitionEpoch <= before.PartitionEpoch+1 {
		t.Fatalf("partition epoch %d not bumped by each step (was %d)", p.PartitionEpoch, before.PartitionEpoch)
	}
}

func TestMoveValidation(t *testing.T) {
	s, _ := oneTopic(t, 6)
	ctx := context.Background()
	if _, err := s.cl.Delete(ctx, liveKey(6)); err != nil { // node 6 dead
		t.Fatal(err)
	}
	if _, err := s.DrainNode(ctx, 5, false, 0, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		replicas []int32
		code     commonv1.Code
	}{
		{"duplicate", []int32{1, 1, 4}, commonv1.Code_CODE_INVALID_ARGUMENT},
		{"dead node", []int32{1, 2, 6}, commonv1.Code_CODE_FAILED_PRECONDITION},
		{"drained node", []int32{1, 2, 5}, commonv1.Code_CODE_FAILED_PRECONDITION},
		{"unknown node", []int32{1, 2, 9}, commonv1.Code_CODE_FAILED_PRECONDITION},
		{"below min.insync.replicas", []int32{4}, commonv1.Code_CODE_FAILED_PRECONDITION},
		{"cancel without a move", nil, commonv1.Code_CODE_FAILED_PRECONDITION},
	} {
		if r := move(t, s, "t", 0, tc.replicas...); r.Error.GetCode() != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, r.Error, tc.code)
		}
	}
	if r := move(t, s, "t", 7, 1, 2, 4); r.Error.GetCode() != commonv1.Code_CODE_NOT_FOUND {
		t.Errorf("unknown partition: %v", r.Error)
	}
	if r := move(t, s, "t", 0, 1, 2, 4); r.Error != nil {
		t.Fatalf("valid move: %v", r.Error)
	}
	if r := move(t, s, "t", 0, 1, 2, 4); r.Error != nil {
		t.Errorf("the same move again (a retry) must succeed: %v", r.Error)
	}
	if r := move(t, s, "t", 0, 1, 3, 4); r.Error.GetCode() != commonv1.Code_CODE_FAILED_PRECONDITION {
		t.Errorf("another move while one runs: %v", r.Error)
	}
}

// Reordering the same replicas copies nothing: the order changes at once
// and the new preferred replica leads.
func TestReorderMovesLeadershipAtOnce(t *testing.T) {
	s, p0 := oneTopic(t, 3)
	if r := move(t, s, "t", 0, 2, 1, 3); r.Error != nil {
		t.Fatal(r.Error)
	}
	p := partition(t, s, "t", 0)
	if Moving(p) || !slices.Equal(p.Replicas, []int32{2, 1, 3}) || p.LeaderId != 2 || p.LeaderEpoch != p0.LeaderEpoch+1 {
		t.Fatalf("after reorder: %v", p)
	}
}

// A cancel goes back to the previous replicas when enough of them are in
// sync, and is refused when going back would leave fewer than
// min.insync.replicas of them in the ISR.
func TestCancelMove(t *testing.T) {
	s, p0 := oneTopic(t, 5)
	move(t, s, "t", 0, 4, 5, 1)
	setISR(t, s, "t", 0, 1, 2, 3, 4)
	if r := move(t, s, "t", 0); r.Error != nil {
		t.Fatalf("cancel: %v", r.Error)
	}
	p := partition(t, s, "t", 0)
	if !slices.Equal(p.Replicas, []int32{1, 2, 3}) || !slices.Equal(p.Isr, []int32{1, 2, 3}) || Moving(p) || p.LeaderId != 1 {
		t.Fatalf("after cancel: %v", p)
	}
	// The cancel removes 4 and 5, which delete their copies: the leader
	// epoch is bumped, so the leader forgets what node 4 fetched and a
	// move adding it back cannot put its empty copy in the ISR on that.
	if p.LeaderEpoch != p0.LeaderEpoch+1 {
		t.Fatalf("leader epoch %d after a cancel that removed replicas, want %d", p.LeaderEpoch, p0.LeaderEpoch+1)
	}

	move(t, s, "t", 0, 4, 5, 1)
	setISR(t, s, "t", 0, 1, 4, 5) // 2 and 3 fell out
	if r := move(t, s, "t", 0); r.Error.GetCode() != commonv1.Code_CODE_FAILED_PRECONDITION {
		t.Fatalf("cancel with one previous replica in sync: %v", r.Error)
	}
	if p := partition(t, s, "t", 0); !Moving(p) {
		t.Fatalf("a refused cancel changed the record: %v", p)
	}
	// The move itself can still finish.
	step(t, s)
	if p := partition(t, s, "t", 0); Moving(p) || !slices.Equal(p.Replicas, []int32{4, 5, 1}) {
		t.Fatalf("move did not complete: %v", p)
	}
}

// A deposed controller's step writes nothing; the next one resumes the
// move from the record.
func TestStepNeedsTheGuardAndResumes(t *testing.T) {
	s, _ := oneTopic(t, 4)
	ctx := context.Background()
	move(t, s, "t", 0, 4, 2, 3)
	setISR(t, s, "t", 0, 1, 2, 3, 4)
	deposed := clientv3.Compare(clientv3.CreateRevision(KeyClusterID), "=", -1)
	before := partition(t, s, "t", 0)
	if _, err := s.StepReassignments(ctx, deposed); err != ErrNotActive {
		t.Fatalf("step without the guard: %v, want ErrNotActive", err)
	}
	if p := partition(t, s, "t", 0); !proto.Equal(p, before) {
		t.Fatalf("deposed controller changed %v to %v", before, p)
	}
	// Another controller (another Store on the same etcd) takes over.
	other := New(s.cl, 0)
	for range 3 {
		if _, err := other.StepReassignments(ctx, alwaysActive); err != nil {
			t.Fatal(err)
		}
	}
	if p := partition(t, s, "t", 0); Moving(p) || p.LeaderId != 4 || !slices.Equal(p.Replicas, []int32{4, 2, 3}) {
		t.Fatalf("not resumed: %v", p)
	}
}

// The throttle set with moves is on every node's status, and is lifted
// once no move runs.
func TestThrottleLiftedWhenMovesEnd(t *testing.T) {
	s, _ := oneTopic(t, 4)
	ctx := context.Background()
	if _, err := s.AlterPartitionReassignments(ctx, []MoveRequest{{Topic: "t", Partition: 0, Replicas: []int32{4, 2, 3}}}, 1<<20); err != nil {
		t.Fatal(err)
	}
	m, _ := s.Load(ctx)
	for _, n := range m.NodeList() {
		if n.ReplicationThrottleBytesPerSecond != 1<<20 {
			t.Fatalf("node %d throttle %d", n.Node.NodeId, n.ReplicationThrottleBytesPerSecond)
		}
	}
	step(t, s)
	if m, _ := s.Load(ctx); m.Throttle != 1<<20 {
		t.Fatalf("throttle lifted while the move runs")
	}
	setISR(t, s, "t", 0, 1, 2, 3, 4)
	step(t, s)
	if m, _ := s.Load(ctx); m.Throttle != 0 || m.Node(1).ReplicationThrottleBytesPerSecond != 0 {
		t.Fatalf("throttle %d after the move", m.Throttle)
	}
}

// Scale out: two nodes join a 3-node cluster; a rebalance moves as little
// as it can and every node ends within one replica and one preferred
// leader of even. A second rebalance while the moves run plans nothing.
func TestRebalanceScaleOut(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 12, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	register(t, s, 4, "")
	register(t, s, 5, "")
	dry, err := s.Rebalance(ctx, PlanOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Moves) == 0 || dry.Started {
		t.Fatalf("dry run: %v", dry)
	}
	if m, _ := s.Load(ctx); m.MovesRunning() != 0 {
		t.Fatal("dry run started moves")
	}
	res, err := s.Rebalance(ctx, PlanOptions{Throttle: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Started || len(res.Moves) != len(dry.Moves) {
		t.Fatalf("rebalance: started %v, %d moves (dry run %d)", res.Started, len(res.Moves), len(dry.Moves))
	}
	for _, l := range res.After {
		if l.Replicas < 7 || l.Replicas > 8 || l.Leaders < 2 || l.Leaders > 3 {
			t.Errorf("node %d planned to hold %d replicas, %d leaders", l.NodeId, l.Replicas, l.Leaders)
		}
	}
	again, err := s.Rebalance(ctx, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Moves) != 0 || again.InProgress == 0 {
		t.Fatalf("second rebalance while moves run: %d moves, %d in progress", len(again.Moves), again.InProgress)
	}
	// Complete every move: all target replicas join the ISR.
	m, _ := s.Load(ctx)
	for idx, p := range m.Partitions["orders"] {
		if Moving(p) {
			isr := slices.Clone(p.Replicas)
			setISR(t, s, "orders", idx, isr...)
		}
	}
	step(t, s)
	m, _ = s.Load(ctx)
	replicas, leaders := map[int32]int{}, map[int32]int{}
	for _, p := range m.Partitions["orders"] {
		if Moving(p) {
			t.Fatalf("move did not complete: %v", p)
		}
		for _, r := range p.Replicas {
			replicas[r]++
		}
		leaders[p.LeaderId]++
	}
	for id := int32(1); id <= 5; id++ {
		if replicas[id] < 7 || replicas[id] > 8 || leaders[id] < 2 || leaders[id] > 3 {
			t.Errorf("node %d holds %d replicas and leads %d (all %v, %v)", id, replicas[id], leaders[id], replicas, leaders)
		}
	}
	if m.Throttle != 0 {
		t.Errorf("throttle %d left after the moves", m.Throttle)
	}
}

// Two plans made from the same view cannot both start: the generation
// compare fails the second.
func TestConcurrentPlansConflict(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 6, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	register(t, s, 4, "")
	m1, _ := s.Load(ctx)
	m2, _ := s.Load(ctx)
	plan := func(m *Model) []change {
		in := m.balancerInput(nil)
		return m.moveChanges(balancer.Plan(in))
	}
	c1, c2 := plan(m1), plan(m2)
	if len(c1) == 0 {
		t.Fatal("nothing to move")
	}
	if err := s.commitMoves(ctx, m1, c1, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.commitMoves(ctx, m2, c2[len(c2)-1:], 0, nil); err != errConflict {
		t.Fatalf("second plan from the same view: %v, want errConflict", err)
	}
}

// Draining a node marks it, moves its replicas away and its leaderships
// to other in-sync replicas at once; undrain clears the mark.
func TestDrainNode(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 4; id++ {
		register(t, s, id, "")
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 8, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	res, err := s.DrainNode(ctx, 2, false, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Node.Drained || len(res.Moves) != int(res.Replicas) || res.Replicas == 0 {
		t.Fatalf("drain: drained %v, %d moves, %d replicas", res.Node.Drained, len(res.Moves), res.Replicas)
	}
	step(t, s)
	m, _ := s.Load(ctx)
	for idx, p := range m.Partitions["orders"] {
		if slices.Contains(Target(p), 2) {
			t.Errorf("partition %d keeps node 2 in its target %v", idx, Target(p))
		}
		if p.LeaderId == 2 {
			t.Errorf("partition %d still led by drained node 2: %v", idx, p)
		}
	}
	if _, err := s.DrainNode(ctx, 9, false, 0, nil); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Errorf("drain unknown node: %v", err)
	}
	if res, err := s.DrainNode(ctx, 2, true, 0, nil); err != nil || res.Node.Drained {
		t.Fatalf("undrain: %v %v", res, err)
	}
}

func TestElectPreferredLeaders(t *testing.T) {
	s, _ := oneTopic(t, 3)
	ctx := context.Background()
	// Node 1 (preferred) lost leadership to 2 earlier.
	p := proto.Clone(partition(t, s, "t", 0)).(*commonv1.PartitionMetadata)
	p.LeaderId, p.LeaderEpoch, p.Isr = 2, p.LeaderEpoch+1, []int32{2, 3}
	b, _ := proto.Marshal(p)
	s.cl.Put(ctx, partitionKey("t", 0), string(b))
	res, err := s.ElectLeaders(ctx, controllerv1.ElectionType_ELECTION_TYPE_PREFERRED, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Error.GetReason() != commonv1.Reason_REASON_INELIGIBLE_REPLICA {
		t.Fatalf("preferred replica out of the ISR: %v", res)
	}
	setISR(t, s, "t", 0, 2, 3, 1)
	res, err = s.ElectLeaders(ctx, controllerv1.ElectionType_ELECTION_TYPE_PREFERRED, []*commonv1.TopicPartitions{{Topic: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error != nil || res[0].LeaderId != 1 || res[0].LeaderEpoch != p.LeaderEpoch+1 {
		t.Fatalf("election: %v", res)
	}
}

// The automatic leader balance moves leadership back to preferred replicas
// only for nodes above the imbalance threshold.
func TestBalanceLeadersThreshold(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 12, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	// One of node 1's four preferred partitions moves to another leader:
	// 25% imbalance.
	m, _ := s.Load(ctx)
	var moved int32 = -1
	for idx, p := range m.Partitions["orders"] {
		if p.Replicas[0] == 1 {
			q := proto.Clone(p).(*commonv1.PartitionMetadata)
			q.LeaderId, q.LeaderEpoch = p.Replicas[1], p.LeaderEpoch+1
			b, _ := proto.Marshal(q)
			s.cl.Put(ctx, partitionKey("orders", idx), string(b))
			moved = idx
			break
		}
	}
	if n, err := s.BalanceLeaders(ctx, alwaysActive, 30); err != nil || n != 0 {
		t.Fatalf("25%% imbalance under a 30%% threshold: moved %d, %v", n, err)
	}
	if n, err := s.BalanceLeaders(ctx, alwaysActive, 10); err != nil || n != 1 {
		t.Fatalf("25%% imbalance over a 10%% threshold: moved %d, %v", n, err)
	}
	if p := partition(t, s, "orders", moved); p.LeaderId != 1 {
		t.Fatalf("leader %d, want the preferred 1", p.LeaderId)
	}
}

func TestCreatePartitions(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 4, ReplicationFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.CreatePartitions(ctx, "orders", 7, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Partitions) != 7 || got.TopicId != d.TopicId || got.ReplicationFactor != 2 {
		t.Fatalf("after add: %d partitions, id %s (was %s), rf %d", len(got.Partitions), got.TopicId, d.TopicId, got.ReplicationFactor)
	}
	for i, p := range got.Partitions {
		if i < 4 && !proto.Equal(p, d.Partitions[i]) {
			t.Errorf("existing partition %d changed: %v -> %v", i, d.Partitions[i], p)
		}
		if len(p.Replicas) != 2 || p.LeaderId != p.Replicas[0] {
			t.Errorf("partition %d: %v", i, p)
		}
	}
	for _, total := range []int32{7, 3} {
		if _, err := s.CreatePartitions(ctx, "orders", total, false); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("total %d: %v", total, err)
		}
	}
	if _, err := s.CreatePartitions(ctx, "nope", 3, false); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Errorf("unknown topic: %v", err)
	}
}

// A drained node receives no replica of a new topic.
func TestNewTopicsAvoidDrainedNodes(t *testing.T) {
	s := startStore(t, 6*time.Second)
	ctx := context.Background()
	for id := int32(1); id <= 4; id++ {
		register(t, s, id, "")
	}
	if _, err := s.DrainNode(ctx, 3, false, 0, nil); err != nil {
		t.Fatal(err)
	}
	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "fresh", Partitions: 12, ReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Partitions {
		if slices.Contains(p.Replicas, 3) {
			t.Fatalf("partition %d placed on drained node 3: %v", p.Partition, p.Replicas)
		}
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "wide", Partitions: 1, ReplicationFactor: 4}); code(err) != commonv1.Code_CODE_FAILED_PRECONDITION {
		t.Fatalf("RF 4 with 3 undrained nodes: %v", err)
	}
}
