package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/encoding/protojson"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// groupRequests counts the group requests a franz-go client writes: the
// KIP-848 heartbeats and the classic protocol's joins.
type groupRequests struct{ heartbeats, joins atomic.Int64 }

func (g *groupRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch kmsg.Key(key) {
	case kmsg.ConsumerGroupHeartbeat:
		g.heartbeats.Add(1)
	case kmsg.JoinGroup:
		g.joins.Add(1)
	}
}

// kip848Group is a group of franz-go consumers using the KIP-848 protocol
// (kgo.ServerSideBalancer), each committing what it read before giving a
// partition up (BlockRebalanceOnPoll, a commit in OnPartitionsRevoked),
// so every record is read once by the group.
type kip848Group struct {
	t       *testing.T
	mu      sync.Mutex
	seen    map[string]int // value -> times read
	owners  []map[int32]bool
	members []*kgo.Client
	cancels []context.CancelFunc
	reqs    groupRequests
	dead    map[int]bool // members cut off, whose ownership is not looked at
}

// add starts a member; extra options (a dialer) are appended.
func (g *kip848Group) add(ctx context.Context, d *harness.Dev, group, topic string, extra ...kgo.Opt) {
	i := len(g.members)
	g.mu.Lock()
	g.owners = append(g.owners, map[int32]bool{})
	g.mu.Unlock()
	opts := append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.BlockRebalanceOnPoll(), kgo.WithHooks(&g.reqs),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, p := range m[topic] {
				g.owners[i][p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				g.t.Logf("member %d: commit on revoke: %v", i, err)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, p := range m[topic] {
				delete(g.owners[i], p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, p := range m[topic] {
				delete(g.owners[i], p)
			}
		}),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200 * time.Millisecond)}, extra...)
	cl := kafkaClient(g.t, d, opts...)
	pctx, cancel := context.WithCancel(ctx)
	g.members = append(g.members, cl)
	g.cancels = append(g.cancels, cancel)
	go func() {
		for pctx.Err() == nil {
			fs := cl.PollFetches(pctx)
			if fs.IsClientClosed() {
				return
			}
			g.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { g.seen[string(r.Value)]++ })
			g.mu.Unlock()
			cl.MarkCommitRecords(fs.Records()...)
			cl.AllowRebalance()
		}
	}()
}

// leave stops member i's polling and closes it, which leaves the group
// (KIP-848: a heartbeat with epoch -1) after committing.
func (g *kip848Group) leave(i int) {
	g.cancels[i]()
	g.members[i].Close()
}

// readAll waits until every value of acked was read, and fails if one was
// read twice.
func (g *kip848Group) readAll(acked map[[2]int64]string) func() error {
	return func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, v := range acked {
			if n := g.seen[v]; n == 0 {
				return fmt.Errorf("%s not read yet (%d distinct read)", v, len(g.seen))
			}
		}
		return nil
	}
}

// checkOnce fails unless every value read was read once.
func (g *kip848Group) checkOnce(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for v, n := range g.seen {
		if n != 1 {
			t.Fatalf("%s read %d times by the group", v, n)
		}
	}
}

// ownersCover waits until the members in live own every one of n
// partitions between them, each some, and the others (but the dead) none.
func (g *kip848Group) ownersCover(n int, live ...int) func() error {
	return func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		all := map[int32]int{}
		for i, o := range g.owners {
			if g.dead[i] {
				continue
			}
			isLive := false
			for _, l := range live {
				isLive = isLive || l == i
			}
			if !isLive && len(o) > 0 {
				return fmt.Errorf("member %d still owns %v", i, o)
			}
			if isLive && len(o) == 0 {
				return fmt.Errorf("member %d owns nothing: %v", i, g.owners)
			}
			for p := range o {
				all[p]++
			}
		}
		if len(all) != n {
			return fmt.Errorf("%d of %d partitions owned: %v", len(all), n, g.owners)
		}
		for p, c := range all {
			if c > 1 {
				return fmt.Errorf("partition %d owned by %d members: %v", p, c, g.owners)
			}
		}
		return nil
	}
}

// committedAtEnd is nil once the CLI (Connect, through the gateway) shows
// group's committed offset at the log end of each of n partitions.
func committedAtEnd(cli func(stdin string, args ...string) (string, error), group string, n int) func() error {
	return func() error {
		out, err := cli("", "group", "describe", group, "--output", "json")
		if err != nil {
			return err
		}
		var desc gatewayv1.DescribeGroupResponse
		if err := protojson.Unmarshal([]byte(out), &desc); err != nil {
			return err
		}
		ps := desc.GetGroup().GetPartitions()
		if len(ps) != n {
			return fmt.Errorf("%d partitions described, want %d", len(ps), n)
		}
		for _, p := range ps {
			if p.GetCommittedOffset() != p.GetLogEndOffset() || p.GetLogEndOffset() == 0 {
				return fmt.Errorf("partition %d committed %d, log end %d", p.GetPartition(), p.GetCommittedOffset(), p.GetLogEndOffset())
			}
		}
		return nil
	}
}

