package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/storage/internal/clock"
)

// testBatch is one record batch of n records.
func testBatch(t testing.TB, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: []byte("v")}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leaderOf opens a replica on node 1 and makes it lead st.
func leaderOf(t testing.TB, cfg Config, opts Options, st State) *Replica {
	t.Helper()
	opts.NodeID = 1
	r, err := Open(t.TempDir(), "orders", "id", 0, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.ApplyState(st)
	if r.View().Role != RoleLeader {
		t.Fatalf("replica does not lead %+v", st)
	}
	return r
}

// produceLeader appends n records with acks=1 and returns the last offset.
func produceLeader(t testing.TB, r *Replica, n int) int64 {
	t.Helper()
	res, err := r.Produce(context.Background(), testBatch(t, n), AcksLeader, -1, time.Second)
	if err != nil {
		t.Fatalf("acks=1 produce: %v", err)
	}
	return res.LastOffset
}

// fetch is one Replicate call of follower id (node epoch 10) at the
// replica's leader epoch.
func fetch(t testing.TB, r *Replica, id int32, offset int64) ReplicateResult {
	t.Helper()
	return fetchAs(t, r, id, 10, offset)
}

// fetchAs is one Replicate call of incarnation nodeEpoch of follower id,
// whose log matches the leader's up to offset.
func fetchAs(t testing.TB, r *Replica, id int32, nodeEpoch int64, offset int64) ReplicateResult {
	t.Helper()
	return fetchWith(t, r, Fetch{ReplicaID: id, NodeEpoch: nodeEpoch, FetchOffset: offset})
}

// fetchWith is one Replicate call of f, at the replica's leader epoch, by
// a follower whose log matches the leader's up to f.FetchOffset.
func fetchWith(t testing.TB, r *Replica, f Fetch) ReplicateResult {
	t.Helper()
	f.LeaderEpoch, f.LastFetchedEpoch, f.MaxBytes = r.View().State.LeaderEpoch, -1, 1<<20
	if f.FetchOffset > 0 {
		f.LastFetchedEpoch = r.Log().LatestEpoch()
	}
	res, err := r.Replicate(f)
	if err != nil {
		t.Fatalf("replicate from %d (node epoch %d) at %d: %v", f.ReplicaID, f.NodeEpoch, f.FetchOffset, err)
	}
	if res.Diverging {
		t.Fatalf("replicate from %d at %d: told to truncate to %d", f.ReplicaID, f.FetchOffset, res.DivergingEnd)
	}
	return res
}

// inSyncLeader is a leader at epoch 3 on a fake clock, with followers 2
// and 3 in its ISR, lag time lag and two records, not yet fetched.
func inSyncLeader(t testing.TB, lag time.Duration) (*Replica, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	r := leaderOf(t, Config{MinISR: 2}, Options{Clock: clk, LagTime: lag},
		State{LeaderID: 1, LeaderEpoch: 3, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	produceLeader(t, r, 2)
	return r, clk
}

// KIP-966: the high watermark only moves while the ISR holds at least
// min.insync.replicas members. Records a leader alone holds (acks=1, or
// acks=all refused after the append) stay invisible to consumers, so a
// leader that loses its unflushed tail cannot hand out offsets consumers
// already read.
func TestHighWatermarkWaitsForMinISR(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	produceLeader(t, r, 3)
	fetch(t, r, 2, 3)
	if hw := r.Log().HighWatermark(); hw != 3 {
		t.Fatalf("ISR of 2 with min.insync.replicas 2, follower at 3: high watermark %d, want 3", hw)
	}

	// The controller shrinks the ISR to the leader: acks=1 records are
	// appended but not committed.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1}})
	produceLeader(t, r, 2)
	if hw := r.Log().HighWatermark(); hw != 3 {
		t.Fatalf("ISR of 1 below min.insync.replicas 2: high watermark moved to %d, want it kept at 3", hw)
	}
	rr, err := r.Read(-1, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rr.NextOffset > 3 || rr.HighWatermark != 3 {
		t.Fatalf("consumer read up to %d with high watermark %d; records above 3 have one copy", rr.NextOffset, rr.HighWatermark)
	}

	// A new leader epoch with the leader alone in the ISR changes nothing.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1}})
	if hw := r.Log().HighWatermark(); hw != 3 {
		t.Fatalf("new epoch, ISR of 1: high watermark %d, want 3", hw)
	}

	// Once a follower is back in the ISR and has the records, they commit.
	fetch(t, r, 2, 5)
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 4, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	if hw := r.Log().HighWatermark(); hw != 5 {
		t.Fatalf("ISR of 2 again, follower at 5: high watermark %d, want 5", hw)
	}
}

// A replication factor below min.insync.replicas cannot freeze the log:
// the high watermark needs the whole replica set then, no more.
func TestHighWatermarkMinISRAboveReplicationFactor(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
	produceLeader(t, r, 2)
	if hw := r.Log().HighWatermark(); hw != 2 {
		t.Fatalf("one replica, min.insync.replicas 2: high watermark %d, want 2", hw)
	}
}

// An AlterPartition whose outcome is unknown (the call failed) may still
// have added the proposed member on the controller, which may elect it.
// Until the outcome is known the high watermark keeps waiting for that
// member too (the maximal ISR), and the same proposal is sent again.
func TestUnknownAlterPartitionOutcomeKeepsMaximalISR(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	produceLeader(t, r, 2)
	fetch(t, r, 2, 2)
	fetch(t, r, 3, 2) // follower 3 caught up: due to rejoin
	a, ok := r.ProposeISR()
	if !ok || len(a.NewISR) != 3 {
		t.Fatalf("no expansion proposed for the caught-up follower 3: %+v %v", a, ok)
	}
	if a.NodeEpochs[3] != 10 {
		t.Fatalf("expansion carries node epochs %v, want follower 3's 10", a.NodeEpochs)
	}
	r.AlterISRUnknown() // the call failed: no answer

	// Follower 3 goes quiet; the leader takes more records and follower
	// 2 fetches them. The controller may have made 3 an ISR member.
	produceLeader(t, r, 2)
	fetch(t, r, 2, 4)
	if hw := r.Log().HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d passed follower 3 (at 2), which the controller may have put in the ISR", hw)
	}

	// The next check sends the same proposal again, against the same
	// partition epoch, rather than a new one.
	again, ok := r.ProposeISR()
	if !ok || !slices.Equal(again.NewISR, a.NewISR) || again.PartitionEpoch != a.PartitionEpoch {
		t.Fatalf("after an unknown outcome the next proposal is %+v %v, want %+v again", again, ok, a)
	}
	if _, ok := r.ProposeISR(); ok {
		t.Fatal("a second proposal while the first is in flight")
	}
	// The controller answers: refused, the record unchanged. Follower 3
	// is not in the ISR, so the high watermark moves with follower 2.
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("after the controller refused the expansion: high watermark %d, want 4", hw)
	}

	// Same again, and this time the outcome comes from the metadata
	// stream: a newer record with follower 3 in the ISR.
	fetch(t, r, 3, 4)
	if a, ok := r.ProposeISR(); !ok || len(a.NewISR) != 3 {
		t.Fatalf("no expansion proposed: %+v %v", a, ok)
	}
	r.AlterISRUnknown()
	produceLeader(t, r, 1)
	fetch(t, r, 2, 5)
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("follower 3 in the ISR at 4: high watermark %d, want 4", hw)
	}
	if _, ok := r.ProposeISR(); ok {
		t.Fatal("the settled proposal was sent again")
	}
}

// KIP-903: a follower that restarted (a new node epoch) is known only
// from its new process's fetches. Its previous process's log end and
// catch-up time must not put it back in the ISR: the new process may have
// a shorter or empty log.
func TestRestartedFollowerRejoinsOnlyOnItsOwnFetches(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	produceLeader(t, r, 4)
	fetchAs(t, r, 2, 20, 4)
	fetchAs(t, r, 3, 30, 4)
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d, want 4", hw)
	}
	// Node 3 dies; the controller drops it from the ISR.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})

	// It registers again with node epoch 31 and an empty directory. Before
	// its first fetch the leader's ISR check must not re-add it.
	r.ObserveNodeEpochs(map[int32]int64{1: 10, 2: 20, 3: 31})
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("restarted follower 3 proposed for the ISR on its previous process's state: %+v", a)
	}
	if f := r.View().Followers[3]; f.LEO != -1 || f.NodeEpoch != 31 || !f.LastCaughtUp.IsZero() {
		t.Fatalf("leader's view of restarted follower 3: %+v, want log end -1, node epoch 31, never caught up", f)
	}
	// A late fetch of the dead process is refused and changes nothing.
	if _, err := r.Replicate(Fetch{ReplicaID: 3, NodeEpoch: 30, LeaderEpoch: 1, FetchOffset: 4, LastFetchedEpoch: r.Log().LatestEpoch(), MaxBytes: 1 << 20}); !errors.Is(err, ErrStaleNodeEpoch) {
		t.Fatalf("fetch of the previous incarnation: %v, want ErrStaleNodeEpoch", err)
	}
	// The new process fetches from 0: not in sync.
	fetchAs(t, r, 3, 31, 0)
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("follower 3 at 0 proposed for the ISR (high watermark 4): %+v", a)
	}
	// Caught up: it rejoins, and the proposal names its new node epoch.
	fetchAs(t, r, 3, 31, 4)
	a, ok := r.ProposeISR()
	if !ok || !slices.Contains(a.NewISR, 3) || a.NodeEpochs[3] != 31 {
		t.Fatalf("caught-up follower 3: proposal %+v %v, want it added with node epoch 31", a, ok)
	}
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})

	// Node 2 restarts while still in the ISR and the leader learns it from
	// its first fetch: it is forgotten, the high watermark waits for it,
	// and it leaves the ISR at the next check unless it has caught up.
	produceLeader(t, r, 1)
	fetchAs(t, r, 3, 31, 5)
	fetchAs(t, r, 2, 21, 1)
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("ISR member 2 restarted at 1: high watermark %d, want 4", hw)
	}
	a, ok = r.ProposeISR()
	if !ok || slices.Contains(a.NewISR, 2) {
		t.Fatalf("restarted ISR member 2, not caught up: proposal %+v %v, want it removed", a, ok)
	}
}

