package classic

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func ids() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("m%d", n) }
}

func join(id string, protos ...string) Join {
	j := Join{MemberID: id, ProtocolType: "connect", SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second}
	for _, p := range protos {
		j.Protocols = append(j.Protocols, Protocol{Name: p, Metadata: []byte(id + "/" + p)})
	}
	return j
}

// TestTwoMembersLeaderAssigns runs the classic protocol for two members: A alone, then B
// joining, A told to rejoin by its heartbeat, the leader's assignment
// reaching both.
func TestTwoMembersLeaderAssigns(t *testing.T) {
	g, next := New("g"), ids()
	res, a := g.Join(join("", "sessioned", "default"), next, t0)
	if res == nil || res.Error != ErrNone || res.Leader != a || res.Generation != 1 || len(res.Members) != 1 {
		t.Fatalf("first join = %+v", res)
	}
	if r := g.Sync(Sync{MemberID: a, Generation: 1, Assignments: map[string][]byte{a: []byte("all")}}, t0); r == nil || string(r.Assignment) != "all" {
		t.Fatalf("sync alone = %+v", r)
	}
	res, b := g.Join(join("", "default", "sessioned"), next, t0)
	if res != nil {
		t.Fatalf("second join answered before the leader rejoined: %+v", res)
	}
	if code := g.Heartbeat(a, "", 1, t0); code != ErrRebalanceInProgress {
		t.Fatalf("leader heartbeat = %d; want REBALANCE_IN_PROGRESS", code)
	}
	ra, _ := g.Join(join(a, "sessioned", "default"), next, t0)
	rb := TakeJoin(g.Member(b))
	if ra == nil || rb == nil {
		t.Fatalf("join phase not over: %+v %+v", ra, rb)
	}
	// One vote each; the leader's preference breaks the tie.
	if ra.Generation != 2 || ra.Leader != a || ra.Protocol != "sessioned" || rb.Protocol != "sessioned" || ra.ProtocolType != "connect" {
		t.Fatalf("leader answer %+v", ra)
	}
	// B joined without an id: its metadata for the chosen protocol.
	if len(ra.Members) != 2 || ra.Members[1].ID != b || string(ra.Members[1].Metadata) != "/sessioned" || len(rb.Members) != 0 {
		t.Fatalf("members: leader %+v follower %+v", ra.Members, rb.Members)
	}
	if r := g.Sync(Sync{MemberID: b, Generation: 2}, t0); r != nil {
		t.Fatalf("follower sync answered before the leader's: %+v", r)
	}
	want := []byte{0, 1, 'u', 's', 'e', 'r', 0xff}
	if r := g.Sync(Sync{MemberID: a, Generation: 2, Assignments: map[string][]byte{a: []byte("x"), b: want}}, t0); r == nil || string(r.Assignment) != "x" {
		t.Fatalf("leader sync = %+v", r)
	}
	if r := TakeSync(g.Member(b)); r == nil || string(r.Assignment) != string(want) || g.State != StateStable {
		t.Fatalf("follower sync = %+v, state %s", r, g.State)
	}
	if code := g.Heartbeat(b, "", 1, t0); code != ErrIllegalGeneration {
		t.Fatalf("stale heartbeat = %d", code)
	}
	if code := g.Heartbeat("nobody", "", 2, t0); code != ErrUnknownMemberID {
		t.Fatalf("unknown heartbeat = %d", code)
	}
}

func TestSelectProtocolSupportedByAll(t *testing.T) {
	g, next := New("g"), ids()
	_, a := g.Join(join("", "range", "roundrobin"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 1}, t0)
	_, b := g.Join(join("", "roundrobin"), next, t0)
	ra, _ := g.Join(join(a, "range", "roundrobin"), next, t0)
	if ra == nil || ra.Protocol != "roundrobin" || TakeJoin(g.Member(b)).Protocol != "roundrobin" {
		t.Fatalf("protocol = %+v; want the one both support", ra)
	}
}

func TestInconsistentProtocols(t *testing.T) {
	g, next := New("g"), ids()
	if r, _ := g.Join(Join{ProtocolType: "consumer"}, next, t0); r.Error != ErrInconsistentGroupProtocol {
		t.Fatalf("no protocols = %+v", r)
	}
	g.Join(join("", "a"), next, t0)
	if r, _ := g.Join(join("", "b"), next, t0); r.Error != ErrInconsistentGroupProtocol {
		t.Fatalf("no common protocol = %+v", r)
	}
	other := join("", "a")
	other.ProtocolType = "consumer"
	if r, _ := g.Join(other, next, t0); r.Error != ErrInconsistentGroupProtocol {
		t.Fatalf("other protocol type = %+v", r)
	}
	if len(g.Members) != 1 {
		t.Fatalf("members = %d", len(g.Members))
	}
}

