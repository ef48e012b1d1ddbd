package tests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
	"github.com/strata-mq/strata/tests/harness"
)

// Timeouts the fault tests run the coordinator with: short, so that a
// killed or paused member is expired quickly.
const (
	faultSession   = 2 * time.Second
	faultHeartbeat = 200 * time.Millisecond
	faultParts     = 12
)

// groupEnv is one cluster with a coordinator on Postgres, shared by the
// subtests of TestConsumerGroupFaults; each subtest uses its own topic and
// group.
type groupEnv struct {
	c        *harness.Cluster
	gateway  string
	gw       gatewayv1connect.GatewayServiceClient
	coord    coordinatorv1connect.CoordinatorServiceClient // the one coordinator, for calls the gateway does not pass on
	consumer string                                        // path of the groupconsumer binary
}

// TestConsumerGroupFaults runs consumer groups against real processes
// (controller, storage, gateway, one coordinator with offsets in Postgres)
// and checks the group's promises under member faults:
//
//   - members: 1, 3 and 12 in-process members on 12 partitions never hold a
//     partition at the same time (checked from OnAssigned/OnRevoked in the
//     members and from every DescribeGroup snapshot), together own all 12,
//     and read every record; the time until 3 members own all 12 with none
//     shared is logged as the rebalance time.
//   - kill: SIGKILL of one of three groupconsumer processes moves its
//     partitions to the others only after the session timeout; the new
//     owners start exactly at its last committed offsets (nothing committed
//     is read again, nothing after it is lost).
//   - pause: a member paused with SIGSTOP past its session and resumed
//     with SIGCONT cannot commit (its commit is fenced), the committed
//     offsets stay the new owner's, and it rejoins with a new member epoch
//     and reads on from the new owner's commits.
//   - restart: a consumer killed and started again resumes exactly at its
//     last commit.
//   - regrant: a member that lost partitions (to a rebalance, then to a
//     fence) and got them back cannot commit records it read before: the
//     commit fails with client.ErrFenced and the offset does not move back.
func TestConsumerGroupFaults(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{DSN: dsn, SessionTimeout: faultSession, HeartbeatInterval: faultHeartbeat})
	env := &groupEnv{
		c: c, gateway: gs.Gateway.URL,
		gw:       gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), gs.Gateway.URL),
		coord:    coordinatorv1connect.NewCoordinatorServiceClient(harness.H2CClient(), gs.Coordinators[0].URL),
		consumer: harness.Binary(t, "./cmd/groupconsumer"),
	}
	t.Run("members", env.testMembers)
	t.Run("kill", env.testKill)
	// The resumed zombie's commit races its heartbeat. With a short
	// processing delay the commit usually reaches the coordinator first
	// and is refused there; with one longer than the pause, the heartbeat
	// learns of the fence first and the client must refuse the commit.
	t.Run("pause/commit-first", func(t *testing.T) { env.testPause(t, "pause-a", 700*time.Millisecond) })
	t.Run("pause/heartbeat-first", func(t *testing.T) { env.testPause(t, "pause-b", 5*time.Second) })
	t.Run("restart", env.testRestart)
	t.Run("regrant", env.testRegrant)
}

// ownership checks, from the members' own callbacks, that no partition is
// assigned to a member while another has not yet given it up.
type ownership struct {
	t      *testing.T
	mu     sync.Mutex
	holder map[int32]int // partition -> member index
	last   time.Time     // when a partition was last assigned
}

func (o *ownership) assigned(member int, tps []client.TopicPartition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = time.Now()
	for _, tp := range tps {
		if h, ok := o.holder[tp.Partition]; ok && h != member {
			o.t.Errorf("partition %d assigned to member %d while member %d still owns it", tp.Partition, member, h)
		}
		o.holder[tp.Partition] = member
	}
}

func (o *ownership) revoked(member int, tps []client.TopicPartition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tp := range tps {
		if o.holder[tp.Partition] == member {
			delete(o.holder, tp.Partition)
		}
	}
}

// inprocMember is a GroupConsumer in the test process that commits after
// every Poll and records what it read.
type inprocMember struct {
	gc   *client.GroupConsumer
	mu   sync.Mutex
	read map[int32][]int64
	done chan struct{}
}

