package group

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sim is a group with in-process members that own exactly what they were
// last sent, applied one heartbeat later (as a client does after its hooks
// ran).
type sim struct {
	t     *testing.T
	g     *Group
	parts map[string]int32
	now   time.Time
	owned map[string][]TP // what each member consumes now
	epoch map[string]int32
	next  map[string][]TP // assignment received, applied before the next heartbeat
	has   map[string]bool
	where string // prefix of failure messages
	// hidden are the topics each member's heartbeats hide (Heartbeat.Hidden).
	hidden map[string][]string
	// assignor is the server assignor each member asks for; topics the
	// subscription (default orders).
	assignor map[string]string
	topics   []string
}

func newSim(t *testing.T, parts int32) *sim {
	return &sim{t: t, g: New("g", 10*time.Second), parts: map[string]int32{"orders": parts}, now: time.Unix(1000, 0),
		owned: map[string][]TP{}, epoch: map[string]int32{}, next: map[string][]TP{}, has: map[string]bool{}}
}

func (s *sim) hb(id string) error {
	s.t.Helper()
	if s.has[id] {
		s.owned[id] = s.next[id]
		s.has[id] = false
	}
	topics := s.topics
	if topics == nil {
		topics = []string{"orders"}
	}
	resp, _, err := s.g.Heartbeat(Heartbeat{MemberID: id, Epoch: s.epoch[id], Topics: topics, Hidden: s.hidden[id], Owned: s.owned[id],
		Assignor: s.assignor[id]}, s.parts, s.now)
	if err != nil {
		return err
	}
	s.epoch[id] = resp.Epoch
	if resp.Changed {
		s.next[id], s.has[id] = resp.Assignment, true
	}
	s.checkExclusive()
	return nil
}

// checkExclusive fails when two members consume, or may be about to
// consume, one partition.
func (s *sim) checkExclusive() {
	s.t.Helper()
	seen := map[TP]string{}
	for id := range s.epoch {
		mine := slices.Clone(s.owned[id])
		if s.has[id] {
			mine = append(mine, s.next[id]...)
		}
		for _, tp := range mine {
			if o, ok := seen[tp]; ok && o != id {
				s.t.Fatalf("%s%v owned by %s and %s at once", s.where, tp, o, id)
			}
			seen[tp] = id
		}
	}
}

func (s *sim) settle(ids []string) {
	s.t.Helper()
	for range 20 {
		for _, id := range ids {
			if err := s.hb(id); err != nil {
				s.t.Fatalf("heartbeat %s: %v", id, err)
			}
		}
	}
	if st := s.g.State(); st != StateStable {
		s.t.Fatalf("state %s after settling; members %+v", st, s.g.Members)
	}
}

func TestJoinAndBalance(t *testing.T) {
	for _, n := range []int{1, 3, 12} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := newSim(t, 12)
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("m%02d", i))
				s.settle(ids) // members join one by one, moving partitions each time
			}
			total := 0
			for _, id := range ids {
				got := len(s.owned[id])
				if got < 12/n || got > (12+n-1)/n {
					t.Fatalf("%s owns %d of 12 with %d members", id, got, n)
				}
				total += got
			}
			if total != 12 {
				t.Fatalf("%d partitions owned; want 12", total)
			}
		})
	}
}

