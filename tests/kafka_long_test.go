//go:build kafka

package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// The Kafka protocol's long suite (make test-kafka, build tag kafka):
// failover under a producer and consumer groups with a member killed.

// TestKafkaFailover kills the leader of a partition with SIGKILL while a
// franz-go idempotent producer with acks=all writes to it, restarts the
// node, and checks that every acknowledged record is read back once, at
// the offset it was acknowledged at, in order.
func TestKafkaFailover(t *testing.T) {
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := cli("", "topic", "create", "fo", "-p", "1", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(kafkaClient(t, d))
	var leader int32 = -1
	testwait.Until(t, 30*time.Second, "a leader for fo-0", func() error {
		md, err := adm.Metadata(ctx, "fo")
		if err != nil {
			return err
		}
		if p := md.Topics["fo"].Partitions[0]; p.Leader > 0 && len(p.ISR) == 3 {
			leader = p.Leader
			return nil
		}
		return fmt.Errorf("partition %+v", md.Topics["fo"].Partitions[0])
	})
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("fo"),
		kgo.RecordDeliveryTimeout(2*time.Minute), kgo.MetadataMinAge(100*time.Millisecond))
	var mu sync.Mutex
	acked := map[int]int64{} // sequence -> offset
	var failed []error
	produce := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			pr.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[i] = r.Offset
			})
		}
		wg.Wait()
	}
	produce(0, 200)
	victim := d.Process(t, "storage", int(leader))
	done := make(chan struct{})
	go func() { defer close(done); produce(200, 600) }()
	d.Kill(t, "storage", int(leader))
	<-done
	harness.Start(t, fmt.Sprintf("storage-%d-again", leader), victim.Argv)
	produce(600, 700)
	if len(failed) > 0 {
		t.Logf("%d records failed (allowed: they were never acknowledged), first: %v", len(failed), failed[0])
	}
	if len(acked) < 300 {
		t.Fatalf("only %d records acknowledged", len(acked))
	}
	maxOffset := int64(-1)
	for _, off := range acked {
		maxOffset = max(maxOffset, off)
	}
	got := consumeUntil(t, d, "fo", fmt.Sprintf("offset %d", maxOffset), func(got []*kgo.Record) bool {
		return len(got) > 0 && got[len(got)-1].Offset >= maxOffset
	})
	offsets := map[int64]int{}
	last := -1
	for _, r := range got {
		var seq int
		fmt.Sscan(string(r.Value), &seq)
		if prev, dup := offsets[r.Offset]; dup {
			t.Fatalf("offset %d read twice (%d, %d)", r.Offset, prev, seq)
		}
		offsets[r.Offset] = seq
		if seq <= last {
			t.Fatalf("record %d after %d: out of order or duplicated", seq, last)
		}
		last = seq
	}
	for seq, off := range acked {
		if offsets[off] != seq {
			t.Fatalf("record %d acknowledged at offset %d, read there: %d", seq, off, offsets[off])
		}
	}
	keys := make([]int, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.Logf("%d records acknowledged (%d..%d), all read back in order", len(acked), keys[0], keys[len(keys)-1])
}

// crashDialer dials normally until crash, then closes every connection it
// made and refuses new ones: to the cluster, the client died.
type crashDialer struct {
	mu      sync.Mutex
	conns   []net.Conn
	crashed bool
}

func (d *crashDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.crashed {
		return nil, errors.New("crashed")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *crashDialer) crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashed = true
	for _, c := range d.conns {
		c.Close()
	}
}