// Replica lag is measured on the monotonic clock: stepping the wall clock
// a day either way neither drops a follower that keeps up nor keeps one
// that stopped fetching.
func TestReplicaLagIgnoresWallClockSteps(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	r := leaderOf(t, Config{MinISR: 2}, Options{Clock: clk, LagTime: 10 * time.Second},
		State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	produceLeader(t, r, 2)
	fetch(t, r, 2, 2)
	clk.StepWall(24 * time.Hour)
	clk.Advance(time.Second)
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("wall clock stepped a day ahead: follower dropped from the ISR: %+v", a)
	}
	clk.StepWall(-48 * time.Hour)
	clk.Advance(10 * time.Second)
	a, ok := r.ProposeISR()
	if !ok || slices.Contains(a.NewISR, 2) {
		t.Fatalf("follower silent for 11 s with the wall clock stepped back: proposal %+v %v, want it dropped", a, ok)
	}
}

// A follower that a record removes from the replicas is forgotten at once
// (Kafka's updateAssignmentAndIsr). A cancelled move keeps the leader and,
// in a record that does not bump it, the leader epoch; the removed
// replica deletes its copy. Re-added within the lag time, it must not
// rejoin the ISR on what its deleted copy fetched: it is empty, could be
// elected, and everything acknowledged that it lacks would be truncated.
func TestRemovedFollowerIsForgotten(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3, 4}, ISR: []int32{1, 2, 3, 4}})
	produceLeader(t, r, 4)
	for _, id := range []int32{2, 3, 4} {
		fetch(t, r, id, 4)
	}
	if hw := r.Log().HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d, want 4", hw)
	}
	// The move is cancelled: 4 leaves the replicas (and the ISR) and
	// deletes its directory.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	if f, ok := r.View().Followers[4]; ok {
		t.Fatalf("removed follower 4 still known to the leader: %+v", f)
	}
	// A new move adds it back, empty, before it fetches.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 3, Replicas: []int32{1, 2, 3, 4}, ISR: []int32{1, 2, 3}})
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("re-added follower 4 proposed for the ISR on its deleted copy's fetches: %+v", a)
	}
	// Its first fetch is from 0: still out. Caught up, it rejoins.
	fetch(t, r, 4, 0)
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("re-added follower 4 at 0 proposed for the ISR (high watermark 4): %+v", a)
	}
	fetch(t, r, 4, 4)
	if a, ok := r.ProposeISR(); !ok || !slices.Contains(a.NewISR, 4) {
		t.Fatalf("caught-up follower 4: proposal %+v %v, want it added", a, ok)
	}
}

