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
	if code := g.Heartbeat(a, 1, t0); code != ErrRebalanceInProgress {
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
	if code := g.Heartbeat(b, 1, t0); code != ErrIllegalGeneration {
		t.Fatalf("stale heartbeat = %d", code)
	}
	if code := g.Heartbeat("nobody", 2, t0); code != ErrUnknownMemberID {
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
	g.Heartbeat(a, 2, t0.Add(9*time.Second))
	gone, dirty := g.Tick(t0.Add(11 * time.Second))
	if len(gone) != 1 || gone[0] != b || !dirty || g.State != StatePreparingRebalance {
		t.Fatalf("gone %v, state %s", gone, g.State)
	}
	if code := g.Heartbeat(a, 2, t0.Add(11*time.Second)); code != ErrRebalanceInProgress {
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
	g.Heartbeat(a, 2, t0.Add(9*time.Second))
	if gone, _ := g.Tick(t0.Add(15 * time.Second)); len(gone) != 0 {
		t.Fatalf("removed while waiting for the leader: %v", gone)
	}
}