func (e *groupEnv) startInproc(t *testing.T, ctx context.Context, group, topic string, idx int, own *ownership) *inprocMember {
	t.Helper()
	gc, err := client.NewGroupConsumer(e.gateway, group, []string{topic},
		client.GroupConsumerOptions(client.FetchMaxWait(100*time.Millisecond), client.RetryBackoff(50*time.Millisecond)),
		client.OnAssigned(func(_ context.Context, tps []client.TopicPartition) { own.assigned(idx, tps) }),
		client.OnRevoked(func(_ context.Context, tps []client.TopicPartition) { own.revoked(idx, tps) }))
	if err != nil {
		t.Fatal(err)
	}
	m := &inprocMember{gc: gc, read: map[int32][]int64{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			recs, err := gc.Poll(ctx)
			if err != nil {
				continue
			}
			m.mu.Lock()
			for _, r := range recs {
				m.read[r.Partition] = append(m.read[r.Partition], r.Offset)
			}
			m.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = gc.CommitRecords(cctx, recs...)
			cancel()
		}
	}()
	return m
}

// testMembers: 1, 3 and 12 members on 12 partitions, each set a fresh group
// on one topic, all members started at once.
func (e *groupEnv) testMembers(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	const topic, perPart = "faults-members", 20
	e.c.CreateTopic(ctx, topic, faultParts, 1, nil)
	p := newTopicProducer(t, e.gateway, topic)
	p.produceRound(ctx, perPart)
	hw := map[int32]int64{}
	for part := range int32(faultParts) {
		hw[part] = perPart
	}
	var times []time.Duration
	for _, tc := range []struct {
		members, rounds int
	}{{1, 1}, {3, 5}, {12, 1}} {
		for round := range tc.rounds {
			group := fmt.Sprintf("members-%d-%d", tc.members, round)
			own := &ownership{t: t, holder: map[int32]int{}}
			mctx, stop := context.WithCancel(ctx)
			start := time.Now()
			ms := make([]*inprocMember, tc.members)
			for i := range ms {
				ms[i] = e.startInproc(t, mctx, group, topic, i, own)
			}
			took := waitOwnAll(t, ms, own, faultParts, start)
			if tc.members == 3 {
				times = append(times, took)
			}
			t.Logf("%d members: all %d partitions owned in balanced shares, none shared, %v after the members started", tc.members, faultParts, took)
			d := e.waitGroup(t, ctx, group, "every partition held by one of the members", func(d *coordinatorv1.GroupDescription) bool {
				return len(d.GetMembers()) == tc.members && len(heldBy(d)) == faultParts && d.GetState() == coordinatorv1.GroupState_GROUP_STATE_STABLE
			})
			for _, m := range d.GetMembers() {
				if n := len(memberParts(m)); n < faultParts/tc.members || n > (faultParts+tc.members-1)/tc.members {
					t.Errorf("%d members: member %s holds %d partitions, want a balanced share", tc.members, m.GetMemberId(), n)
				}
			}
			// Every record is read, by the group as a whole.
			testwait.Until(t, 60*time.Second, fmt.Sprintf("%d members to read every record", tc.members), func() error {
				read := map[int32][]int64{}
				for _, m := range ms {
					m.mu.Lock()
					for part, offs := range m.read {
						read[part] = append(read[part], offs...)
					}
					m.mu.Unlock()
				}
				if missing := missingOffsets(read, hw, nil); missing != "" {
					return fmt.Errorf("not read: %s", missing)
				}
				return nil
			})
			stop()
			for _, m := range ms {
				<-m.done
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = m.gc.Close(cctx)
				cancel()
			}
		}
	}
	slices.Sort(times)
	t.Logf("rebalance time, 12 partitions over 3 members (start of the members until all 12 owned, 4 each, none shared), %d runs: min %v, median %v, max %v",
		len(times), times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
}

// waitOwnAll waits until the members own total partitions between them,
// none twice, in balanced shares, and returns the time from start to the
// last assignment (taken from the members' callbacks, so the figure does
// not depend on how often this polls).
func waitOwnAll(t *testing.T, ms []*inprocMember, own *ownership, total int, start time.Time) time.Duration {
	t.Helper()
	testwait.Until(t, 60*time.Second, fmt.Sprintf("%d members to own all %d partitions in balanced shares", len(ms), total), func() error {
		owned := map[int32]bool{}
		var shares []int
		n := 0
		balanced := true
		for _, m := range ms {
			a := m.gc.Assignment()
			shares = append(shares, len(a))
			if len(a) < total/len(ms) || len(a) > (total+len(ms)-1)/len(ms) {
				balanced = false
			}
			for _, tp := range a {
				owned[tp.Partition] = true
				n++
			}
		}
		// Sampling members one after another can see a partition in
		// flight twice; the ownership callbacks are the sharing check.
		if balanced && n == total && len(owned) == total {
			return nil
		}
		return fmt.Errorf("shares %v, %d distinct partitions", shares, len(owned))
	})
	own.mu.Lock()
	defer own.mu.Unlock()
	return own.last.Sub(start)
}

// testKill: three consumer processes; one is SIGKILLed.
func (e *groupEnv) testKill(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	const topic, group = "faults-kill", "kill"
	e.c.CreateTopic(ctx, topic, faultParts, 1, nil)
	prod := newTopicProducer(t, e.gateway, topic)
	prod.start(ctx, 50*time.Millisecond)
	procs := []*harness.Process{
		e.startConsumer(t, "consumer-a", group, topic, 50*time.Millisecond),
		e.startConsumer(t, "consumer-b", group, topic, 50*time.Millisecond),
		e.startConsumer(t, "consumer-c", group, topic, 300*time.Millisecond),
	}
	victim, survivors := procs[2], procs[:2]
	victimID := memberIDOf(t, ctx, victim)
	e.waitGroup(t, ctx, group, "3 members holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 3 && len(heldBy(d)) == faultParts && d.GetState() == coordinatorv1.GroupState_GROUP_STATE_STABLE
	})
	// Let the victim commit a few batches of its own partitions.
	from := len(victim.Lines())
	for range 3 {
		_, i := waitLineFrom(ctx, victim, from, func(l string) bool { return strings.HasPrefix(l, "commit ok ") })
		from = i + 1
	}
	// What the victim holds and what is committed there, read while it is
	// alive: in a stable group only the victim commits its partitions, so
	// what it commits from here on is in its own output (below).
	before := e.describe(t, ctx, group)
	var lost []int32
	for _, m := range before.GetMembers() {
		if m.GetMemberId() == victimID {
			lost = memberParts(m)
		}
	}
	if len(lost) == 0 {
		t.Fatalf("the victim %s holds no partition in a stable group: %s", victimID, summarizeGroup(before))
	}
	// Kill it while it processes a batch, so records it read are not
	// committed.
	waitLineFrom(ctx, victim, from, func(l string) bool { return strings.HasPrefix(l, "record ") })
	killIdx := make([]int, len(survivors))
	for i, s := range survivors {
		killIdx[i] = len(s.Lines())
	}
	t.Logf("SIGKILL consumer-c (member %s)", victimID)
	victim.Kill()
	killedAt := time.Now()
	// Kill returns once the process is gone and its output read, so this
	// is everything it printed; a commit it sent and saw no answer to may
	// or may not have landed.
	victimEvents := parseEvents(victim.Lines())
	inflight := inflightCommit(victimEvents)
	committed := map[int32]int64{} // what the new owner must start from, unless the in-flight commit landed
	for _, p := range lost {
		committed[p] = max(committedOffsets(before)[p], lastCommitOK(victimEvents, p))
	}
	after := committedOffsets(e.describe(t, ctx, group))
	for _, p := range lost {
		if c := lastCommitOK(victimEvents, p); c > after[p] {
			t.Fatalf("partition %d: the victim printed commit %d but the group has %d", p, c, after[p])
		}
	}
	t.Logf("victim held %v; committed there: %v; a commit in flight when it died: %v", lost, pick(committed, lost), inflight)

	e.waitGroup(t, ctx, group, "the survivors holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 2 && len(heldBy(d)) == faultParts
	})
	moved := time.Since(killedAt)
	t.Logf("partitions of the killed member moved %v after the kill (session timeout %v)", moved.Round(time.Millisecond), faultSession)
	// The session runs from the victim's last heartbeat, which on a loaded
	// machine may precede the kill by more than a heartbeat interval; half
	// the session leaves room for that and still fails a coordinator that
	// moves a dead member's partitions at once.
	if moved < faultSession/2 {
		t.Errorf("partitions moved %v after the kill, before the session timeout %v could have passed", moved, faultSession)
	}
	prod.waitRounds(t, 10, "after the move") // the new owners read records produced after the move too
	hw := prod.stop(t)
	e.waitDrained(t, ctx, group, hw)
	waitPrinted(t, ctx, survivors, hw)

	// The new owners start exactly at the victim's commits and read on.
	readAfter := map[int32][]int64{} // partition -> offsets the survivors read after the move
	for i, s := range survivors {
		evs := parseEvents(s.Lines())
		for _, p := range lost {
			got := false
			for j, ev := range evs {
				switch {
				case j < killIdx[i]:
				case ev.kind == "assigned" && slices.Contains(ev.parts, p):
					got = true
				case ev.kind == "record" && ev.part == p:
					if !got {
						t.Errorf("partition %d: %s read offset %d after the kill before it was assigned the partition", p, s.Name(), ev.off)
					}
					readAfter[p] = append(readAfter[p], ev.off)
				}
			}
		}
	}
	redelivered := 0
	for _, p := range lost {
		from := max(committed[p], 0)
		off, sent := inflight[p]
		if sent && len(readAfter[p]) > 0 && slices.Min(readAfter[p]) == off {
			from = off // the commit in flight at the kill landed
		}
		if len(readAfter[p]) == 0 || slices.Min(readAfter[p]) != from {
			want := fmt.Sprint(from)
			if sent {
				want += fmt.Sprintf(" (or %d, had the commit in flight at the kill landed)", off)
			}
			t.Errorf("partition %d: the new owner's first record is %v, want the committed offset %s", p, firstOr(readAfter[p]), want)
		}
		if miss := missingOffsets(map[int32][]int64{p: readAfter[p]}, map[int32]int64{p: hw[p]}, map[int32]int64{p: from}); miss != "" {
			t.Errorf("partition %d: after the move the group lost records at or after the commit: %s", p, miss)
		}
		for _, ev := range victimEvents {
			if ev.kind == "record" && ev.part == p && ev.off >= from {
				redelivered++
			}
		}
	}
	// And the group as a whole read every record.
	all := map[int32][]int64{}
	for _, pr := range procs {
		for _, ev := range parseEvents(pr.Lines()) {
			if ev.kind == "record" {
				all[ev.part] = append(all[ev.part], ev.off)
			}
		}
	}
	for _, ev := range victimEvents {
		if ev.kind == "record" {
			all[ev.part] = append(all[ev.part], ev.off)
		}
	}
	if miss := missingOffsets(all, hw, nil); miss != "" {
		t.Errorf("records nobody read: %s", miss)
	}
	t.Logf("kill: %d records; %d read by the victim after its last commit and read again by the new owners (at least once)", sum(hw), redelivered)
}

