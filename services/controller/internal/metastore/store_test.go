package metastore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func startStore(t *testing.T, ttl time.Duration) *Store {
	t.Helper()
	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: etcdtest.TestPeers(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return New(m.Client(), ttl)
}

func register(t *testing.T, s *Store, id int32, rack string) int64 {
	t.Helper()
	epoch, err := s.RegisterNode(context.Background(), &commonv1.Node{NodeId: id, Address: fmt.Sprintf("http://127.0.0.1:%d", 9100+id), Rack: rack}, fmt.Sprintf("inc-%d-%d", id, time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	return epoch
}

func code(err error) commonv1.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return commonv1.Code_CODE_UNSPECIFIED
}

func TestTopicLifecycle(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 6, ReplicationFactor: 3, Configs: map[string]string{"retention.ms": "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 6 || d.ReplicationFactor != 3 || d.TopicId == "" {
		t.Fatalf("created %v", d)
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "orders", Partitions: 1}); code(err) != commonv1.Code_CODE_ALREADY_EXISTS {
		t.Fatalf("duplicate create: %v", err)
	}
	_, err = s.CreateTopic(ctx, CreateTopicRequest{Name: "x", Configs: map[string]string{"retention.mss": "1"}})
	if code(err) != commonv1.Code_CODE_INVALID_ARGUMENT || !contains2(err.Error(), "retention.mss") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "y", ReplicationFactor: 4}); code(err) != commonv1.Code_CODE_FAILED_PRECONDITION {
		t.Fatalf("rf 4 on 3 nodes: %v", err)
	}
	if _, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "bad/name"}); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("bad name: %v", err)
	}

	m, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Describe("orders")
	for _, p := range got.Partitions {
		if p.LeaderId != p.Replicas[0] || !slices.Equal(p.Isr, p.Replicas) || len(p.OfflineReplicas) != 0 {
			t.Errorf("partition %v", p)
		}
	}
	if v := m.Topic("orders").Configs; v["retention.ms"] != "1000" || v["cleanup.policy"] != "delete" {
		t.Errorf("configs %v", v)
	}

	if _, err := s.AlterTopicConfig(ctx, "orders", map[string]string{"nope": "1"}, nil, false); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("alter unknown key: %v", err)
	}
	if _, err := s.AlterTopicConfig(ctx, "orders", map[string]string{"unclean.leader.election.enable": "true"}, []string{"retention.ms"}, false); err != nil {
		t.Fatal(err)
	}

	if _, err := s.DeleteTopic(ctx, "orders", "wrong-id"); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Fatalf("delete with wrong id: %v", err)
	}
	id, err := s.DeleteTopic(ctx, "orders", "")
	if err != nil || id != d.TopicId {
		t.Fatalf("delete: %v %v", id, err)
	}
	m, _ = s.Load(ctx)
	if m.Topic("orders") != nil || len(m.Partitions["orders"]) != 0 {
		t.Fatal("topic still there after delete")
	}

	a, err := s.AllocateProducerIDs(ctx, 1000)
	b, err2 := s.AllocateProducerIDs(ctx, 1000)
	if err != nil || err2 != nil || b != a+1000 {
		t.Fatalf("producer ids %d %d %v %v", a, b, err, err2)
	}
}

func contains2(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestAlterPartitionCAS(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		epochs[id] = register(t, s, id, "")
	}
	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partitions[0]
	leader := p.LeaderId
	var follower int32
	for _, r := range p.Replicas {
		if r != leader {
			follower = r
			break
		}
	}
	item := &controllerv1.AlterPartitionItem{Topic: "t", Partition: 0, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: []int32{leader, follower}}
	res, err := s.AlterPartition(ctx, leader, epochs[leader], []*controllerv1.AlterPartitionItem{item})
	if err != nil || res[0].Error != nil {
		t.Fatalf("current epoch rejected: %v %v", err, res)
	}
	if res[0].State.PartitionEpoch != p.PartitionEpoch+1 || len(res[0].State.Isr) != 2 {
		t.Fatalf("state after shrink %v", res[0].State)
	}
	// The same request again carries a stale partition epoch.
	res, err = s.AlterPartition(ctx, leader, epochs[leader], []*controllerv1.AlterPartitionItem{item})
	if err != nil || res[0].Error.GetReason() != commonv1.Reason_REASON_STALE_PARTITION_EPOCH {
		t.Fatalf("stale epoch: %v %v", err, res)
	}
	for _, tc := range []struct {
		name   string
		node   int32
		mutate func(*controllerv1.AlterPartitionItem)
		reason commonv1.Reason
	}{
		{"not leader", follower, func(*controllerv1.AlterPartitionItem) {}, commonv1.Reason_REASON_NOT_LEADER},
		{"stale leader epoch", leader, func(i *controllerv1.AlterPartitionItem) { i.LeaderEpoch-- }, commonv1.Reason_REASON_FENCED_LEADER_EPOCH},
		{"isr without leader", leader, func(i *controllerv1.AlterPartitionItem) { i.NewIsr = []int32{follower} }, commonv1.Reason_REASON_INELIGIBLE_REPLICA},
		{"isr not replica", leader, func(i *controllerv1.AlterPartitionItem) { i.NewIsr = []int32{leader, 42} }, commonv1.Reason_REASON_INELIGIBLE_REPLICA},
	} {
		it := &controllerv1.AlterPartitionItem{Topic: "t", Partition: 0, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch + 1, NewIsr: p.Replicas}
		tc.mutate(it)
		res, err := s.AlterPartition(ctx, tc.node, epochs[tc.node], []*controllerv1.AlterPartitionItem{it})
		if err != nil || res[0].Error.GetReason() != tc.reason {
			t.Errorf("%s: %v %v, want %v", tc.name, err, res, tc.reason)
		}
	}
	if _, err := s.AlterPartition(ctx, leader, epochs[leader]-1, []*controllerv1.AlterPartitionItem{item}); code(err) != commonv1.Code_CODE_ABORTED {
		t.Fatalf("stale node epoch: %v", err)
	}
}