// The controller bumps the leader epoch when a record removes replicas,
// so that the removed ones are fenced. A leader that keeps leading across
// the bump keeps its log, so an acks=all produce appended before it is
// acknowledged once the high watermark passes it at the new epoch, not
// failed as if leadership had moved.
func TestAcksAllWaitSurvivesEpochBumpOfTheSameLeader(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	done := make(chan error, 1)
	go func() {
		_, err := r.Produce(context.Background(), testBatch(t, 2), AcksAll, 1, time.Minute)
		done <- err
	}()
	testwaitLEO(t, r, 2)
	// A shrink removes 3 and bumps the leader epoch; 1 still leads.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	select {
	case err := <-done:
		t.Fatalf("produce ended at the epoch bump, before any follower had it: %v", err)
	default:
	}
	fetch(t, r, 2, 2)
	if err := <-done; err != nil {
		t.Fatalf("acks=all produce across an epoch bump of the same leader: %v", err)
	}

	// Leading, then following, then leading again is a new term: a wait
	// from before cannot be answered, since the log may have been cut.
	go func() {
		_, err := r.Produce(context.Background(), testBatch(t, 1), AcksAll, 2, time.Minute)
		done <- err
	}()
	testwaitLEO(t, r, 3)
	r.ApplyState(State{LeaderID: 2, LeaderEpoch: 3, PartitionEpoch: 3, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 4, PartitionEpoch: 4, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	if err := <-done; !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("produce across a change of leader and back: %v, want ErrLeadershipLost", err)
	}
}

