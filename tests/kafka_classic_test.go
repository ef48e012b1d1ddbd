package tests

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestKafkaClassicGroups runs Kafka's classic group protocol against a
// real strata dev as frameworks use it: members whose leader assigns.
func TestKafkaClassicGroups(t *testing.T) {
	t.Parallel()
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 4*time.Minute)
	t.Run("ConnectProtocolLeaderAssigns", func(t *testing.T) { testConnectProtocol(t, ctx, d) })
	t.Run("ClientSideBalancerHonoured", func(t *testing.T) { testClientSideBalancer(t, ctx, d, cli) })
	t.Run("StaticMemberRestartsWithoutRebalance", func(t *testing.T) { testStaticMemberRestart(t, ctx, d, cli) })
}

// testStaticMemberRestart is KIP-345 with franz-go: two members with
// instance ids (group.instance.id) share a topic's partitions; one closes
// (a static member does not leave its group) and a new client with the
// same instance id takes its place. It gets the partitions its previous
// incarnation had, and the group does not rebalance: the other member
// stays at its generation.
func testStaticMemberRestart(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "static", "-p", "4", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	owned := map[string]map[int32]bool{}
	start := func(name, instance string) *kgo.Client {
		mu.Lock()
		owned[name] = map[int32]bool{}
		mu.Unlock()
		cl, err := kgo.NewClient(kgo.SeedBrokers(d.File.KafkaBootstrap), kgo.ConsumerGroup("static-members"), kgo.ConsumeTopics("static"),
			kgo.InstanceID(instance), kgo.SessionTimeout(60*time.Second),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["static"] {
					owned[name][p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["static"] {
					delete(owned[name], p)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil {
				if cl.PollFetches(ctx).IsClientClosed() {
					return
				}
			}
		}()
		return cl
	}
	a := start("a", "worker-a")
	defer a.Close()
	b := start("b", "worker-b")
	settled := func(x, y string) error {
		mu.Lock()
		defer mu.Unlock()
		if len(owned[x]) != 2 || len(owned[y]) != 2 {
			return fmt.Errorf("partitions owned: %s %v, %s %v", x, owned[x], y, owned[y])
		}
		return nil
	}
	testwait.Until(t, 90*time.Second, "two static members to own two partitions each", func() error { return settled("a", "b") })
	_, genA := a.GroupMetadata()
	_, genB := b.GroupMetadata()
	if genA != genB {
		t.Fatalf("generations a %d, b %d after settling", genA, genB)
	}
	mu.Lock()
	before := maps.Clone(owned["b"])
	mu.Unlock()
	b.Close() // a static member does not send LeaveGroup

	b2 := start("b2", "worker-b")
	defer b2.Close()
	testwait.Until(t, 60*time.Second, "the restarted member to get its partitions back", func() error { return settled("a", "b2") })
	mu.Lock()
	after := maps.Clone(owned["b2"])
	mu.Unlock()
	if !maps.Equal(before, after) {
		t.Fatalf("the restarted member owns %v, its previous incarnation %v", after, before)
	}
	if _, gen := a.GroupMetadata(); gen != genA {
		t.Fatalf("member a is at generation %d after the restart, was %d: the group rebalanced", gen, genA)
	}
	if _, gen := b2.GroupMetadata(); gen != genA {
		t.Fatalf("the restarted member joined generation %d, want the group's %d", gen, genA)
	}
}

// classicMember is a raw kmsg member of a classic group.
type classicMember struct {
	cl         *kgo.Client
	id         string
	generation int32
}

// join sends JoinGroup as Kafka Connect's distributed workers do
// (protocol type "connect", two protocols in order of preference),
// joining again with the id the coordinator hands out (KIP-394).
func (m *classicMember) join(ctx context.Context, group string, meta map[string][]byte) (*kmsg.JoinGroupResponse, error) {
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, m.id, "connect"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 60000
		for _, name := range []string{"sessioned", "default"} {
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name, p.Metadata = name, meta[name]
			req.Protocols = append(req.Protocols, p)
		}
		resp, err := req.RequestWith(ctx, m.cl)
		if err != nil {
			return nil, err
		}
		m.id = resp.MemberID
		if resp.ErrorCode == 79 { // MEMBER_ID_REQUIRED
			continue
		}
		if resp.ErrorCode != 0 {
			return resp, fmt.Errorf("JoinGroup: error %d", resp.ErrorCode)
		}
		m.generation = resp.Generation
		return resp, nil
	}
}

func (m *classicMember) sync(ctx context.Context, group string, assign map[string][]byte) (*kmsg.SyncGroupResponse, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = group, m.id, m.generation
	pt, pn := "connect", "sessioned"
	req.ProtocolType, req.Protocol = &pt, &pn
	for id, b := range assign {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = id, b
		req.GroupAssignment = append(req.GroupAssignment, a)
	}
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil && resp.ErrorCode != 0 {
		err = fmt.Errorf("SyncGroup: error %d", resp.ErrorCode)
	}
	return resp, err
}

func (m *classicMember) heartbeat(ctx context.Context, group string) (int16, error) {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = group, m.id, m.generation
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return 0, err
	}
	return resp.ErrorCode, nil
}

// testConnectProtocol: two members join with protocol type "connect"; the
// leader gets both members' metadata for the protocol both prefer, and
// the bytes it assigns each member in SyncGroup reach it unchanged, user
// data included.
func testConnectProtocol(t *testing.T, ctx context.Context, d *harness.Dev) {
	const group = "connect-cluster"
	a := &classicMember{cl: kafkaClient(t, d)}
	b := &classicMember{cl: kafkaClient(t, d)}
	metaA := map[string][]byte{"sessioned": []byte("\x00\x02worker-a:8083\x00\x00\x00\x00\x00\x00\x00\x07"), "default": []byte("\x00\x00worker-a")}
	metaB := map[string][]byte{"sessioned": []byte("\x00\x02worker-b:8083\xff\xfe\x00\x01user-data"), "default": []byte("\x00\x00worker-b")}

	// A alone: it leads generation 1.
	ra, err := a.join(ctx, group, metaA)
	if err != nil {
		t.Fatal(err)
	}
	if ra.LeaderID != a.id || ra.Protocol == nil || *ra.Protocol != "sessioned" || ra.ProtocolType == nil || *ra.ProtocolType != "connect" {
		t.Fatalf("first join: leader %q (me %q), protocol %v type %v", ra.LeaderID, a.id, ra.Protocol, ra.ProtocolType)
	}
	if _, err := a.sync(ctx, group, map[string][]byte{a.id: []byte("all-to-a")}); err != nil {
		t.Fatal(err)
	}

	// B joins: its JoinGroup waits until A joins again, which A's
	// heartbeat asks it to.
	type joined struct {
		resp *kmsg.JoinGroupResponse
		err  error
	}
	bj := make(chan joined, 1)
	go func() {
		r, err := b.join(ctx, group, metaB)
		bj <- joined{r, err}
	}()
	testwait.Until(t, 60*time.Second, "A's heartbeat to answer REBALANCE_IN_PROGRESS", func() error {
		code, err := a.heartbeat(ctx, group)
		if err != nil || code != 27 {
			return fmt.Errorf("heartbeat: code %d, %v", code, err)
		}
		return nil
	})
	if ra, err = a.join(ctx, group, metaA); err != nil {
		t.Fatal(err)
	}
	var rb joined
	select {
	case rb = <-bj:
	case <-ctx.Done():
		t.Fatal("B's JoinGroup never answered")
	}
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if ra.LeaderID != a.id || rb.resp.LeaderID != a.id || ra.Generation != rb.resp.Generation || ra.Generation < 2 {
		t.Fatalf("leader %q / %q (A is %q), generations %d / %d", ra.LeaderID, rb.resp.LeaderID, a.id, ra.Generation, rb.resp.Generation)
	}
	if len(rb.resp.Members) != 0 {
		t.Fatalf("the follower got %d members' metadata; only the leader does", len(rb.resp.Members))
	}
	got := map[string][]byte{}
	for _, m := range ra.Members {
		got[m.MemberID] = m.ProtocolMetadata
	}
	if len(got) != 2 || !bytes.Equal(got[a.id], metaA["sessioned"]) || !bytes.Equal(got[b.id], metaB["sessioned"]) {
		t.Fatalf("leader's members %q; want both with their \"sessioned\" metadata", got)
	}

	// B's SyncGroup waits for the leader's, then answers its bytes.
	assignB := []byte("\x00\x01\x00\x00\x00\x08leader-a\x00\x00\x00\x00\x00\x00\x00\x2a\x00\x00\x00\x01conn-1\xffuser data\x00")
	bs := make(chan *kmsg.SyncGroupResponse, 1)
	go func() {
		r, err := b.sync(ctx, group, nil)
		if err != nil {
			t.Error(err)
		}
		bs <- r
	}()
	sa, err := a.sync(ctx, group, map[string][]byte{a.id: []byte("a's share"), b.id: assignB})
	if err != nil {
		t.Fatal(err)
	}
	if string(sa.MemberAssignment) != "a's share" {
		t.Fatalf("leader's assignment %q", sa.MemberAssignment)
	}
	var sb *kmsg.SyncGroupResponse
	select {
	case sb = <-bs:
	case <-ctx.Done():
		t.Fatal("B's SyncGroup never answered")
	}
	if sb == nil || !bytes.Equal(sb.MemberAssignment, assignB) {
		t.Fatalf("follower's assignment %q; want %q", sb.MemberAssignment, assignB)
	}
	for _, m := range []*classicMember{a, b} {
		if code, err := m.heartbeat(ctx, group); err != nil || code != 0 {
			t.Fatalf("heartbeat after the sync: %d, %v", code, err)
		}
	}
	// A consumer cannot join a connect group.
	c := kmsg.NewPtrJoinGroupRequest()
	c.Group, c.ProtocolType, c.SessionTimeoutMillis, c.RebalanceTimeoutMillis = group, "consumer", 30000, 60000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "sessioned", []byte{0}
	c.Protocols = append(c.Protocols, p)
	c.MemberID = "x"
	if r, err := c.RequestWith(ctx, a.cl); err != nil || r.ErrorCode != 23 {
		t.Fatalf("consumer join of a connect group: %+v, %v; want INCONSISTENT_GROUP_PROTOCOL", r, err)
	}
}

// allOnOne is a client-side balancer that puts every partition on the
// member with the smallest id: a plan no server-side assignor makes.
type allOnOne struct {
	kgo.GroupBalancer // round robin's metadata and parsing
	mu                sync.Mutex
	members           int // members the leader last balanced
}

func (*allOnOne) ProtocolName() string { return "strata-test-all-on-one" }

func (b *allOnOne) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	return cb, cb.MemberTopics(), err
}