// KIP-903: an ISR expansion names the incarnation the leader saw fetch,
// and the controller refuses it unless that is the node's current
// registration. A node that restarted (maybe with an empty log) and has
// not fetched since cannot be put back on its previous process's state.
func TestAlterPartitionExpansionNeedsCurrentNodeEpoch(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		epochs[id] = register(t, s, id, "")
	}
	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partitions[0]
	leader, kept, other := p.Replicas[0], p.Replicas[1], p.Replicas[2]
	alter := func(isr []int32, members map[int32]int64) *controllerv1.AlterPartitionResult {
		t.Helper()
		it := &controllerv1.AlterPartitionItem{Topic: "t", Partition: 0, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: isr}
		for id, e := range members {
			it.NewIsrMembers = append(it.NewIsrMembers, &controllerv1.IsrMember{NodeId: id, NodeEpoch: e})
		}
		res, err := s.AlterPartition(ctx, leader, epochs[leader], []*controllerv1.AlterPartitionItem{it})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].State != nil {
			p = res[0].State
		}
		return res[0]
	}
	// A shrink needs no epochs.
	if r := alter([]int32{leader, kept}, nil); r.Error != nil {
		t.Fatalf("shrink: %v", r.Error)
	}

	// The dropped node restarts: a new registration, a new node epoch.
	if _, err := s.cl.Delete(ctx, liveKey(other)); err != nil {
		t.Fatal(err)
	}
	old := epochs[other]
	epochs[other] = register(t, s, other, "")
	if epochs[other] == old {
		t.Fatal("re-registration kept the node epoch")
	}
	full := []int32{leader, kept, other}
	for _, tc := range []struct {
		name    string
		members map[int32]int64
	}{
		{"no node epoch", nil},
		{"previous incarnation", map[int32]int64{kept: epochs[kept], other: old}},
		{"unknown epoch", map[int32]int64{other: epochs[other] + 1000}},
	} {
		r := alter(full, tc.members)
		if r.Error.GetReason() != commonv1.Reason_REASON_INELIGIBLE_REPLICA {
			t.Errorf("%s: expansion answered %v, want REASON_INELIGIBLE_REPLICA", tc.name, r.Error)
		}
		if slices.Contains(p.Isr, other) {
			t.Fatalf("%s: node %d added to the ISR %v", tc.name, other, p.Isr)
		}
	}
	if r := alter(full, map[int32]int64{other: epochs[other]}); r.Error != nil || !slices.Contains(p.Isr, other) {
		t.Fatalf("expansion with the current node epoch: %v, ISR %v", r.Error, p.Isr)
	}
}