// TestKafkaGroupMemberKilled runs a franz-go consumer group of three
// members (the classic protocol, cooperative-sticky) over a six-partition
// topic, kills one member (its connections cut, no LeaveGroup), produces
// more, and checks that the two survivors take over its partitions and
// read and commit everything; kadm then lists and describes the group,
// and deletes it once it is empty.
func TestKafkaGroupMemberKilled(t *testing.T) {
	// A short session timeout, so the killed member's partitions move
	// within seconds: a classic member is removed after its own
	// session.timeout.ms, as in Kafka.
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 5*time.Minute)
	if _, err := cli("", "topic", "create", "grp", "-p", "6", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("grp"))
	produceN := func(from, to int) { produceNumbered(ctx, t, pr, from, to) }
	produceN(0, 300)

	var mu sync.Mutex
	seen := map[string]int{} // value -> times read
	owners := map[int]map[int32]bool{}
	type member struct {
		cl   *kgo.Client
		dial *crashDialer
	}
	var members []member
	for i := range 3 {
		dial := &crashDialer{}
		owners[i] = map[int32]bool{}
		cl := kafkaClient(t, d, kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"), kgo.SessionTimeout(6*time.Second),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Dialer(dial.dial),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["grp"] {
					owners[i][p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
				cl.CommitMarkedOffsets(ctx)
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["grp"] {
					delete(owners[i], p)
				}
			}),
			kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200*time.Millisecond))
		members = append(members, member{cl, dial})
		go func() {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() {
					return
				}
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
				mu.Unlock()
				cl.MarkCommitRecords(fs.Records()...)
			}
		}()
	}
	readAll := func(n int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if seen[fmt.Sprint(i)] == 0 {
					return fmt.Errorf("record %d not read yet (%d distinct read)", i, len(seen))
				}
			}
			return nil
		}
	}
	testwait.Until(t, 2*time.Minute, "the group to read the first 300 records", readAll(300))
	testwait.Until(t, time.Minute, "every member to own partitions", func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := range 3 {
			if len(owners[i]) == 0 {
				return fmt.Errorf("owners %v", owners)
			}
		}
		return nil
	})
	t.Logf("before the kill: %v", owners)
	members[2].dial.crash()
	produceN(300, 600)
	testwait.Until(t, 3*time.Minute, "the survivors to read all 600 records", readAll(600))
	adm := kadm.NewClient(kafkaClient(t, d))
	testwait.Until(t, time.Minute, "committed offsets at the end of every partition", func() error {
		ends, err := adm.ListEndOffsets(ctx, "grp")
		if err != nil {
			return err
		}
		cs, err := adm.FetchOffsets(ctx, "g1")
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := cs.Lookup("grp", o.Partition); !ok || c.At != o.Offset {
				behind = append(behind, fmt.Sprintf("%d: committed %d end %d", o.Partition, c.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("%v", behind)
		}
		return nil
	})
	mu.Lock()
	t.Logf("after the kill: %v; %d records read, %d distinct", owners, func() int {
		n := 0
		for _, c := range seen {
			n += c
		}
		return n
	}(), len(seen))
	mu.Unlock()

	groups, err := adm.ListGroups(ctx)
	if err != nil || !slices.Contains(groups.Groups(), "g1") {
		t.Fatalf("list groups: %v %v", err, groups.Groups())
	}
	described, err := adm.DescribeGroups(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if g := described["g1"]; len(g.Members) != 2 {
		t.Fatalf("describe g1: %d members, want the 2 survivors: %+v", len(g.Members), g)
	}
	members[0].cl.Close()
	members[1].cl.Close()
	testwait.Until(t, time.Minute, "g1 to be deleted once empty", func() error {
		res, err := adm.DeleteGroup(ctx, "g1")
		if err != nil {
			return err
		}
		return res.Err
	})
}

// TestKafkaKIP848MemberKilled is TestKafkaGroupMemberKilled with
// franz-go's KIP-848 consumer: three members on six partitions, one cut
// off without leaving; after the coordinator's session timeout the two
// survivors own every partition, read all 600 records and commit them.
func TestKafkaKIP848MemberKilled(t *testing.T) {
	t.Setenv("STRATA_SESSION_TIMEOUT", "6s")
	t.Setenv("STRATA_HEARTBEAT_INTERVAL", "1s")
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 5*time.Minute)
	if _, err := cli("", "topic", "create", "grp848", "-p", "6", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("grp848"))
	acked := map[[2]int64]string{}
	produceKeyed(t, ctx, pr, acked, 0, 300)
	g := &kip848Group{t: t, seen: map[string]int{}, dead: map[int]bool{}}
	dials := make([]*crashDialer, 3)
	for i := range 3 {
		dials[i] = &crashDialer{}
		g.add(ctx, d, "g848k", "grp848", kgo.Dialer(dials[i].dial))
	}
	testwait.Until(t, time.Minute, "the group to read the first 300 records", g.readAll(acked))
	testwait.Until(t, time.Minute, "every member to own partitions", g.ownersCover(6, 0, 1, 2))
	if h, j := g.reqs.heartbeats.Load(), g.reqs.joins.Load(); h == 0 || j != 0 {
		t.Fatalf("%d ConsumerGroupHeartbeat and %d JoinGroup requests: want the KIP-848 protocol only", h, j)
	}
	g.mu.Lock()
	t.Logf("before the kill: %v", g.owners)
	g.dead[2] = true
	g.mu.Unlock()
	dials[2].crash()
	produceKeyed(t, ctx, pr, acked, 300, 600)
	testwait.Until(t, time.Minute, "the survivors to own every partition", g.ownersCover(6, 0, 1))
	testwait.Until(t, time.Minute, "the survivors to read all 600 records", g.readAll(acked))
	testwait.Until(t, time.Minute, "committed offsets at the end of every partition", committedAtEnd(cli, "g848k", 6))
	g.mu.Lock()
	t.Logf("after the kill: %v", g.owners)
	g.mu.Unlock()
}

// TestKafkaFetchSessionFailover consumes with fetch sessions across the
// partitions of three leaders, kills one leader with SIGKILL while records
// keep coming, and restarts it: its sessions are gone, the consumer moves
// to the new leaders (and back to a fresh session wherever its old one is
// unknown), and every acknowledged record is read at its offset.
func TestKafkaFetchSessionFailover(t *testing.T) {
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := cli("", "topic", "create", "fsf", "-p", "9", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("fsf"),
		kgo.RecordDeliveryTimeout(2*time.Minute), kgo.MetadataMinAge(100*time.Millisecond))
	acked := map[[2]int64]string{}
	produceKeyed(t, ctx, pr, acked, 0, 300)
	cons := kafkaClient(t, d, kgo.ConsumeTopics("fsf"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	read := map[[2]int64]string{}
	pollInto(t, ctx, cons, read, func() error {
		if len(read) < 300 {
			return fmt.Errorf("%d of 300 records read", len(read))
		}
		if f := kafkaFetches(t, ctx, d, nil); f["incremental"] < 3 {
			return fmt.Errorf("storage nodes' fetches by session: %v", f)
		}
		return nil
	})
	md, err := kadm.NewClient(kafkaClient(t, d)).Metadata(ctx, "fsf")
	if err != nil {
		t.Fatal(err)
	}
	leader := md.Topics["fsf"].Partitions[0].Leader
	victim := d.Process(t, "storage", int(leader))
	d.Kill(t, "storage", int(leader))
	produceKeyed(t, ctx, pr, acked, 300, 600)
	harness.Start(t, fmt.Sprintf("storage-%d-again", leader), victim.Argv)
	produceKeyed(t, ctx, pr, acked, 600, 700)
	pollInto(t, ctx, cons, read, func() error {
		if len(read) < len(acked) {
			return fmt.Errorf("%d of %d records read", len(read), len(acked))
		}
		return nil
	})
	checkRead(t, acked, read)
	skip := map[string]bool{fmt.Sprintf("storage-%d", leader): true}
	f := kafkaFetches(t, ctx, d, skip)
	t.Logf("%d records read; the surviving nodes' fetches by session: %v", len(read), f)
}

// TestKafkaFollowsLeaderWithoutGateway kills the gateway, then the leader
// of a partition, under a franz-go acks=all producer bootstrapped on the
// storage nodes' listeners: the nodes answer Metadata from their own view
// of the controllers, so the producer finds the new leader, and every
// acknowledged record is read back at its offset, with no gateway.
func TestKafkaFollowsLeaderWithoutGateway(t *testing.T) {
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := cli("", "topic", "create", "nogw", "-p", "1", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for i := 1; i <= 3; i++ {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", d.BasePort+40+i))
	}
	adm := kadm.NewClient(kafkaClient(t, d, kgo.SeedBrokers(seeds...)))
	leader := func(isr int) (int32, error) {
		md, err := adm.Metadata(ctx, "nogw")
		if err != nil {
			return -1, err
		}
		p := md.Topics["nogw"].Partitions[0]
		if p.Leader < 1 || len(p.ISR) < isr {
			return -1, fmt.Errorf("partition %+v", p)
		}
		return p.Leader, nil
	}
	var first int32
	testwait.Until(t, 30*time.Second, "a leader for nogw-0 with 3 in sync", func() (err error) {
		first, err = leader(3)
		return err
	})
	pr := kafkaClient(t, d, kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("nogw"),
		kgo.RecordDeliveryTimeout(time.Minute), kgo.MetadataMinAge(100*time.Millisecond))
	acked := map[string]int64{}
	produce := func(from, to int) {
		t.Helper()
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Value: []byte(fmt.Sprint(i))})
		}
		for _, r := range pr.ProduceSync(ctx, rs...) {
			if r.Err != nil {
				t.Fatalf("record %s: %v", r.Record.Value, r.Err)
			}
			acked[string(r.Record.Value)] = r.Record.Offset
		}
	}
	produce(0, 100)
	d.Kill(t, "gateway", 1)
	produce(100, 200)
	d.Kill(t, "storage", int(first))
	produce(200, 300)
	moved, err := leader(1)
	if err != nil || moved == first {
		t.Fatalf("after the kill: leader %d (%v), was %d", moved, err, first)
	}

	got := consumeUntil(t, d, "nogw", fmt.Sprintf("%d records", len(acked)), func(got []*kgo.Record) bool {
		return len(got) >= len(acked)
	}, kgo.SeedBrokers(seeds...))
	read := map[int64]string{}
	for _, r := range got {
		read[r.Offset] = string(r.Value)
	}
	for v, off := range acked {
		if read[off] != v {
			t.Errorf("record %s acknowledged at offset %d, read there: %q", v, off, read[off])
		}
	}
	t.Logf("leader %d killed after the gateway, %d led next; %d records acknowledged and read back", first, moved, len(acked))
}

// produceNumbered produces records from to to-1 through pr, each keyed
// and valued by its number, and fails the test unless all are
// acknowledged.
func produceNumbered(ctx context.Context, t *testing.T, pr *kgo.Client, from, to int) {
	t.Helper()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))})
	}
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}