func (b *allOnOne) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	ms := cb.Members()
	first := 0
	for i := range ms {
		if ms[i].MemberID < ms[first].MemberID {
			first = i
		}
	}
	plan := cb.NewPlan()
	for topic, n := range topics {
		for p := range n {
			plan.AddPartition(&ms[first], topic, p)
		}
	}
	b.mu.Lock()
	b.members = len(ms)
	b.mu.Unlock()
	return plan
}

// testClientSideBalancer: two franz-go members of a classic group whose
// balancer puts all four partitions on one member get exactly that, and
// that member reads every record.
func testClientSideBalancer(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "classic", "-p", "4", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	bal := &allOnOne{GroupBalancer: kgo.RoundRobinBalancer()}
	var mu sync.Mutex
	owned := []map[int32]bool{{}, {}}
	read := []map[string]bool{{}, {}}
	for i := range 2 {
		cl := kafkaClient(t, d, kgo.ConsumerGroup("classic-balancer"), kgo.ConsumeTopics("classic"), kgo.Balancers(bal),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["classic"] {
					owned[i][p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["classic"] {
					delete(owned[i], p)
				}
			}))
		go func() {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() {
					return
				}
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { read[i][string(r.Value)] = true })
				mu.Unlock()
			}
		}()
	}
	testwait.Until(t, 90*time.Second, "the leader to balance two members, all four partitions on one", func() error {
		bal.mu.Lock()
		n := bal.members
		bal.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		counts := []int{len(owned[0]), len(owned[1])}
		sort.Ints(counts)
		if n != 2 || !slices.Equal(counts, []int{0, 4}) {
			return fmt.Errorf("leader balanced %d members; partitions owned %v", n, owned)
		}
		return nil
	})
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("classic"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	var want []string
	for i := range 40 {
		v := fmt.Sprintf("classic-%d", i)
		want = append(want, v)
		if err := pr.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 60*time.Second, "the member with every partition to read every record", func() error {
		mu.Lock()
		defer mu.Unlock()
		owner := 0
		if len(owned[1]) == 4 {
			owner = 1
		}
		for _, v := range want {
			if !read[owner][v] {
				return fmt.Errorf("%s not read by member %d (owned %v)", v, owner, owned)
			}
			if read[1-owner][v] {
				return fmt.Errorf("%s read by member %d, which owns nothing", v, 1-owner)
			}
		}
		return nil
	})
}