func TestNextPartitionState(t *testing.T) {
	pm := func(leader int32, isr []int32) *commonv1.PartitionMetadata {
		return &commonv1.PartitionMetadata{LeaderId: leader, LeaderEpoch: 5, PartitionEpoch: 9, Replicas: []int32{1, 2, 3}, Isr: isr}
	}
	// withEpochs records each ISR member as registration 100+id.
	withEpochs := func(p *commonv1.PartitionMetadata) *commonv1.PartitionMetadata {
		p.IsrNodeEpochs = map[int32]int64{}
		for _, r := range p.Isr {
			p.IsrNodeEpochs[r] = 100 + int64(r)
		}
		return p
	}
	// liveSet registers ids as 100+id; restarted registers them again as
	// 200+id.
	liveSet := func(ids ...int32) epochOf {
		return func(id int32) int64 {
			if slices.Contains(ids, id) {
				return 100 + int64(id)
			}
			return 0
		}
	}
	restarted := func(live epochOf, ids ...int32) epochOf {
		return func(id int32) int64 {
			if slices.Contains(ids, id) {
				return 200 + int64(id)
			}
			return live(id)
		}
	}
	for _, tc := range []struct {
		name       string
		in         *commonv1.PartitionMetadata
		live       epochOf
		unclean    bool
		changed    bool
		leader     int32
		isr        []int32
		leaderBump bool
		epochs     map[int32]int64 // the recorded ISR epochs after, when checked
	}{
		{"all live", pm(1, []int32{1, 2, 3}), liveSet(1, 2, 3), false, false, 1, []int32{1, 2, 3}, false, nil},
		{"leader dies", pm(1, []int32{1, 2, 3}), liveSet(2, 3), false, true, 2, []int32{2, 3}, true, nil},
		{"follower dies", pm(1, []int32{1, 2, 3}), liveSet(1, 3), false, true, 1, []int32{1, 3}, false, nil},
		{"leader dies, live non-ISR replica", pm(1, []int32{1}), liveSet(2, 3), false, true, -1, []int32{1}, true, nil},
		{"unclean elects non-ISR replica", pm(1, []int32{1}), liveSet(2, 3), true, true, 2, []int32{2}, true, map[int32]int64{2: 102}},
		{"offline stays offline", pm(-1, []int32{1}), liveSet(2, 3), false, false, -1, []int32{1}, false, nil},
		{"last ISR member returns", pm(-1, []int32{1}), liveSet(1), false, true, 1, []int32{1}, true, nil},
		{"all die", pm(2, []int32{2, 3}), liveSet(), false, true, -1, []int32{2}, true, nil},
		// A node that registered again (restarted, maybe with a shorter
		// log) before this pass ran is not in sync, though it is alive.
		{"recorded, all in sync", withEpochs(pm(1, []int32{1, 2, 3})), liveSet(1, 2, 3), false, false, 1, []int32{1, 2, 3}, false, map[int32]int64{1: 101, 2: 102, 3: 103}},
		{"leader registered again", withEpochs(pm(1, []int32{1, 2, 3})), restarted(liveSet(1, 2, 3), 1), false, true, 2, []int32{2, 3}, true, map[int32]int64{2: 102, 3: 103}},
		{"follower registered again", withEpochs(pm(1, []int32{1, 2, 3})), restarted(liveSet(1, 2, 3), 3), false, true, 1, []int32{1, 2}, false, map[int32]int64{1: 101, 2: 102}},
		{"last member back as a new incarnation", withEpochs(pm(1, []int32{1})), restarted(liveSet(2, 3), 1), false, true, 1, []int32{1}, true, map[int32]int64{1: 201}},
		{"offline, last member back as a new incarnation", withEpochs(pm(-1, []int32{1})), restarted(liveSet(), 1), false, true, 1, []int32{1}, true, map[int32]int64{1: 201}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed := NextPartitionState(tc.in, tc.live, tc.unclean)
			if changed != tc.changed || out.LeaderId != tc.leader || !slices.Equal(out.Isr, tc.isr) {
				t.Fatalf("got changed=%v leader=%d isr=%v", changed, out.LeaderId, out.Isr)
			}
			if changed && out.PartitionEpoch != tc.in.PartitionEpoch+1 {
				t.Errorf("partition epoch %d", out.PartitionEpoch)
			}
			if wantLE := tc.in.LeaderEpoch + map[bool]int32{true: 1}[tc.leaderBump]; out.LeaderEpoch != wantLE {
				t.Errorf("leader epoch %d, want %d", out.LeaderEpoch, wantLE)
			}
			if tc.epochs != nil && !maps.Equal(out.IsrNodeEpochs, tc.epochs) {
				t.Errorf("recorded ISR epochs %v, want %v", out.IsrNodeEpochs, tc.epochs)
			}
		})
	}
}