// A member whose heartbeats hide its subscribed topic (its principal may
// not describe it) is assigned none of it, and gets its share once the
// topic is no longer hidden.
func TestHiddenTopicsAreNotAssigned(t *testing.T) {
	s := newSim(t, 4)
	s.hidden = map[string][]string{"b": {"orders"}}
	s.settle([]string{"a", "b"})
	if len(s.owned["a"]) != 4 || len(s.owned["b"]) != 0 {
		t.Fatalf("a owns %v, b owns %v; want all for a, nothing for b", s.owned["a"], s.owned["b"])
	}
	if m := s.g.Members["b"]; !slices.Equal(m.Topics, []string{"orders"}) || !slices.Equal(m.Hidden, []string{"orders"}) {
		t.Fatalf("b's subscription %v hidden %v; the subscription must stay as sent", m.Topics, m.Hidden)
	}
	delete(s.hidden, "b")
	s.settle([]string{"a", "b"})
	if len(s.owned["a"]) != 2 || len(s.owned["b"]) != 2 {
		t.Fatalf("a owns %v, b owns %v once the topic is visible; want two each", s.owned["a"], s.owned["b"])
	}
	// Hiding it again takes b's partitions back.
	s.hidden["b"] = []string{"orders"}
	s.settle([]string{"a", "b"})
	if len(s.owned["b"]) != 0 {
		t.Fatalf("b still owns %v after its topic was hidden again", s.owned["b"])
	}
}

// The group uses the server assignor most members ask for: with range,
// co-partitioned topics give each member the same partition numbers; a
// change of the majority rebalances the group under the other assignor,
// and an unknown assignor is refused.
func TestGroupUsesTheAssignorMostMembersAskFor(t *testing.T) {
	s := newSim(t, 4)
	s.parts["views"] = 4
	s.topics = []string{"orders", "views"}
	s.assignor = map[string]string{"a": "range", "b": "range", "c": ""}
	ids := []string{"a", "b", "c"}
	s.settle(ids)
	if got := s.g.AssignorName(); got != "range" {
		t.Fatalf("assignor %q, want range", got)
	}
	for _, id := range ids {
		var orders, views []int32
		for _, tp := range s.owned[id] {
			if tp.Topic == "orders" {
				orders = append(orders, tp.Partition)
			} else {
				views = append(views, tp.Partition)
			}
		}
		if !slices.Equal(orders, views) {
			t.Fatalf("%s owns orders %v and views %v; range gives the same numbers of co-partitioned topics", id, orders, views)
		}
	}
	epoch := s.g.Epoch
	s.assignor = map[string]string{"a": "uniform", "b": "uniform", "c": "range"}
	s.settle(ids)
	if got := s.g.AssignorName(); got != "uniform" || s.g.Epoch == epoch {
		t.Fatalf("assignor %q at group epoch %d (was %d), want uniform after a new epoch", got, s.g.Epoch, epoch)
	}
	_, _, err := s.g.Heartbeat(Heartbeat{MemberID: "a", Epoch: s.epoch["a"], Assignor: "sticky"}, s.parts, s.now)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown assignor: %v, want ErrInvalid", err)
	}
}