// testPause: a member paused past its session comes back as a zombie.
func (e *groupEnv) testPause(t *testing.T, group string, delay time.Duration) {
	ctx := harness.Deadline(t, 90*time.Second)
	topic := "faults-" + group
	e.c.CreateTopic(ctx, topic, faultParts, 1, nil)
	prod := newTopicProducer(t, e.gateway, topic)
	prod.start(ctx, 50*time.Millisecond)
	// The zombie-to-be processes slowly, so it is paused between printing
	// a batch and committing it.
	zombie := e.startConsumer(t, "consumer-z", group, topic, delay)
	other := e.startConsumer(t, "consumer-o", group, topic, 50*time.Millisecond)
	zid, oid := memberIDOf(t, ctx, zombie), memberIDOf(t, ctx, other)
	e.waitGroup(t, ctx, group, "2 members holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 2 && len(heldBy(d)) == faultParts && d.GetState() == coordinatorv1.GroupState_GROUP_STATE_STABLE
	})

	// SIGSTOP it with a batch printed and its commit not yet sent. Stop
	// returns with the process still and every line it printed read, so
	// the lines say exactly where it stopped.
	var pending map[int32]int64 // what its next commit will carry
	var pauseIdx int
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			waitLineFrom(ctx, zombie, len(zombie.Lines()), func(l string) bool { return strings.HasPrefix(l, "record ") })
		}
		zombie.Stop()
		lines := zombie.Lines()
		pauseIdx = len(lines)
		pending = pendingBatch(parseEvents(lines))
		if pending != nil {
			break
		}
		if attempt == 10 {
			t.Fatalf("could not pause the member between a batch and its commit")
		}
		zombie.Continue()
	}
	epochBefore := lastEpoch(parseEvents(zombie.Lines()))
	pausedAt := time.Now()
	t.Logf("SIGSTOP consumer-z (member %s, epoch %d) with a batch pending commit %v", zid, epochBefore, pending)

	e.waitGroup(t, ctx, group, "the other member holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 1 && d.GetMembers()[0].GetMemberId() == oid && len(heldBy(d)) == faultParts
	})
	t.Logf("partitions of the paused member moved %v after the pause", time.Since(pausedAt).Round(time.Millisecond))
	prod.waitRounds(t, 10, "after the move") // the new owner reads records produced after the move too
	hw := prod.stop(t)
	e.waitDrained(t, ctx, group, hw)
	newOwner := committedOffsets(e.describe(t, ctx, group))
	for p, z := range pending {
		if z > newOwner[p] {
			t.Fatalf("partition %d: the new owner committed %d, below the zombie's pending %d", p, newOwner[p], z)
		}
	}

	t.Logf("SIGCONT consumer-z")
	zombie.Continue()
	line, _ := waitLineFrom(ctx, zombie, pauseIdx, func(l string) bool { return strings.HasPrefix(l, "commit ") })
	if !strings.HasPrefix(line, "commit fenced ") {
		t.Fatalf("the resumed zombie's commit was not fenced: %q", line)
	}
	t.Logf("zombie: %s", line)
	waitLineFrom(ctx, zombie, pauseIdx, func(l string) bool {
		ev := parseEvent(l)
		return ev.kind == "epoch" && ev.epoch > epochBefore
	})
	d := e.waitGroup(t, ctx, group, "the zombie back as a member with partitions", func(d *coordinatorv1.GroupDescription) bool {
		for _, m := range d.GetMembers() {
			if m.GetMemberId() == zid && m.GetMemberEpoch() > epochBefore && len(memberParts(m)) > 0 {
				return len(d.GetMembers()) == 2 && d.GetState() == coordinatorv1.GroupState_GROUP_STATE_STABLE
			}
		}
		return false
	})
	var zparts []int32
	for _, m := range d.GetMembers() {
		if m.GetMemberId() == zid {
			zparts = memberParts(m)
			t.Logf("zombie rejoined as the same member with epoch %d (was %d), holding %v", m.GetMemberEpoch(), epochBefore, zparts)
		}
	}
	if got := committedOffsets(d); !maps.Equal(got, newOwner) {
		t.Fatalf("committed offsets changed after the zombie came back:\n got %v\nwant %v", got, newOwner)
	}

	// Back in the group, it reads on from the new owner's commits.
	rejoinIdx := len(zombie.Lines())
	prod = newTopicProducer(t, e.gateway, topic)
	prod.produceRound(ctx, 2)
	for p := range hw {
		hw[p] += 2
	}
	waitPrinted(t, ctx, []*harness.Process{zombie, other}, hw)
	got := map[int32][]int64{}
	for j, ev := range parseEvents(zombie.Lines()) {
		if j >= rejoinIdx && ev.kind == "record" {
			got[ev.part] = append(got[ev.part], ev.off)
		}
	}
	for _, p := range zparts {
		if len(got[p]) == 0 || slices.Min(got[p]) != newOwner[p] {
			t.Errorf("partition %d: after rejoining the member read from %v, want the new owner's commit %d", p, firstOr(got[p]), newOwner[p])
		}
	}
}