// testKIP848Group: three franz-go KIP-848 consumers on six partitions
// read every record once, through ConsumerGroupHeartbeat (no JoinGroup),
// and commit it (the CLI sees the offsets at the log end); when one
// leaves, the other two take its partitions and read the rest, once.
func testKIP848Group(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "kip848", "-p", "6", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("kip848"))
	acked := map[[2]int64]string{}
	produceKeyed(t, ctx, pr, acked, 0, 300)
	g := &kip848Group{t: t, seen: map[string]int{}}
	for range 3 {
		g.add(ctx, d, "g848", "kip848")
	}
	testwait.Until(t, 30*time.Second, "the group to read 300 records", g.readAll(acked))
	testwait.Until(t, 30*time.Second, "each of the three members to own partitions", g.ownersCover(6, 0, 1, 2))
	if h, j := g.reqs.heartbeats.Load(), g.reqs.joins.Load(); h == 0 || j != 0 {
		t.Fatalf("%d ConsumerGroupHeartbeat and %d JoinGroup requests: want the KIP-848 protocol only", h, j)
	}
	testwait.Until(t, 30*time.Second, "commits at the log end", committedAtEnd(cli, "g848", 6))
	g.checkOnce(t)

	g.leave(2)
	testwait.Until(t, 30*time.Second, "members 0 and 1 to take member 2's partitions", g.ownersCover(6, 0, 1))
	produceKeyed(t, ctx, pr, acked, 300, 600)
	testwait.Until(t, 30*time.Second, "the two to read all 600 records", g.readAll(acked))
	testwait.Until(t, 30*time.Second, "commits at the log end", committedAtEnd(cli, "g848", 6))
	g.checkOnce(t)
	t.Logf("%d heartbeats; owners at the end %v", g.reqs.heartbeats.Load(), g.owners)
}

