package group

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Scenarios of delayed messages: a member's heartbeats and commits are
// replayed as a network or a busy coordinator may deliver them, late and
// after newer ones.

var t0 = time.Unix(1000, 0)

// beat sends one heartbeat of member id at epoch with the given owned
// partitions of "orders" and fails the test on an error.
func beat(t *testing.T, g *Group, parts map[string]int32, id string, epoch int32, owned ...int32) Response {
	t.Helper()
	resp, _, err := g.Heartbeat(Heartbeat{MemberID: id, Epoch: epoch, Topics: []string{"orders"}, Owned: orders(owned...)}, parts, t0)
	if err != nil {
		t.Fatalf("heartbeat %s@%d: %v", id, epoch, err)
	}
	return resp
}

func orders(ps ...int32) []TP {
	out := []TP{}
	for _, p := range ps {
		out = append(out, TP{Topic: "orders", Partition: p})
	}
	return out
}

func partitionsOf(tps []TP) []int32 {
	out := []int32{}
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

// commitAllowed reports whether member may commit p with records it read
// under member epoch readAt.
func commitAllowed(t *testing.T, g *Group, member string, readAt int32, p int32) bool {
	t.Helper()
	res, err := g.CheckCommit(member, readAt, []CommitPartition{{TP: TP{Topic: "orders", Partition: p}, Epoch: readAt}})
	if err != nil {
		return false
	}
	return res[0] == nil
}

// TestCommitOfEarlierAssignmentRefused: a member reads records of a
// partition, gives the partition up, and gets it back; a commit of the
// records it read before must be refused, or it moves the offset behind
// what the member committed under the new assignment.
func TestCommitOfEarlierAssignmentRefused(t *testing.T) {
	parts := map[string]int32{"orders": 2}
	g := New("g", 10*time.Second)
	r := beat(t, g, parts, "a", 0)
	e1 := r.Epoch
	beat(t, g, parts, "a", e1, 0, 1) // a reads both partitions under e1

	// c joins: partition 1 is to move to c, a is told to give it up.
	beat(t, g, parts, "c", 0)
	r = beat(t, g, parts, "a", e1, 0, 1)
	if !r.Changed || !slices.Equal(partitionsOf(r.Assignment), []int32{0}) {
		t.Fatalf("a's assignment after c joined: %+v, want [0]", r)
	}
	// c leaves before a confirms; a drops 1 and confirms: 1 is a's again,
	// and a reads it from the committed offset under a new assignment.
	beat(t, g, parts, "c", -1)
	r = beat(t, g, parts, "a", e1, 0)
	if !slices.Equal(partitionsOf(r.Assignment), []int32{0, 1}) {
		t.Fatalf("a's assignment after c left: %+v, want [0 1]", r)
	}
	e2 := r.Epoch
	if e2 <= e1 {
		t.Fatalf("partition 1 given back to a at epoch %d, not after %d", e2, e1)
	}
	if !commitAllowed(t, g, "a", e2, 1) {
		t.Fatalf("a's commit of 1 read under the new assignment (epoch %d) refused", e2)
	}
	if commitAllowed(t, g, "a", e1, 1) {
		t.Fatalf("a's commit of 1 read under epoch %d, before it gave 1 up, accepted: it moves the offset back", e1)
	}
	// Partition 0 was a's all along: records read under e1 still commit.
	if !commitAllowed(t, g, "a", e1, 0) {
		t.Fatalf("a's commit of 0 read under epoch %d refused; a held 0 since then", e1)
	}
}

// TestLateHeartbeatDoesNotReleaseRevoking: a heartbeat that a member sent
// before it was granted a partition, and that reaches the coordinator
// after the member was told to give that partition up, does not list the
// partition; taken as the member's confirmation it would hand the
// partition to another member while the first still reads it.
func TestLateHeartbeatDoesNotReleaseRevoking(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(first Response) Heartbeat // the delayed heartbeat, given a's first answer
	}{
		// a's heartbeat at its epoch before the grant, with nothing owned.
		{"previous epoch", func(first Response) Heartbeat {
			return Heartbeat{MemberID: "a", Epoch: first.Epoch, Topics: []string{"orders"}, Owned: []TP{}}
		}},
		// a's join, resent by the client after a timeout and delivered last.
		{"join", func(Response) Heartbeat {
			return Heartbeat{MemberID: "a", Epoch: 0, Topics: []string{"orders"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := map[string]int32{"orders": 4}
			g := New("g", 10*time.Second)
			rb := beat(t, g, parts, "b", 0)
			beat(t, g, parts, "b", rb.Epoch, 0, 1, 2, 3)
			// a joins: 2 and 3 are to move from b to a, which must wait.
			first := beat(t, g, parts, "a", 0)
			if len(first.Assignment) != 0 {
				t.Fatalf("a got %v while b still holds it", first.Assignment)
			}
			late := tc.late(first)
			rb = beat(t, g, parts, "b", rb.Epoch, 0, 1, 2, 3)
			beat(t, g, parts, "b", rb.Epoch, 0, 1) // b gave 2 and 3 up
			ra := beat(t, g, parts, "a", first.Epoch)
			if !slices.Equal(partitionsOf(ra.Assignment), []int32{2, 3}) {
				t.Fatalf("a's assignment once b gave 2 and 3 up: %+v", ra)
			}
			ra = beat(t, g, parts, "a", ra.Epoch, 2, 3) // a reads 2 and 3
			// c joins: a is to give 3 up; it still reads it.
			rc := beat(t, g, parts, "c", 0)
			ra = beat(t, g, parts, "a", ra.Epoch, 2, 3)
			if !slices.Equal(partitionsOf(ra.Assignment), []int32{2}) {
				t.Fatalf("a's assignment after c joined: %+v, want [2]", ra)
			}
			// The late heartbeat arrives; its answer is lost (a gave up on it).
			if _, _, err := g.Heartbeat(late, parts, t0); err != nil {
				t.Logf("late heartbeat refused: %v", err)
			}
			if o := g.Owner(TP{Topic: "orders", Partition: 3}); o != "a" {
				t.Fatalf("after a late heartbeat of a, partition 3 is held by %q while a still reads it", o)
			}
			rc = beat(t, g, parts, "c", rc.Epoch)
			if slices.Contains(partitionsOf(rc.Assignment), 3) {
				t.Fatalf("c was given 3 while a still reads it")
			}
			// a's own next heartbeats move on: it is told its assignment
			// again if it missed it, confirms, and 3 goes to c.
			ra = beat(t, g, parts, "a", ra.Epoch, 2, 3)
			ra = beat(t, g, parts, "a", ra.Epoch, 2)
			if o := g.Owner(TP{Topic: "orders", Partition: 3}); o != "" && o != "c" {
				t.Fatalf("partition 3 held by %q after a gave it up", o)
			}
			for range 3 {
				rc = beat(t, g, parts, "c", rc.Epoch)
			}
			if o := g.Owner(TP{Topic: "orders", Partition: 3}); o != "c" {
				t.Fatalf("partition 3 held by %q, want c, after a confirmed", o)
			}
		})
	}
}

// TestRandomDelaysNeverShare runs members through random joins, leaves,
// lost answers and late deliveries of heartbeats they sent earlier, and
// checks after every step that no two members read, or may be about to
// read, one partition, and that a member which lost a partition and got it
// back cannot commit records it read before.
func TestRandomDelaysNeverShare(t *testing.T) {
	for seed := range uint64(200) {
		s := newSim(t, 6)
		r := rand.New(rand.NewPCG(seed, 2))
		ids := []string{"m0", "m1", "m2", "m3"}
		live := map[string]bool{}
		sent := map[string][]Heartbeat{}      // every heartbeat each member sent
		readAt := map[string]map[TP]int32{}   // epoch each member last read each owned partition under
		before := map[string]map[TP][]int32{} // epochs it read a partition under before it last lost it
		drop := func(id string, tps []TP) {
			for _, tp := range tps {
				if e, ok := readAt[id][tp]; ok {
					before[id][tp] = append(before[id][tp], e)
					delete(readAt[id], tp)
				}
			}
		}
		for step := range 300 {
			s.where = fmt.Sprintf("seed %d step %d: ", seed, step)
			id := ids[r.IntN(len(ids))]
			if !live[id] {
				if r.IntN(3) == 0 {
					live[id] = true
					s.epoch[id] = 0
					s.owned[id], s.next[id], s.has[id] = nil, nil, false
					readAt[id], before[id] = map[TP]int32{}, map[TP][]int32{}
				}
				continue
			}
			switch n := r.IntN(100); {
			case n < 2: // leave
				if _, _, err := s.g.Heartbeat(Heartbeat{MemberID: id, Epoch: -1}, s.parts, s.now); err != nil {
					t.Fatal(err)
				}
				live[id] = false
				delete(s.epoch, id)
				s.owned[id], s.next[id], s.has[id] = nil, nil, false
			case n < 20 && len(sent[id]) > 0: // a heartbeat sent earlier arrives now; its answer goes nowhere
				late := sent[id][r.IntN(len(sent[id]))]
				_, _, _ = s.g.Heartbeat(late, s.parts, s.now)
			default:
				if s.has[id] {
					drop(id, slices.DeleteFunc(slices.Clone(s.owned[id]), func(tp TP) bool { return slices.Contains(s.next[id], tp) }))
					s.owned[id] = s.next[id]
					s.has[id] = false
				}
				h := Heartbeat{MemberID: id, Epoch: s.epoch[id], Topics: []string{"orders"}, Owned: slices.Clone(s.owned[id])}
				sent[id] = append(sent[id], h)
				resp, _, err := s.g.Heartbeat(h, s.parts, s.now)
				switch {
				case errors.Is(err, ErrFencedEpoch) || errors.Is(err, ErrUnknownMember):
					// The member drops everything and joins again.
					drop(id, s.owned[id])
					s.epoch[id] = 0
					s.owned[id], s.next[id], s.has[id] = nil, nil, false
				case err != nil:
					t.Fatalf("%s%v", s.where, err)
				case n < 35: // the answer is lost
				default:
					s.epoch[id] = resp.Epoch
					if resp.Changed {
						s.next[id], s.has[id] = resp.Assignment, true
					}
				}
				// It reads what it owns under its epoch, and tries to commit
				// what it read before it last lost a partition.
				for _, tp := range s.owned[id] {
					readAt[id][tp] = s.epoch[id]
					for _, e := range before[id][tp] {
						refused, err := s.g.CheckCommit(id, s.epoch[id], []CommitPartition{{TP: tp, Epoch: e}})
						if err == nil && refused[0] == nil {
							t.Fatalf("%s%s committed %v read under epoch %d, before it lost the partition; it holds it again at epoch %d",
								s.where, id, tp, e, s.epoch[id])
						}
					}
				}
			}
			s.checkExclusive()
		}
	}
}

// TestGrantEpochsSurviveReload: a new owner of the group keeps each
// partition's assignment epoch, and state saved before partitions had one
// loads with the member's epoch (commits of records read earlier are
// refused rather than risked).
func TestGrantEpochsSurviveReload(t *testing.T) {
	parts := map[string]int32{"orders": 2}
	g := New("g", 10*time.Second)
	e1 := beat(t, g, parts, "a", 0).Epoch
	beat(t, g, parts, "c", 0)
	beat(t, g, parts, "a", e1, 0, 1) // told to give 1 up
	beat(t, g, parts, "c", -1)
	e2 := beat(t, g, parts, "a", e1, 0).Epoch // 1 granted again
	b, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := Unmarshal(b, 10*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !commitAllowed(t, g2, "a", e1, 0) || commitAllowed(t, g2, "a", e1, 1) || !commitAllowed(t, g2, "a", e2, 1) {
		t.Fatalf("after reload, commits are not checked against the assignment epochs (orders-0 at %d, orders-1 at %d): %+v", e1, e2, g2.Members["a"].Held)
	}
	old := []byte(`{"ID":"g","Epoch":3,"AssignmentEpoch":3,"Members":{"a":{"ID":"a","Epoch":3,"PrevEpoch":2,"Topics":["orders"],
		"Held":[{"Topic":"orders","Partition":0},{"Topic":"orders","Partition":1}],"Sent":[{"Topic":"orders","Partition":0},{"Topic":"orders","Partition":1}]}},
		"Target":{"a":[{"Topic":"orders","Partition":0},{"Topic":"orders","Partition":1}]},"Parts":{"orders":2}}`)
	g3, err := Unmarshal(old, 10*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Owner(TP{Topic: "orders", Partition: 1}) != "a" || !commitAllowed(t, g3, "a", 3, 1) || commitAllowed(t, g3, "a", 2, 1) {
		t.Fatalf("state saved without grant epochs: member %+v", g3.Members["a"])
	}
}