// testRestart: one consumer, SIGKILLed and started again.
func (e *groupEnv) testRestart(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	const topic, group = "faults-restart", "restart"
	e.c.CreateTopic(ctx, topic, faultParts, 1, nil)
	prod := newTopicProducer(t, e.gateway, topic)
	prod.start(ctx, 50*time.Millisecond)
	r := e.startConsumer(t, "consumer-r", group, topic, 50*time.Millisecond)
	n := 0
	r.WaitLine(ctx, func(l string) bool {
		if strings.HasPrefix(l, "commit ok ") {
			n++
		}
		return n >= 5
	})
	r.Kill()
	first := parseEvents(r.Lines())
	committed := committedOffsets(e.describe(t, ctx, group))
	if len(committed) == 0 {
		t.Fatalf("nothing committed before the kill")
	}
	for p := range int32(faultParts) {
		if c := lastCommitOK(first, p); c > max(committed[p], 0) {
			t.Fatalf("partition %d: printed commit %d, the group has %d", p, c, committed[p])
		}
	}
	t.Logf("SIGKILL consumer-r; committed %v; restarting it", committed)
	restarted := time.Now()
	r.Restart()
	newID := memberIDOf(t, ctx, r)
	e.waitGroup(t, ctx, group, "the restarted member holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 1 && d.GetMembers()[0].GetMemberId() == newID && len(heldBy(d)) == faultParts
	})
	t.Logf("restarted member owns every partition %v after the restart (the killed member's session had to expire)", time.Since(restarted).Round(time.Millisecond))
	prod.waitRounds(t, 10, "after the restart") // the restarted member reads records produced after it rejoined too
	hw := prod.stop(t)
	e.waitDrained(t, ctx, group, hw)
	waitPrinted(t, ctx, []*harness.Process{r}, hw)
	second := map[int32][]int64{}
	for _, ev := range parseEvents(r.Lines()) {
		if ev.kind == "record" {
			second[ev.part] = append(second[ev.part], ev.off)
		}
	}
	from := map[int32]int64{}
	for p := range int32(faultParts) {
		from[p] = max(committed[p], 0)
		if from[p] < hw[p] && (len(second[p]) == 0 || slices.Min(second[p]) != from[p]) {
			t.Errorf("partition %d: the restarted consumer began at %v, want its last commit %d", p, firstOr(second[p]), from[p])
		}
	}
	if miss := missingOffsets(second, hw, from); miss != "" {
		t.Errorf("records after the last commit not read after the restart: %s", miss)
	}
	// A clean stop (SIGTERM: Close leaves the group) and start resumes at
	// once, and reads nothing again.
	if err := syscall.Kill(r.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("consumer-r after SIGTERM: %v", err)
	}
	if !slices.Contains(r.Lines(), "closed") {
		t.Fatalf("consumer-r did not close cleanly")
	}
	committed = committedOffsets(e.describe(t, ctx, group))
	restarted = time.Now()
	r.Restart()
	newID = memberIDOf(t, ctx, r)
	e.waitGroup(t, ctx, group, "the restarted member holding all partitions", func(d *coordinatorv1.GroupDescription) bool {
		return len(d.GetMembers()) == 1 && d.GetMembers()[0].GetMemberId() == newID && len(heldBy(d)) == faultParts
	})
	t.Logf("after a clean stop, the restarted member owns every partition %v after the restart", time.Since(restarted).Round(time.Millisecond))
	prod = newTopicProducer(t, e.gateway, topic)
	prod.produceRound(ctx, 1)
	for p := range hw {
		hw[p]++
	}
	e.waitDrained(t, ctx, group, hw)
	waitPrinted(t, ctx, []*harness.Process{r}, hw)
	third := map[int32][]int64{}
	for _, ev := range parseEvents(r.Lines()) {
		if ev.kind == "record" {
			third[ev.part] = append(third[ev.part], ev.off)
		}
	}
	for p := range int32(faultParts) {
		if want := []int64{committed[p]}; !slices.Equal(third[p], want) {
			t.Errorf("partition %d: after a clean restart read %v, want only the new record %v", p, third[p], want)
		}
	}
}