func TestMemberIDRequired(t *testing.T) {
	g, next := New("g"), ids()
	j := join("", "a")
	j.RequireKnownMemberID = true
	r, id := g.Join(j, next, t0)
	if r.Error != ErrMemberIDRequired || r.MemberID == "" || len(g.Members) != 0 {
		t.Fatalf("join = %+v", r)
	}
	j.MemberID = id
	if r, _ = g.Join(j, next, t0); r == nil || r.Error != ErrNone || r.MemberID != id || r.Leader != id {
		t.Fatalf("join with the id = %+v", r)
	}
	j.MemberID = "made-up"
	if r, _ = g.Join(j, next, t0); r.Error != ErrUnknownMemberID {
		t.Fatalf("join with an unknown id = %+v", r)
	}
}

// A member that dies without leaving is removed after its session
// timeout, and the survivors rebalance without it.
func TestSessionExpiry(t *testing.T) {
	g, next := New("g"), ids()
	_, a := g.Join(join("", "p"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 1}, t0)
	_, b := g.Join(join("", "p"), next, t0)
	g.Join(join(a, "p"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 2}, t0)
	if gone, _ := g.Tick(t0.Add(9 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	g.Heartbeat(a, "", 2, t0.Add(9*time.Second))
	gone, dirty := g.Tick(t0.Add(11 * time.Second))
	if len(gone) != 1 || gone[0] != b || !dirty || g.State != StatePreparingRebalance {
		t.Fatalf("gone %v, state %s", gone, g.State)
	}
	if code := g.Heartbeat(a, "", 2, t0.Add(11*time.Second)); code != ErrRebalanceInProgress {
		t.Fatalf("survivor heartbeat = %d", code)
	}
	if r, _ := g.Join(join(a, "p"), next, t0.Add(12*time.Second)); r == nil || r.Generation != 3 || len(r.Members) != 1 {
		t.Fatalf("rejoin = %+v", r)
	}
}

// Members that do not rejoin by the rebalance deadline are removed, and
// a follower's pending sync is answered REBALANCE_IN_PROGRESS when a new
// rebalance starts.
func TestRebalanceDeadline(t *testing.T) {
	g, next := New("g"), ids()
	_, a := g.Join(join("", "p"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 1}, t0)
	_, b := g.Join(join("", "p"), next, t0)
	if r, _ := g.Join(join(a, "p"), next, t0); r == nil {
		t.Fatal("join phase not over")
	}
	if r := g.Sync(Sync{MemberID: b, Generation: 2}, t0); r != nil {
		t.Fatalf("follower sync = %+v", r)
	}
	_, c := g.Join(join("", "p"), next, t0)
	if r := TakeSync(g.Member(b)); r == nil || r.Error != ErrRebalanceInProgress {
		t.Fatalf("pending sync = %+v", r)
	}
	g.Join(join(a, "p"), next, t0)
	g.Tick(t0.Add(31 * time.Second))
	if g.State != StateCompletingRebalance || g.Member(b) != nil || g.Member(c) == nil || g.Generation != 3 {
		t.Fatalf("after deadline: state %s gen %d members %v", g.State, g.Generation, g.Order)
	}
}

func TestMarshalKeepsGenerationAndAssignments(t *testing.T) {
	g, next := New("g"), ids()
	_, a := g.Join(join("", "p"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 1, Assignments: map[string][]byte{a: []byte("bytes")}}, t0)
	data, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	h, err := Unmarshal(data, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if h.Generation != 1 || h.Leader != a || h.Protocol != "p" || h.ProtocolType != "connect" || h.State != StateStable {
		t.Fatalf("loaded %+v", h)
	}
	if r := h.Sync(Sync{MemberID: a, Generation: 1}, t0.Add(time.Hour)); r == nil || string(r.Assignment) != "bytes" {
		t.Fatalf("sync after load = %+v", r)
	}
	if gone, _ := h.Tick(t0.Add(time.Hour + 5*time.Second)); len(gone) != 0 {
		t.Fatalf("session not restarted at load: %v", gone)
	}
}

// A follower waiting in SyncGroup for a slow leader is waiting on the
// coordinator, and is not removed for silence.
func TestWaitingSyncNotExpired(t *testing.T) {
	g, next := New("g"), ids()
	_, a := g.Join(join("", "p"), next, t0)
	g.Sync(Sync{MemberID: a, Generation: 1}, t0)
	_, b := g.Join(join("", "p"), next, t0)
	g.Join(join(a, "p"), next, t0)
	if r := g.Sync(Sync{MemberID: b, Generation: 2}, t0); r != nil {
		t.Fatalf("follower sync = %+v", r)
	}
	g.Heartbeat(a, "", 2, t0.Add(9*time.Second))
	if gone, _ := g.Tick(t0.Add(15 * time.Second)); len(gone) != 0 {
		t.Fatalf("removed while waiting for the leader: %v", gone)
	}
}

// staticJoin is join for a static member with instance id instance.
func staticJoin(id, instance string, protos ...string) Join {
	j := join(id, protos...)
	j.InstanceID, j.RequireKnownMemberID = instance, true
	return j
}

// stableStaticGroup is a stable group of two static members, "a-1" the
// leader and "b-1", at generation 2, each with its assignment.
func stableStaticGroup(t *testing.T, protos ...string) (g *Group, a, b string, next func() string) {
	t.Helper()
	if len(protos) == 0 {
		protos = []string{"range"}
	}
	g, next = New("g"), ids()
	res, a := g.Join(staticJoin("", "a-1", protos...), next, t0)
	if res == nil || res.Error != ErrNone {
		t.Fatalf("a static member's first join (no MEMBER_ID_REQUIRED round) = %+v", res)
	}
	g.Sync(Sync{MemberID: a, InstanceID: "a-1", Generation: 1}, t0)
	if res, b = g.Join(staticJoin("", "b-1", protos...), next, t0); res != nil {
		t.Fatalf("b answered before the leader rejoined: %+v", res)
	}
	g.Join(staticJoin(a, "a-1", protos...), next, t0)
	g.Sync(Sync{MemberID: a, InstanceID: "a-1", Generation: 2, Assignments: map[string][]byte{a: []byte("A"), b: []byte("B")}}, t0)
	if r := g.Sync(Sync{MemberID: b, InstanceID: "b-1", Generation: 2}, t0); r == nil || string(r.Assignment) != "B" || g.State != StateStable {
		t.Fatalf("b's sync = %+v, state %s", r, g.State)
	}
	return g, a, b, next
}

// KIP-345: a static member restarted (joining again under its instance id
// with no member id) takes its old place and assignment under a new id,
// with no rebalance; the old incarnation is fenced.
func TestStaticMemberRejoinsWithoutRebalance(t *testing.T) {
	g, a, b, next := stableStaticGroup(t)
	res, b2 := g.Join(staticJoin("", "b-1", "range"), next, t0.Add(time.Second))
	if res == nil || res.Error != ErrNone || b2 == b || res.MemberID != b2 || res.Generation != 2 || res.Leader != a || len(res.Members) != 0 {
		t.Fatalf("b's rejoin = %+v (id %s); want the current generation 2 at once, a new id, leader %s", res, b2, a)
	}
	if g.State != StateStable || g.Generation != 2 {
		t.Fatalf("after a static rejoin: %s at generation %d, want Stable at 2", g.State, g.Generation)
	}
	if r := g.Sync(Sync{MemberID: b2, InstanceID: "b-1", Generation: 2}, t0); r == nil || r.Error != ErrNone || string(r.Assignment) != "B" {
		t.Fatalf("b's sync after its rejoin = %+v, want its assignment B", r)
	}
	if code := g.Heartbeat(a, "a-1", 2, t0); code != ErrNone {
		t.Fatalf("a's heartbeat = %d: the other member was made to rebalance", code)
	}
	// The old incarnation is fenced wherever it shows up.
	if code := g.Heartbeat(b, "b-1", 2, t0); code != ErrFencedInstanceID {
		t.Fatalf("old b's heartbeat = %d, want FENCED_INSTANCE_ID", code)
	}
	if r := g.Sync(Sync{MemberID: b, InstanceID: "b-1", Generation: 2}, t0); r.Error != ErrFencedInstanceID {
		t.Fatalf("old b's sync = %+v, want FENCED_INSTANCE_ID", r)
	}
	if res, _ := g.Join(staticJoin(b, "b-1", "range"), next, t0); res == nil || res.Error != ErrFencedInstanceID {
		t.Fatalf("old b's join = %+v, want FENCED_INSTANCE_ID", res)
	}
	if code := g.Leave(b, "b-1", t0); code != ErrFencedInstanceID {
		t.Fatalf("old b's leave = %d, want FENCED_INSTANCE_ID", code)
	}
}

// The leader restarted: it comes back under a new id, is told the old
// leader's id (so it does not assign in a stable group), and gets its
// assignment back; the group's leader is now its new id.
func TestStaticLeaderRejoins(t *testing.T) {
	g, a, _, next := stableStaticGroup(t)
	res, a2 := g.Join(staticJoin("", "a-1", "range"), next, t0)
	if res == nil || res.Error != ErrNone || res.Leader != a || res.MemberID != a2 || len(res.Members) != 0 {
		t.Fatalf("leader's rejoin = %+v, want leader %s (its old id) and no members to assign", res, a)
	}
	if g.Leader != a2 || g.State != StateStable {
		t.Fatalf("leader %s, state %s; want %s, Stable", g.Leader, g.State, a2)
	}
	if r := g.Sync(Sync{MemberID: a2, InstanceID: "a-1", Generation: 2}, t0); r == nil || string(r.Assignment) != "A" {
		t.Fatalf("leader's sync = %+v, want A", r)
	}
}

// A static member back with other protocols changes what the group would
// choose: the group rebalances. (The leader's preference breaks the tie of
// one vote each.)
func TestStaticRejoinWithNewProtocolRebalances(t *testing.T) {
	g, _, b, next := stableStaticGroup(t, "range", "roundrobin")
	if g.Protocol != "range" {
		t.Fatalf("protocol %q, want range", g.Protocol)
	}
	if res, _ := g.Join(staticJoin("", "a-1", "roundrobin", "range"), next, t0); res != nil || g.State != StatePreparingRebalance {
		t.Fatalf("the leader's rejoin preferring roundrobin = %+v, state %s; want a rebalance", res, g.State)
	}
	if code := g.Heartbeat(b, "b-1", 2, t0); code != ErrRebalanceInProgress {
		t.Fatalf("b's heartbeat = %d, want REBALANCE_IN_PROGRESS", code)
	}
}

// An old incarnation waiting in its JoinGroup is answered
// FENCED_INSTANCE_ID when its restart takes its place.
func TestStaticRejoinFencesAParkedJoin(t *testing.T) {
	g, _, b, next := stableStaticGroup(t)
	// A rebalance: b rejoins with its id and waits for a.
	g.Join(staticJoin("", "c-1", "range"), next, t0)
	if res, _ := g.Join(staticJoin(b, "b-1", "range"), next, t0); res != nil {
		t.Fatalf("b's join answered before a rejoined: %+v", res)
	}
	old := g.Member(b)
	if _, b2 := g.Join(staticJoin("", "b-1", "range"), next, t0); b2 == b {
		t.Fatal("the restart kept the old member id")
	}
	if r := TakeJoin(old); r == nil || r.Error != ErrFencedInstanceID {
		t.Fatalf("the old incarnation's parked join = %+v, want FENCED_INSTANCE_ID", r)
	}
}

// LeaveGroup by instance id alone (v3+) removes the static member.
func TestStaticLeaveByInstanceID(t *testing.T) {
	g, _, b, _ := stableStaticGroup(t)
	if code := g.Leave("", "nobody", t0); code != ErrUnknownMemberID {
		t.Fatalf("leave of an unknown instance = %d", code)
	}
	if code := g.Leave("", "b-1", t0); code != ErrNone || g.Member(b) != nil || g.State != StatePreparingRebalance {
		t.Fatalf("leave by instance id = %d; member %v, state %s", code, g.Member(b), g.State)
	}
}

// A saved group keeps its static members: a restart after the
// coordinator moved still finds them.
func TestStaticMembersSurviveMarshal(t *testing.T) {
	g, _, b, next := stableStaticGroup(t)
	raw, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := Unmarshal(raw, t0)
	if err != nil {
		t.Fatal(err)
	}
	if res, b2 := g2.Join(staticJoin("", "b-1", "range"), next, t0); res == nil || res.Error != ErrNone || b2 == b || g2.Generation != 2 {
		t.Fatalf("static rejoin on the reloaded group = %+v", res)
	}
}