// KIP-848 static membership: a static member that leaves with epoch -2
// keeps its partitions; a new member with its instance id takes its place
// with the same epoch and partitions, and the group epoch does not move.
// A join with an instance id a live member uses is refused, and a static
// member that does not come back within the session timeout is removed.
func TestStaticMemberRestartsWithoutRebalance(t *testing.T) {
	s := newSim(t, 6)
	instance := func(id string) string {
		if id == "b" || id == "b2" {
			return "host-b"
		}
		return ""
	}
	hb := func(id string, epoch int32) (Response, error) {
		r, _, err := s.g.Heartbeat(Heartbeat{MemberID: id, Epoch: epoch, InstanceID: instance(id), Topics: []string{"orders"}, Owned: s.owned[id]}, s.parts, s.now)
		return r, err
	}
	for range 20 {
		for _, id := range []string{"a", "b"} {
			r, err := hb(id, s.epoch[id])
			if err != nil {
				t.Fatal(err)
			}
			s.epoch[id] = r.Epoch
			if r.Changed {
				s.owned[id] = r.Assignment
			}
		}
	}
	if len(s.owned["a"]) != 3 || len(s.owned["b"]) != 3 || s.g.State() != StateStable {
		t.Fatalf("a owns %v, b owns %v, state %s", s.owned["a"], s.owned["b"], s.g.State())
	}
	groupEpoch, bEpoch, bOwned := s.g.Epoch, s.epoch["b"], s.owned["b"]

	// b leaves for a restart: nothing moves, a keeps heartbeating.
	if r, err := hb("b", -2); err != nil || r.Epoch != -2 {
		t.Fatalf("static leave: %+v %v", r, err)
	}
	r, err := hb("a", s.epoch["a"])
	if err != nil || r.Changed || s.g.Epoch != groupEpoch {
		t.Fatalf("a's heartbeat after b left: %+v %v, group epoch %d (was %d)", r, err, s.g.Epoch, groupEpoch)
	}
	// b's restart joins under a new member id with the same instance id.
	r, err = hb("b2", 0)
	if err != nil || r.Epoch != bEpoch || !r.Changed || !slices.Equal(r.Assignment, bOwned) {
		t.Fatalf("b's restart: %+v %v; want epoch %d and %v back", r, err, bEpoch, bOwned)
	}
	if s.g.Epoch != groupEpoch || s.g.Members["b"] != nil || s.g.State() != StateStable {
		t.Fatalf("group epoch %d (was %d), old member %v, state %s", s.g.Epoch, groupEpoch, s.g.Members["b"], s.g.State())
	}
	if _, err := hb("b", bEpoch); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("the old process's heartbeat: %v, want ErrUnknownMember", err)
	}
	// A third process with the same instance id while b2 is live.
	if _, _, err := s.g.Heartbeat(Heartbeat{MemberID: "b3", Epoch: 0, InstanceID: "host-b", Topics: []string{"orders"}}, s.parts, s.now); !errors.Is(err, ErrUnreleasedInstance) {
		t.Fatalf("a second live member with instance host-b: %v, want ErrUnreleasedInstance", err)
	}
	// b2 leaves for good, as static (-2), and does not come back within
	// the session timeout: it is removed and its partitions go to a.
	if _, err := hb("b2", -2); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(11 * time.Second)
	if _, err := hb("a", s.epoch["a"]); err != nil {
		t.Fatal(err)
	}
	if gone := s.g.Expire(s.parts, s.now); !slices.Equal(gone, []string{"b2"}) {
		t.Fatalf("expired %v, want b2", gone)
	}
	if s.g.Members["b2"] != nil {
		t.Fatal("b2 still a member after its session timeout")
	}
}

func TestRandomOrderNeverShares(t *testing.T) {
	for seed := range uint64(30) {
		s := newSim(t, 12)
		r := rand.New(rand.NewPCG(seed, 1))
		var ids []string
		for i := range 6 {
			ids = append(ids, fmt.Sprintf("m%d", i))
		}
		live := map[string]bool{}
		for step := range 400 {
			id := ids[r.IntN(len(ids))]
			switch {
			case !live[id] && r.IntN(3) == 0:
				live[id] = true
				s.epoch[id] = 0
				s.owned[id], s.next[id], s.has[id] = nil, nil, false
			case live[id] && r.IntN(40) == 0:
				// leave
				if _, _, err := s.g.Heartbeat(Heartbeat{MemberID: id, Epoch: -1}, s.parts, s.now); err != nil {
					t.Fatal(err)
				}
				live[id] = false
				delete(s.epoch, id)
				s.owned[id], s.next[id], s.has[id] = nil, nil, false
				continue
			}
			if !live[id] {
				continue
			}
			if err := s.hb(id); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
}

func TestSessionTimeoutFreesPartitions(t *testing.T) {
	s := newSim(t, 12)
	s.settle([]string{"a", "b", "c"})
	s.now = s.now.Add(5 * time.Second)
	s.settle([]string{"a", "b"}) // c is silent; a and b cannot get its partitions yet
	if len(s.owned["a"])+len(s.owned["b"]) != 12 {
		// Target already excludes nothing: c still a member.
	}
	if n := len(s.owned["a"]) + len(s.owned["b"]); n != 8 {
		t.Fatalf("a and b own %d before c expires; want 8", n)
	}
	s.now = s.now.Add(6 * time.Second)
	// a and b heartbeat within their session; c does not.
	if gone := s.g.Expire(s.parts, s.now.Add(-time.Second)); len(gone) != 0 {
		t.Fatalf("expired %v early", gone)
	}
	if err := s.hb("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.hb("b"); err != nil {
		t.Fatal(err)
	}
	if gone := s.g.Expire(s.parts, s.now); !slices.Equal(gone, []string{"c"}) {
		t.Fatalf("expired %v; want [c]", gone)
	}
	delete(s.epoch, "c")
	s.owned["c"], s.has["c"] = nil, false
	s.settle([]string{"a", "b"})
	if n := len(s.owned["a"]) + len(s.owned["b"]); n != 12 {
		t.Fatalf("a and b own %d after c expired; want 12", n)
	}
	if _, _, err := s.g.Heartbeat(Heartbeat{MemberID: "c", Epoch: 3, Topics: []string{"orders"}}, s.parts, s.now); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat of the expired member = %v; want ErrUnknownMember", err)
	}
	if _, err := s.g.CheckCommit("c", 3, nil); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("commit of the expired member = %v; want ErrUnknownMember", err)
	}
}