// --- consumer processes and their output

func (e *groupEnv) startConsumer(t *testing.T, name, group, topic string, delay time.Duration) *harness.Process {
	t.Helper()
	return harness.Start(t, name, []string{e.consumer, "--gateway", e.gateway, "--group", group, "--topic", topic,
		"--process-delay", delay.String()})
}

// event is one parsed groupconsumer stdout line (see its package doc).
type event struct {
	kind  string // member, epoch, assigned, revoked, record, committing, commit ok|fenced|error, closed
	part  int32  // record
	off   int64  // record
	epoch int32  // epoch, committing, commit
	parts []int32
	offs  map[int32]int64 // committing, commit: partition -> offset
	text  string
}

func parseEvent(l string) event {
	f := strings.Fields(l)
	if len(f) == 0 {
		return event{}
	}
	ev := event{kind: f[0], text: l}
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	switch {
	case f[0] == "epoch" && len(f) == 2:
		ev.epoch = int32(atoi(f[1]))
	case (f[0] == "assigned" || f[0] == "revoked") && len(f) == 2:
		for _, s := range strings.Split(f[1], ",") {
			ev.parts = append(ev.parts, int32(atoi(s)))
		}
	case f[0] == "record" && len(f) >= 3:
		ev.part, ev.off = int32(atoi(f[1])), atoi(f[2])
	case f[0] == "commit" && len(f) >= 4:
		ev.kind = "commit " + f[1]
		ev.epoch = int32(atoi(f[2]))
		ev.offs = parseOffsets(f[3])
	case f[0] == "committing" && len(f) >= 3:
		ev.epoch = int32(atoi(f[1]))
		ev.offs = parseOffsets(f[2])
	}
	return ev
}