// testKIP848Range: two franz-go KIP-848 members asking for the "range"
// server assignor (kgo.RangeBalancer) on two co-partitioned topics get
// the same partition numbers of each, as a join over them needs, and the
// group is described with that assignor.
func testKIP848Range(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	for _, topic := range []string{"co-clicks", "co-views"} {
		if _, err := cli("", "topic", "create", topic, "-p", "4", "-r", "3"); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		cl := kafkaClient(t, d, kgo.ConsumerGroup("g848-range"), kgo.ConsumeTopics("co-clicks", "co-views"),
			kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
		pctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go func() {
			for pctx.Err() == nil {
				cl.PollFetches(pctx)
			}
		}()
	}
	testwait.Until(t, 60*time.Second, "two range members to own the same partitions of both topics", func() error {
		out, err := cli("", "group", "describe", "g848-range", "--output", "json")
		if err != nil {
			return err
		}
		var desc gatewayv1.DescribeGroupResponse
		if err := protojson.Unmarshal([]byte(out), &desc); err != nil {
			return err
		}
		g := desc.GetGroup()
		if g.GetProtocolType() != "" {
			t.Fatalf("the group is a classic one (protocol type %q): the members fell back from KIP-848", g.GetProtocolType())
		}
		if g.GetAssignor() != "range" || len(g.GetMembers()) != 2 {
			return fmt.Errorf("assignor %q with %d members", g.GetAssignor(), len(g.GetMembers()))
		}
		total := 0
		for _, m := range g.GetMembers() {
			got := map[string][]int32{}
			for _, tp := range m.GetAssignment().GetPartitions() {
				got[tp.GetTopic()] = append(got[tp.GetTopic()], tp.GetPartitions()...)
				total += len(tp.GetPartitions())
			}
			if fmt.Sprint(got["co-clicks"]) != fmt.Sprint(got["co-views"]) || len(got["co-clicks"]) != 2 {
				return fmt.Errorf("member %s owns %v", m.GetMemberId(), got)
			}
		}
		if total != 8 {
			return fmt.Errorf("%d partitions owned, want 8", total)
		}
		return nil
	})
}

// testKIP848StaticMember: a franz-go KIP-848 member with an instance id
// (kgo.InstanceID) that closes leaves with epoch -2; the coordinator
// keeps its partitions, moves nobody, and a new process with the same
// instance id gets the same partitions back at the same group epoch.
func testKIP848StaticMember(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "static848", "-p", "4", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	start := func(extra ...kgo.Opt) (*kgo.Client, context.CancelFunc) {
		cl := kafkaClient(t, d, append([]kgo.Opt{kgo.ConsumerGroup("g848-static"), kgo.ConsumeTopics("static848"), kgo.ServerSideBalancer()}, extra...)...)
		pctx, cancel := context.WithCancel(ctx)
		go func() {
			for pctx.Err() == nil {
				cl.PollFetches(pctx)
			}
		}()
		return cl, cancel
	}
	// describe lists each member as its instance id and partitions, in a
	// stable order.
	describe := func() (epoch int32, members []string, err error) {
		out, err := cli("", "group", "describe", "g848-static", "--output", "json")
		if err != nil {
			return 0, nil, err
		}
		var desc gatewayv1.DescribeGroupResponse
		if err := protojson.Unmarshal([]byte(out), &desc); err != nil {
			return 0, nil, err
		}
		for _, m := range desc.GetGroup().GetMembers() {
			var ps []int32
			for _, tp := range m.GetAssignment().GetPartitions() {
				ps = append(ps, tp.GetPartitions()...)
			}
			slices.Sort(ps)
			members = append(members, fmt.Sprintf("%q:%v", m.GetInstanceId(), ps))
		}
		slices.Sort(members)
		return desc.GetGroup().GetGroupEpoch(), members, nil
	}
	static, stopStatic := start(kgo.InstanceID("host-a"))
	_, stopDynamic := start()
	defer stopDynamic()
	var epoch int32
	var settled []string
	testwait.Until(t, 60*time.Second, "two members with two partitions each", func() error {
		e, ms, err := describe()
		if err != nil {
			return err
		}
		if len(ms) != 2 || !strings.HasSuffix(ms[0], "]") || strings.Count(ms[0], " ") != 1 || strings.Count(ms[1], " ") != 1 {
			return fmt.Errorf("members %v", ms)
		}
		epoch, settled = e, ms
		return nil
	})
	stopStatic()
	static.Close() // leaves with epoch -2
	e, ms, err := describe()
	if err != nil {
		t.Fatal(err)
	}
	if e != epoch || !slices.Equal(ms, settled) {
		t.Fatalf("after the static member left: epoch %d members %v, want %d and %v unchanged", e, ms, epoch, settled)
	}
	_, stopAgain := start(kgo.InstanceID("host-a"))
	defer stopAgain()
	testwait.Until(t, 60*time.Second, "the restarted static member to hold its partitions again", func() error {
		e, ms, err := describe()
		if err != nil {
			return err
		}
		if e != epoch || !slices.Equal(ms, settled) {
			return fmt.Errorf("epoch %d members %v, want %d and %v", e, ms, epoch, settled)
		}
		return nil
	})
}

// testKIP848Regex: a franz-go KIP-848 member subscribed by regular
// expression (kgo.ConsumeRegex, sent as SubscribedTopicRegex) is assigned
// the matching topic, not the others, and a matching topic created later
// once the coordinator sees it; DescribeGroup shows the expression.
func testKIP848Regex(t *testing.T, ctx context.Context, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	for _, topic := range []string{"rx-first", "rxnot"} {
		if _, err := cli("", "topic", "create", topic, "-p", "2", "-r", "3"); err != nil {
			t.Fatal(err)
		}
	}
	cl := kafkaClient(t, d, kgo.ConsumerGroup("g848-regex"), kgo.ConsumeRegex(), kgo.ConsumeTopics("^rx-.*"), kgo.ServerSideBalancer())
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
		}
	}()
	owned := func(want ...string) func() error {
		return func() error {
			out, err := cli("", "group", "describe", "g848-regex", "--output", "json")
			if err != nil {
				return err
			}
			var desc gatewayv1.DescribeGroupResponse
			if err := protojson.Unmarshal([]byte(out), &desc); err != nil {
				return err
			}
			ms := desc.GetGroup().GetMembers()
			if len(ms) != 1 || ms[0].GetSubscribedTopicRegex() == "" {
				return fmt.Errorf("members %v", ms)
			}
			var got []string
			for _, tp := range ms[0].GetAssignment().GetPartitions() {
				for _, p := range tp.GetPartitions() {
					got = append(got, fmt.Sprintf("%s-%d", tp.GetTopic(), p))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("assigned %v, want %v", got, want)
			}
			return nil
		}
	}
	testwait.Until(t, 60*time.Second, "rx-first to be assigned, rxnot not", owned("rx-first-0", "rx-first-1"))
	if _, err := cli("", "topic", "create", "rx-later", "-p", "1", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 60*time.Second, "rx-later, created after the join, to be assigned", owned("rx-first-0", "rx-first-1", "rx-later-0"))
}