// testwaitLEO waits until the replica's log ends at leo.
func testwaitLEO(t *testing.T, r *Replica, leo int64) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("log end %d", leo), func() error {
		if got := r.Log().LogEndOffset(); got != leo {
			return fmt.Errorf("log end %d", got)
		}
		return nil
	})
}

// KIP-903 for the leader itself: a record that names this node leader
// under an earlier registration (its ISR entry was made by a process that
// has since restarted, perhaps losing its unflushed tail) does not make
// it lead. Leading at that epoch would tell followers with a longer log to
// truncate to ours. It waits for the controller to elect again, which
// records the new registration and bumps the leader epoch.
func TestLeadsOnlyAsTheRecordedRegistration(t *testing.T) {
	epoch := int64(20)
	opts := Options{NodeID: 1, NodeEpoch: func() int64 { return epoch }}
	r, err := Open(t.TempDir(), "orders", "id", 0, Config{MinISR: 1}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, LeaderNodeEpoch: 10})
	if role := r.View().Role; role != RoleNone {
		t.Fatalf("role %v under a record made for registration 10 (this process is 20), want none", role)
	}
	if _, err := r.Produce(context.Background(), testBatch(t, 1), AcksLeader, 1, time.Second); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("produce to a leader of an earlier registration: %v, want ErrNotLeader", err)
	}
	// The controller elects this registration: it leads.
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1}, LeaderNodeEpoch: 20})
	if role := r.View().Role; role != RoleLeader {
		t.Fatalf("role %v under a record for this registration, want leader", role)
	}
	// The node registers again (its lease ran out while it was paused); a
	// record still made for the old registration takes leadership away,
	// even at the same leader epoch.
	epoch = 30
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 3, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, LeaderNodeEpoch: 20})
	if role := r.View().Role; role != RoleNone {
		t.Fatalf("role %v after this node registered again, want none", role)
	}
}