// parseOffsets parses "P:OFF,P:OFF,...".
func parseOffsets(s string) map[int32]int64 {
	out := map[int32]int64{}
	for _, po := range strings.Split(s, ",") {
		p, o, ok := strings.Cut(po, ":")
		if !ok {
			continue
		}
		pn, _ := strconv.ParseInt(p, 10, 32)
		on, _ := strconv.ParseInt(o, 10, 64)
		out[int32(pn)] = on
	}
	return out
}

func parseEvents(lines []string) []event {
	evs := make([]event, len(lines))
	for i, l := range lines {
		evs[i] = parseEvent(l)
	}
	return evs
}

// waitLineFrom waits for a stdout line at index from or later that
// satisfies match, and returns it with its index.
func waitLineFrom(ctx context.Context, p *harness.Process, from int, match func(string) bool) (string, int) {
	i := -1
	l := p.WaitLine(ctx, func(l string) bool { i++; return i >= from && match(l) })
	return l, i
}

func memberIDOf(t *testing.T, ctx context.Context, p *harness.Process) string {
	t.Helper()
	return strings.TrimPrefix(p.WaitLine(ctx, func(l string) bool { return strings.HasPrefix(l, "member ") }), "member ")
}

// lastCommitOK is the last offset of p the process printed as committed, or
// -1.
func lastCommitOK(evs []event, p int32) int64 {
	last := int64(-1)
	for _, ev := range evs {
		if o, ok := ev.offs[p]; ok && ev.kind == "commit ok" {
			last = o
		}
	}
	return last
}