func commitParts(tps []TP) []CommitPartition {
	out := make([]CommitPartition, len(tps))
	for i, tp := range tps {
		out[i] = CommitPartition{TP: tp}
	}
	return out
}

func TestFencing(t *testing.T) {
	s := newSim(t, 4)
	s.settle([]string{"a"})
	ep := s.epoch["a"]
	s.settle([]string{"a", "b"}) // a's epoch moves on
	s.settle([]string{"a", "b", "c"})
	old := ep
	if s.epoch["a"] < ep+2 {
		t.Fatalf("a's epoch %d did not move twice from %d", s.epoch["a"], ep)
	}
	if _, _, err := s.g.Heartbeat(Heartbeat{MemberID: "a", Epoch: old, Topics: []string{"orders"}}, s.parts, s.now); !errors.Is(err, ErrFencedEpoch) {
		t.Fatalf("stale heartbeat = %v; want ErrFencedEpoch", err)
	}
	if _, err := s.g.CheckCommit("a", s.epoch["a"]+1, commitParts(s.owned["a"])); !errors.Is(err, ErrFencedEpoch) {
		t.Fatalf("commit at an epoch newer than the member's = %v; want ErrFencedEpoch", err)
	}
	if _, err := s.g.CheckCommit("a", 0, commitParts(s.owned["a"])); !errors.Is(err, ErrFencedEpoch) {
		t.Fatalf("commit at epoch 0 = %v; want ErrFencedEpoch", err)
	}
	// a may commit only its own partitions, at its current epoch and at any
	// older one it held them under (a kept its partitions since ep).
	for _, e := range []int32{s.epoch["a"], old} {
		refused, err := s.g.CheckCommit("a", e, commitParts(append(slices.Clone(s.owned["a"]), s.owned["b"]...)))
		if err != nil {
			t.Fatalf("commit at %d: %v", e, err)
		}
		for i, r := range refused {
			if want := i >= len(s.owned["a"]); (r != nil) != want || r != nil && !errors.Is(r, ErrNotAssigned) {
				t.Fatalf("commit at %d: partition %d refused = %v; want refused %v", e, i, r, want)
			}
		}
	}
	if _, err := s.g.CheckCommit("", -1, nil); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("admin commit with members = %v; want ErrNotEmpty", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	s := newSim(t, 6)
	s.settle([]string{"a", "b"})
	b, err := s.g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := Unmarshal(b, 10*time.Second, s.now)
	if err != nil {
		t.Fatal(err)
	}
	s.g = g2
	s.settle([]string{"a", "b"})
	for _, tp := range s.owned["a"] {
		if g2.Owner(tp) != "a" {
			t.Fatalf("owner of %v = %q after reload", tp, g2.Owner(tp))
		}
	}
}