// heartbeat keeps nodes alive until ctx ends.
func heartbeat(ctx context.Context, s *Store, epochs map[int32]int64) {
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		for id, e := range epochs {
			s.Heartbeat(ctx, id, e)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func waitPartition(t *testing.T, s *Store, topic, what string, cond func(*commonv1.PartitionMetadata) bool) *commonv1.PartitionMetadata {
	t.Helper()
	var got *commonv1.PartitionMetadata
	testwait.Until(t, 30*time.Second, fmt.Sprintf("%s-0: %s", topic, what), func() error {
		m, err := s.Load(context.Background())
		if err != nil {
			return err
		}
		p := m.Partition(topic, 0)
		if p == nil || !cond(p) {
			return fmt.Errorf("partition %v", p)
		}
		got = p
		return nil
	})
	return got
}

func TestNodeDeathAndReturn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Heartbeats every 300ms, each an etcd request that takes up to a
	// second when the machine is loaded, stay well inside a 5s lease, so
	// that only the node that stops heartbeating dies.
	s := startStore(t, 5*time.Second)
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		epochs[id] = register(t, s, id, "")
	}
	always := clientv3.Compare(clientv3.CreateRevision(KeyClusterID), "=", 0)
	active := make(chan error, 1)
	go func() { active <- s.RunActive(ctx, always, 200*time.Millisecond, nil, nil) }()

	d, err := s.CreateTopic(ctx, CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	p0 := d.Partitions[0]
	dead := p0.LeaderId
	alive := map[int32]int64{}
	for id, e := range epochs {
		if id != dead {
			alive[id] = e
		}
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	go heartbeat(hbCtx, s, alive)

	// The leader stops heartbeating: a new leader from the ISR, epochs bumped.
	p1 := waitPartition(t, s, "t", "a live leader other than the dead one", func(p *commonv1.PartitionMetadata) bool { return p.LeaderId >= 0 && p.LeaderId != dead })
	if !slices.Contains(p0.Isr, p1.LeaderId) || slices.Contains(p1.Isr, dead) || p1.LeaderEpoch != p0.LeaderEpoch+1 || p1.PartitionEpoch <= p0.PartitionEpoch {
		t.Fatalf("after leader death: %v (before %v)", p1, p0)
	}
	if !slices.Equal(p1.OfflineReplicas, []int32{dead}) {
		t.Errorf("offline replicas %v", p1.OfflineReplicas)
	}
	// Shrink the ISR to the new leader alone, then let every node die: the
	// partition goes offline keeping its last ISR member, and no other
	// replica is elected (unclean is off).
	last := p1.LeaderId
	res, err := s.AlterPartition(ctx, last, epochs[last], []*controllerv1.AlterPartitionItem{{Topic: "t", Partition: 0, LeaderEpoch: p1.LeaderEpoch, PartitionEpoch: p1.PartitionEpoch, NewIsr: []int32{last}}})
	if err != nil || res[0].Error != nil {
		t.Fatalf("shrink: %v %v", err, res)
	}
	stopHB()
	var other int32 = -1
	for id := range alive {
		if id != last {
			other = id
		}
	}
	hb2, stopHB2 := context.WithCancel(ctx)
	defer stopHB2()
	go heartbeat(hb2, s, map[int32]int64{other: epochs[other]})
	p2 := waitPartition(t, s, "t", "no leader", func(p *commonv1.PartitionMetadata) bool { return p.LeaderId == -1 })
	if !slices.Equal(p2.Isr, []int32{last}) || p2.LeaderEpoch != p1.LeaderEpoch+1 {
		t.Fatalf("offline partition %v", p2)
	}
	// A window, not a wait: no reconcile round (every 200ms) in it may
	// elect the live replica outside the ISR. A slower machine runs fewer
	// rounds, never a false failure.
	time.Sleep(500 * time.Millisecond)
	if p := waitPartition(t, s, "t", "any state", func(*commonv1.PartitionMetadata) bool { return true }); p.LeaderId != -1 {
		t.Fatalf("non-ISR replica %d elected without unclean", p.LeaderId)
	}
	// The last ISR member registers again and leads again, epoch bumped.
	register(t, s, last, "")
	p3 := waitPartition(t, s, "t", "the returned ISR member leading", func(p *commonv1.PartitionMetadata) bool { return p.LeaderId == last })
	if p3.LeaderEpoch != p2.LeaderEpoch+1 || !slices.Equal(p3.Isr, []int32{last}) {
		t.Fatalf("returned leader %v", p3)
	}
	cancel()
	<-active
}

// TestRegisterNodeListeners checks that a node's advertised listeners are
// kept in its record (so WatchMetadata carries them to gateways) and that
// bad ones are refused.
func TestRegisterNodeListeners(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	ext := []*commonv1.Listener{{Name: "external", Address: "http://n1.example.com:31102"}}
	if _, err := s.RegisterNode(ctx, &commonv1.Node{NodeId: 1, Address: "http://10.0.0.1:9102", Listeners: ext}, "inc-1"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Nodes[1].GetNode().GetListeners()
	if len(got) != 1 || got[0].GetName() != "external" || got[0].GetAddress() != "http://n1.example.com:31102" {
		t.Fatalf("stored listeners %v", got)
	}
	for _, bad := range [][]*commonv1.Listener{
		{{Name: "External", Address: "http://x:1"}},
		{{Name: "ext", Address: "x:1"}},
		{{Name: "ext", Address: "http://x:1"}, {Name: "ext", Address: "http://y:1"}},
	} {
		_, err := s.RegisterNode(ctx, &commonv1.Node{NodeId: 2, Address: "http://10.0.0.2:9102", Listeners: bad}, "inc-2")
		if code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("listeners %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}