func lastEpoch(evs []event) int32 {
	var e int32
	for _, ev := range evs {
		if ev.kind == "epoch" {
			e = ev.epoch
		}
	}
	return e
}

// inflightCommit returns the offsets of a commit the process printed as
// sent (committing) with no outcome after it, or nil.
func inflightCommit(evs []event) map[int32]int64 {
	var out map[int32]int64
	for _, ev := range evs {
		switch {
		case ev.kind == "committing":
			out = ev.offs
		case strings.HasPrefix(ev.kind, "commit "):
			out = nil
		}
	}
	return out
}

// pendingBatch returns the offsets the records printed after the last
// commit sent (committing line) will be committed at, or nil when there
// are none: those records were read and their commit not yet sent.
func pendingBatch(evs []event) map[int32]int64 {
	var out map[int32]int64
	for _, ev := range evs {
		switch {
		case ev.kind == "committing", strings.HasPrefix(ev.kind, "commit "):
			out = nil
		case ev.kind == "record":
			if out == nil {
				out = map[int32]int64{}
			}
			out[ev.part] = max(out[ev.part], ev.off+1)
		}
	}
	return out
}

// waitPrinted waits until the processes together printed the last record
// of every partition (a drained group has committed them, and a process
// prints records before it commits them).
func waitPrinted(t *testing.T, ctx context.Context, procs []*harness.Process, hw map[int32]int64) {
	t.Helper()
	for {
		seen := map[int32]bool{}
		for _, p := range procs {
			for _, ev := range parseEvents(p.Lines()) {
				if ev.kind == "record" && ev.off == hw[ev.part]-1 {
					seen[ev.part] = true
				}
			}
		}
		if len(seen) == len(hw) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("last records printed for %d of %d partitions", len(seen), len(hw))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// --- group state through the gateway

func (e *groupEnv) describe(t *testing.T, ctx context.Context, group string) *coordinatorv1.GroupDescription {
	t.Helper()
	resp, err := e.gw.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: group}))
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	checkDisjoint(t, resp.Msg.GetGroup())
	return resp.Msg.GetGroup()
}

// waitGroup polls DescribeGroup until cond holds, checking every snapshot
// for a partition held by two members.
func (e *groupEnv) waitGroup(t *testing.T, ctx context.Context, group, what string, cond func(*coordinatorv1.GroupDescription) bool) *coordinatorv1.GroupDescription {
	t.Helper()
	last := "no answer"
	for {
		resp, err := e.gw.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: group}))
		if err == nil {
			d := resp.Msg.GetGroup()
			checkDisjoint(t, d)
			if cond(d) {
				return d
			}
			last = summarizeGroup(d)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s: waiting for %s: %v; last seen %s", group, what, ctx.Err(), last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// waitDrained waits until the group has committed every partition up to
// hw, and the log ends there.
func (e *groupEnv) waitDrained(t *testing.T, ctx context.Context, group string, hw map[int32]int64) {
	t.Helper()
	e.waitGroup(t, ctx, group, fmt.Sprintf("commits up to %v", hw), func(d *coordinatorv1.GroupDescription) bool {
		for _, p := range d.GetPartitions() {
			if p.GetCommittedOffset() != hw[p.GetPartition()] || p.GetLogEndOffset() != hw[p.GetPartition()] || p.GetLag() != 0 {
				return false
			}
		}
		return len(d.GetPartitions()) == len(hw)
	})
}

func checkDisjoint(t *testing.T, d *coordinatorv1.GroupDescription) {
	t.Helper()
	holder := map[int32]string{}
	for _, m := range d.GetMembers() {
		for _, p := range memberParts(m) {
			if h, ok := holder[p]; ok {
				t.Fatalf("group %s epoch %d: partition %d held by %s and %s", d.GetGroupId(), d.GetGroupEpoch(), p, h, m.GetMemberId())
			}
			holder[p] = m.GetMemberId()
		}
	}
}

func memberParts(m *coordinatorv1.GroupMember) []int32 {
	var out []int32
	for _, tp := range m.GetAssignment().GetPartitions() {
		out = append(out, tp.GetPartitions()...)
	}
	slices.Sort(out)
	return out
}

func heldBy(d *coordinatorv1.GroupDescription) map[int32]string {
	out := map[int32]string{}
	for _, m := range d.GetMembers() {
		for _, p := range memberParts(m) {
			out[p] = m.GetMemberId()
		}
	}
	return out
}

func committedOffsets(d *coordinatorv1.GroupDescription) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range d.GetPartitions() {
		out[p.GetPartition()] = p.GetCommittedOffset()
	}
	return out
}