// A settled ISR is not looked at again until its first member could fall
// out of time (the ISR loop then skips the replica without its lock), but
// it is looked at once that time comes, whichever member it is, and at
// once after a change of role or a fetch of a follower outside the ISR,
// which clears the mark and tells ISRRecheck, once per clearing.
func TestSettledISRIsCheckedAgainInTime(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const lag = 10 * time.Second
	rechecks := 0
	opts := Options{Clock: clk, LagTime: lag, NodeID: 1, ISRRecheck: func(*Replica) { rechecks++ }}
	r, err := Open(t.TempDir(), "orders", "id", 0, Config{MinISR: 2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// A follower first: nothing to propose until a record makes it lead.
	r.ApplyState(State{LeaderID: 2, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("a follower proposed %+v", a)
	}
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	produceLeader(t, r, 2)
	start := clk.Mono()
	fetch(t, r, 2, 2)
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("settled ISR [1 2] proposed %+v", a)
	}
	if at, want := r.isrCheckAt.Load(), int64(start+lag+1); at != want {
		t.Fatalf("settled until %v, want %v: one lag time after member 2 caught up", time.Duration(at), time.Duration(want))
	}
	// Node 3, outside the ISR, catches up half a lag later: proposed at
	// once, not at the deadline.
	clk.Advance(lag / 2)
	before := rechecks
	fetch(t, r, 3, 2)
	fetch(t, r, 3, 2)
	if r.ISRCheckAt() != 0 || rechecks != before+1 {
		t.Fatalf("after follower 3's fetches: mark %d, %d rechecks told, want 0 and one", r.ISRCheckAt(), rechecks-before)
	}
	a, ok := r.ProposeISR()
	if !ok || !slices.Equal(a.NewISR, []int32{1, 2, 3}) {
		t.Fatalf("follower 3 caught up: proposal %+v %v, want [1 2 3]", a, ok)
	}
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 2, PartitionEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("settled ISR [1 2 3] proposed %+v", a)
	}
	// Node 3 keeps fetching, node 2 stopped at start: the check comes
	// back when 2's lag time has run out, not 3's.
	clk.Advance(lag/2 - time.Millisecond)
	fetch(t, r, 3, 2)
	if a, ok := r.ProposeISR(); ok {
		t.Fatalf("member 2 still in time: proposal %+v", a)
	}
	clk.Advance(2 * time.Millisecond)
	a, ok = r.ProposeISR()
	if !ok || !slices.Equal(a.NewISR, []int32{1, 3}) {
		t.Fatalf("member 2 silent past the lag time: proposal %+v %v, want [1 3]", a, ok)
	}
}

// Refetch counts a follower as fetched again only when the fetch repeats
// its last one with nothing to read; then it keeps the follower in time
// as Replicate would. Anything else is left to Replicate.
func TestRefetchOnlyRepeatsAFetchAtTheLogEnd(t *testing.T) {
	const lag = 10 * time.Second
	r, clk := inSyncLeader(t, lag)
	fetch(t, r, 2, 2)
	fetch(t, r, 3, 2)
	for _, c := range []struct {
		name      string
		id        int32
		nodeEpoch int64
		epoch     int32
		offset    int64
	}{
		{"another incarnation", 2, 11, 3, 2},
		{"an older leader epoch", 2, 10, 2, 2},
		{"another offset", 2, 10, 3, 1},
		{"a node that is no follower", 4, 10, 3, 2},
	} {
		if r.Refetch(c.id, c.nodeEpoch, c.epoch, c.offset) {
			t.Fatalf("Refetch of %s recorded", c.name)
		}
	}
	// Node 2 is counted as fetching again each half lag, node 3 is not.
	for range 3 {
		clk.Advance(lag / 2)
		if !r.Refetch(2, 10, 3, 2) {
			t.Fatal("a repeat at the log end was refused")
		}
	}
	a, ok := r.ProposeISR()
	if !ok || !slices.Equal(a.NewISR, []int32{1, 2}) {
		t.Fatalf("after 1.5 lag times: proposal %+v %v, want [1 2]", a, ok)
	}
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 3, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	// New records: a fetch at the old end has something to read.
	produceLeader(t, r, 1)
	if r.Refetch(2, 10, 3, 2) {
		t.Fatal("Refetch recorded a fetch behind the log end")
	}
	// Once fetched there, it is a repeat again.
	fetch(t, r, 2, 3)
	if !r.Refetch(2, 10, 3, 3) {
		t.Fatal("a repeat at the new log end was refused")
	}
}

// The ISR loop asks every leader on a node each second whether its ISR
// should change; at thousands of partitions the usual answer, no, must
// cost next to nothing. TestUnknownAlterPartitionOutcomeKeepsMaximalISR
// and its neighbours check the answers; this measures the settled one.
func BenchmarkProposeISRSettled(b *testing.B) {
	r := leaderOf(b, Config{MinISR: 2}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	produceLeader(b, r, 2)
	fetch(b, r, 2, 2)
	fetch(b, r, 3, 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.ProposeISR(); ok {
			b.Fatal("a settled ISR proposed a change")
		}
	}
}

// A follower's fetch session keeps it in time without a visit per
// partition: after a fetch through the session at our log end, each later
// request of the session counts as a fetch there, until our log end moves
// (the requests before the move still count, as the follower's previous
// fetch), the session drops the partition (DetachPoller) or closes.
func TestSessionRequestsKeepACaughtUpFollowerInTime(t *testing.T) {
	const lag = 10 * time.Second
	r, clk := inSyncLeader(t, lag)
	p2, p3 := NewPoller(), NewPoller()
	sessionFetch := func(id int32, p *Poller, offset int64) {
		t.Helper()
		if res := fetchWith(t, r, Fetch{ReplicaID: id, NodeEpoch: 10, FetchOffset: offset, Poller: p}); res.OutOfRange {
			t.Fatalf("fetch of %d at %d: out of range %+v", id, offset, res)
		}
	}
	poll := func(ps ...*Poller) {
		for _, p := range ps {
			p.Polled(clk.Mono())
		}
	}
	propose := func(what string, want []int32) {
		t.Helper()
		a, ok := r.ProposeISR()
		switch {
		case want == nil && ok:
			t.Fatalf("%s: proposed %v, want nothing", what, a.NewISR)
		case want != nil && (!ok || !slices.Equal(a.NewISR, want)):
			t.Fatalf("%s: proposal %v %v, want %v", what, a.NewISR, ok, want)
		}
	}
	sessionFetch(2, p2, 2)
	sessionFetch(3, p3, 2)

	// Both sessions keep polling for three lag times, naming nothing.
	for range 6 {
		clk.Advance(lag / 2)
		poll(p2, p3)
	}
	propose("followers polling at the log end", nil)

	// Session 3 closes: 3 falls out a lag time after its last request.
	p3.Close()
	clk.Advance(lag / 2)
	poll(p2, p3)
	propose("half a lag after session 3 closed", nil)
	clk.Advance(lag/2 + time.Millisecond)
	poll(p2, p3)
	propose("a lag after session 3 closed", []int32{1, 2})
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 3, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})

	// New records: session 2's requests before them still count, so the
	// follower is in time while it comes to fetch them.
	clk.Advance(lag / 2)
	poll(p2)
	produceLeader(t, r, 1)
	clk.Advance(lag/2 + time.Millisecond)
	poll(p2) // behind now: counts for nothing
	propose("follower 2 polled just before the append", nil)
	clk.Advance(lag / 2)
	propose("a lag after follower 2's last request at the old log end", []int32{1})
	r.AlterISRUnknown()
	r.AlterISRDone(&State{LeaderID: 1, LeaderEpoch: 3, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}})
	sessionFetch(2, p2, 3)
	propose("follower 2 fetched the new end", nil)

	// The session drops the partition: its requests count no more.
	r.DetachPoller(2, p2)
	for range 3 {
		clk.Advance(lag / 2)
		poll(p2)
	}
	propose("follower 2's session dropped the partition", []int32{1})
}