func summarizeGroup(d *coordinatorv1.GroupDescription) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state %v epoch %d;", d.GetState(), d.GetGroupEpoch())
	for _, m := range d.GetMembers() {
		fmt.Fprintf(&b, " %s@%d:%v", m.GetMemberId()[:8], m.GetMemberEpoch(), memberParts(m))
	}
	b.WriteString("; committed/end:")
	for _, p := range d.GetPartitions() {
		fmt.Fprintf(&b, " %d=%d/%d", p.GetPartition(), p.GetCommittedOffset(), p.GetLogEndOffset())
	}
	return b.String()
}

// --- producing

// topicProducer writes records round robin over every partition of a
// topic: each round one record per partition, valued "r<round>".
type topicProducer struct {
	t       *testing.T
	p       *client.Producer
	gateway string
	topic   string
	rounds  atomic.Int64  // rounds begun
	acked   atomic.Int64  // rounds acknowledged
	quit    chan struct{} // closed by stop
	done    chan struct{} // closed when start's goroutine has returned
}

func newTopicProducer(t *testing.T, gateway, topic string) *topicProducer {
	t.Helper()
	p, err := client.NewProducer(gateway, client.ManualPartitioning(), client.Linger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &topicProducer{t: t, p: p, gateway: gateway, topic: topic}
}

// produceRound writes n rounds and waits for them to be acknowledged.
func (tp *topicProducer) produceRound(ctx context.Context, n int) {
	for range n {
		round := tp.rounds.Add(1)
		recs := make([]*client.Record, faultParts)
		for p := range recs {
			recs[p] = &client.Record{Topic: tp.topic, Partition: int32(p), Value: fmt.Appendf(nil, "r%d", round)}
		}
		if err := tp.p.ProduceSync(ctx, recs...); err != nil {
			tp.t.Errorf("produce round %d to %s: %v", round, tp.topic, err)
			return
		}
		tp.acked.Add(1)
	}
}

// start produces a round every interval until stop. A round is never cut
// short, so after stop every partition holds exactly one record per round.
func (tp *topicProducer) start(ctx context.Context, every time.Duration) {
	tp.quit, tp.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(tp.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tp.quit:
				return
			case <-t.C:
				tp.produceRound(ctx, 1)
			}
		}
	}()
}

// waitRounds waits until n more rounds than now have been acknowledged;
// start must be running.
func (tp *topicProducer) waitRounds(t *testing.T, n int64, what string) {
	t.Helper()
	target := tp.acked.Load() + n
	testwait.Until(t, 60*time.Second, fmt.Sprintf("%d more rounds produced to %s %s", n, tp.topic, what), func() error {
		if got := tp.acked.Load(); got < target {
			return fmt.Errorf("%d rounds of %d acknowledged", got, target)
		}
		return nil
	})
}

// stop ends start and returns the high watermark of every partition,
// checked against the rounds produced.
func (tp *topicProducer) stop(t *testing.T) map[int32]int64 {
	t.Helper()
	close(tp.quit)
	<-tp.done
	c, err := client.NewConsumer(tp.gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts := make([]int32, faultParts)
	for i := range parts {
		parts[i] = int32(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hw, err := c.ListOffsets(ctx, tp.topic, parts, client.EndOffset())
	if err != nil {
		t.Fatalf("list offsets of %s: %v", tp.topic, err)
	}
	for p, o := range hw {
		if o != tp.rounds.Load() {
			t.Fatalf("%s-%d ends at %d after %d rounds of one record per partition", tp.topic, p, o, tp.rounds.Load())
		}
	}
	return hw
}

// --- offset sets

// missingOffsets describes the offsets in [from[p], hw[p]) absent from
// read[p] (from is 0 when nil or unset), or returns "".
func missingOffsets(read map[int32][]int64, hw, from map[int32]int64) string {
	var out []string
	parts := slices.Sorted(maps.Keys(hw))
	for _, p := range parts {
		have := map[int64]bool{}
		for _, o := range read[p] {
			have[o] = true
		}
		var miss []int64
		for o := from[p]; o < hw[p]; o++ {
			if !have[o] {
				miss = append(miss, o)
			}
		}
		if len(miss) > 0 {
			if len(miss) > 5 {
				out = append(out, fmt.Sprintf("p%d: %d offsets from %d", p, len(miss), miss[0]))
			} else {
				out = append(out, fmt.Sprintf("p%d: %v", p, miss))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func firstOr(offs []int64) any {
	if len(offs) == 0 {
		return "nothing"
	}
	return slices.Min(offs)
}

func pick(m map[int32]int64, keys []int32) map[int32]int64 {
	out := map[int32]int64{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
