// Package classic is one group's state machine in Kafka's classic group
// protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as Kafka's group
// coordinator runs it (ClassicGroup and GroupMetadataManager in
// apache/kafka's group-coordinator module). The members run the
// assignment: the coordinator only chooses a protocol every member
// supports, elects a leader, hands the leader every member's metadata and
// each member the bytes the leader assigned it. Any protocol type is
// served (consumer, connect, sr, ...): the bytes are opaque here.
//
// States, as Kafka's: Empty (no members), PreparingRebalance (waiting for
// the members to join again), CompletingRebalance (waiting for the
// leader's SyncGroup), Stable. A rebalance ends when every member has
// joined again, or at the rebalance deadline (the largest rebalance
// timeout of the members), when the members that did not join are
// removed; the generation then grows by one.
//
// The package does no I/O and never blocks: a JoinGroup or SyncGroup that
// must wait is parked (the result is left on the member), and the
// coordinator waits for Changed and reads it with JoinResult/SyncResult.
// A Group is not safe for concurrent use; the coordinator locks it.
package classic

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Kafka error codes the classic protocol answers with (Kafka's Errors
// table). The coordinator hands them through to the Kafka listener.
const (
	ErrNone                      int16 = 0
	ErrIllegalGeneration         int16 = 22
	ErrInconsistentGroupProtocol int16 = 23
	ErrUnknownMemberID           int16 = 25
	ErrRebalanceInProgress       int16 = 27
	ErrMemberIDRequired          int16 = 79
	ErrFencedInstanceID          int16 = 82
)

// Group states, as Kafka names them.
const (
	StateEmpty               = "Empty"
	StatePreparingRebalance  = "PreparingRebalance"
	StateCompletingRebalance = "CompletingRebalance"
	StateStable              = "Stable"
)

// Protocol is one protocol a member supports, with its metadata for it.
type Protocol struct {
	Name     string
	Metadata []byte
}

// Member is one classic member.
type Member struct {
	ID               string
	InstanceID       string `json:",omitempty"`
	ClientID         string `json:",omitempty"`
	ClientHost       string `json:",omitempty"`
	Protocols        []Protocol
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// Assignment is what the leader assigned the member at the last
	// SyncGroup of the current generation.
	Assignment []byte `json:",omitempty"`

	lastSeen time.Time
	// joining: the member's JoinGroup waits for the rebalance to end.
	joining bool
	join    *JoinResult
	// syncing: the member's SyncGroup waits for the leader's.
	syncing bool
	sync    *SyncResult
}

// Metadata is the member's metadata for protocol name: the first of its
// protocols so named, as the leader's JoinGroup answer carries it.
func (m *Member) Metadata(name string) []byte {
	for _, p := range m.Protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

func (m *Member) supports(name string) bool {
	return slices.ContainsFunc(m.Protocols, func(p Protocol) bool { return p.Name == name })
}

// Group is one classic group.
type Group struct {
	ID           string
	State        string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	Members      map[string]*Member
	// Order is the members' join order: a new leader is the first of it.
	Order []string

	// pending are member ids handed out with MEMBER_ID_REQUIRED (KIP-394)
	// and not yet used, with when they expire.
	pending  map[string]time.Time
	deadline time.Time // end of the current join phase
	changed  chan struct{}
}

// New is an empty group.
func New(id string) *Group {
	return &Group{ID: id, State: StateEmpty, Members: map[string]*Member{}, pending: map[string]time.Time{}, changed: make(chan struct{})}
}

// Changed is closed at the next change of a parked JoinGroup or
// SyncGroup's result (or of the group's membership): a waiter takes it
// before releasing the lock and waits on it after.
func (g *Group) Changed() <-chan struct{} { return g.changed }

// Wake wakes every waiter without a change, for one that must give up
// (the group is no longer this coordinator's).
func (g *Group) Wake() { g.notify() }

func (g *Group) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// Deadline is when the current join phase ends at the latest; zero
// outside PreparingRebalance.
func (g *Group) Deadline() time.Time {
	if g.State != StatePreparingRebalance {
		return time.Time{}
	}
	return g.deadline
}

// Join is one JoinGroup request.
type Join struct {
	MemberID, InstanceID, ClientID, ClientHost string
	ProtocolType                               string
	Protocols                                  []Protocol
	SessionTimeout, RebalanceTimeout           time.Duration
	// RequireKnownMemberID is set from JoinGroup version 4 (KIP-394): a
	// member without an id is given one and asked to join again with it.
	RequireKnownMemberID bool
}

// JoinResult is a JoinGroup answer.
type JoinResult struct {
	Error        int16
	MemberID     string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	// Members is every member with its metadata for Protocol, for the
	// leader only; in join order.
	Members []JoinedMember
}

// JoinedMember is a member as the leader's JoinGroup answer lists it.
type JoinedMember struct {
	ID, InstanceID string
	Metadata       []byte
}

// SyncResult is a SyncGroup answer.
type SyncResult struct {
	Error        int16
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// candidates are the protocols every member supports, after adding or
// replacing a member with protos (as Kafka's supportedProtocols).
func (g *Group) supportedByAll(except string, protos []Protocol) bool {
	for _, p := range protos {
		ok := true
		for id, m := range g.Members {
			if id != except && !m.supports(p.Name) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Join handles a JoinGroup. The result is nil when the join is parked:
// TakeJoin(Member(id)) has it once the rebalance ends; id is the member's id.
func (g *Group) Join(j Join, newID func() string, now time.Time) (res *JoinResult, id string) {
	fail := func(code int16) (*JoinResult, string) {
		return &JoinResult{Error: code, MemberID: j.MemberID, Generation: -1}, j.MemberID
	}
	g.expirePending(now)
	// As Kafka: a protocol type and protocols are needed; a non-empty
	// group takes only members of its protocol type that support a
	// protocol every member supports.
	if j.ProtocolType == "" || len(j.Protocols) == 0 {
		return fail(ErrInconsistentGroupProtocol)
	}
	if len(g.Members) > 0 && (j.ProtocolType != g.ProtocolType || !g.supportedByAll(j.MemberID, j.Protocols)) {
		return fail(ErrInconsistentGroupProtocol)
	}
	if j.InstanceID != "" {
		// A static member (KIP-345): known by its instance id.
		// Its member ids are the instance id, a dash and a fresh id, as
		// Kafka's: clients recognise a static leader's restart by the
		// prefix (franz-go's KIP-345 handling does).
		known := g.static(j.InstanceID)
		switch {
		case j.MemberID == "" && known != nil:
			id := j.InstanceID + "-" + newID()
			return g.replaceStatic(known, id, j, now), id
		case j.MemberID == "":
			// A new static member needs no MEMBER_ID_REQUIRED round
			// (Kafka asks it of dynamic members only).
			id := j.InstanceID + "-" + newID()
			return g.add(id, j, now), id
		case known != nil && known.ID != j.MemberID:
			return fail(ErrFencedInstanceID)
		case known == nil:
			return fail(ErrUnknownMemberID)
		}
	}
	if j.MemberID == "" {
		id := newID()
		if j.RequireKnownMemberID {
			g.pending[id] = now.Add(j.SessionTimeout)
			return &JoinResult{Error: ErrMemberIDRequired, MemberID: id, Generation: -1}, id
		}
		return g.add(id, j, now), id
	}
	if _, ok := g.pending[j.MemberID]; ok {
		delete(g.pending, j.MemberID)
		return g.add(j.MemberID, j, now), j.MemberID
	}
	m := g.Members[j.MemberID]
	if m == nil {
		return fail(ErrUnknownMemberID)
	}
	m.lastSeen = now
	same := slices.EqualFunc(m.Protocols, j.Protocols, func(a, b Protocol) bool { return a.Name == b.Name && string(a.Metadata) == string(b.Metadata) })
	switch g.State {
	case StateCompletingRebalance:
		if same {
			// The member lost its JoinGroup answer: answer it again.
			return g.joinResult(m), m.ID
		}
	case StateStable:
		if same && m.ID != g.Leader {
			// A follower joining with nothing new: no rebalance (as Kafka).
			return g.joinResult(m), m.ID
		}
	}
	g.update(m, j)
	m.joining, m.join = true, nil
	g.rebalance(now)
	g.maybeCompleteJoin(now)
	return m.join, m.ID
}

// static is the member whose instance id is instanceID, or nil.
func (g *Group) static(instanceID string) *Member {
	for _, m := range g.Members {
		if m.InstanceID == instanceID {
			return m
		}
	}
	return nil
}

// fenced reports whether instanceID names a static member other than id
// (Kafka's isStaticMemberFenced): the caller is an older incarnation.
func (g *Group) fenced(id, instanceID string) bool {
	if instanceID == "" {
		return false
	}
	m := g.static(instanceID)
	return m != nil && m.ID != id
}

// replaceStatic is Kafka's updateStaticMemberAndRebalance: a static member
// that joins again without its member id (a restarted process) takes the
// place of its previous incarnation under a new id, with its assignment.
// A JoinGroup or SyncGroup the old one still waits on is answered
// FENCED_INSTANCE_ID. In a stable group whose protocol the new metadata
// does not change there is no rebalance: the member is answered at once
// with the current generation and the current leader's id (so that it
// never takes itself for the leader, even when it was: a stable group
// would not pass a new assignment on), and its SyncGroup returns the
// assignment it had. Otherwise the group rebalances.
func (g *Group) replaceStatic(old *Member, id string, j Join, now time.Time) *JoinResult {
	currentLeader := g.Leader
	m := &Member{ID: id, Assignment: old.Assignment, lastSeen: now}
	g.update(m, j)
	if old.joining || old.join != nil || old.syncing || old.sync != nil {
		old.join = &JoinResult{Error: ErrFencedInstanceID, MemberID: old.ID, Generation: -1}
		old.sync = &SyncResult{Error: ErrFencedInstanceID}
	}
	m.joining = old.joining
	old.joining, old.syncing = false, false
	delete(g.Members, old.ID)
	g.Members[id] = m
	g.Order[slices.Index(g.Order, old.ID)] = id
	if g.Leader == old.ID {
		g.Leader = id
	}
	g.notify()
	switch g.State {
	case StateStable:
		if g.selectProtocol() == g.Protocol {
			return &JoinResult{MemberID: id, Generation: g.Generation, ProtocolType: g.ProtocolType, Protocol: g.Protocol, Leader: currentLeader}
		}
		m.joining = true
		g.rebalance(now)
	case StateCompletingRebalance:
		// The leader may already be assigning to the old id: start again.
		m.joining = true
		g.rebalance(now)
	case StatePreparingRebalance:
		m.joining = true
	}
	g.maybeCompleteJoin(now)
	return m.join
}

func (g *Group) update(m *Member, j Join) {
	m.InstanceID, m.ClientID, m.ClientHost = j.InstanceID, j.ClientID, j.ClientHost
	m.Protocols = j.Protocols
	m.SessionTimeout, m.RebalanceTimeout = j.SessionTimeout, j.RebalanceTimeout
	if m.RebalanceTimeout <= 0 {
		m.RebalanceTimeout = m.SessionTimeout
	}
}

func (g *Group) add(id string, j Join, now time.Time) *JoinResult {
	if len(g.Members) == 0 {
		g.ProtocolType = j.ProtocolType
	}
	m := &Member{ID: id, lastSeen: now}
	g.update(m, j)
	g.Members[id] = m
	g.Order = append(g.Order, id)
	if g.Leader == "" {
		g.Leader = id
	}
	m.joining = true
	g.rebalance(now)
	g.maybeCompleteJoin(now)
	return m.join
}

// rebalance starts a join phase unless one is running (Kafka's
// prepareRebalance): the members' pending SyncGroups are answered
// REBALANCE_IN_PROGRESS and their assignments dropped.
func (g *Group) rebalance(now time.Time) {
	if g.State == StatePreparingRebalance {
		return
	}
	if g.State == StateCompletingRebalance {
		for _, m := range g.Members {
			if m.syncing {
				m.syncing, m.sync = false, &SyncResult{Error: ErrRebalanceInProgress}
			}
		}
	}
	for _, m := range g.Members {
		m.Assignment = nil
	}
	var timeout time.Duration
	for _, m := range g.Members {
		timeout = max(timeout, m.RebalanceTimeout)
	}
	g.State, g.deadline = StatePreparingRebalance, now.Add(timeout)
	g.notify()
}

// maybeCompleteJoin ends the join phase once every member joined again
// and no id handed out with MEMBER_ID_REQUIRED is still unused, or at the
// deadline (Kafka's hasAllMembersJoined and the join purgatory's expiry).
func (g *Group) maybeCompleteJoin(now time.Time) {
	if g.State != StatePreparingRebalance {
		return
	}
	all := len(g.pending) == 0
	for _, m := range g.Members {
		all = all && m.joining
	}
	if !all && now.Before(g.deadline) {
		return
	}
	// Members that did not join in time are out (Kafka removes them at
	// the join deadline).
	for id, m := range g.Members {
		if !m.joining {
			g.remove(id)
		}
	}
	g.Generation++
	if len(g.Members) == 0 {
		g.State, g.Protocol, g.Leader = StateEmpty, "", ""
		g.notify()
		return
	}
	g.Protocol = g.selectProtocol()
	g.State = StateCompletingRebalance
	for _, m := range g.Members {
		m.joining, m.lastSeen = false, now
		m.join = g.joinResult(m)
	}
	g.notify()
}

// selectProtocol is Kafka's selectProtocol: among the protocols every
// member supports, each member votes for the first of its own list; most
// votes win, a tie going to the one the leader prefers.
func (g *Group) selectProtocol() string {
	all := func(name string) bool {
		for _, m := range g.Members {
			if !m.supports(name) {
				return false
			}
		}
		return true
	}
	votes := map[string]int{}
	for _, m := range g.Members {
		for _, p := range m.Protocols {
			if all(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best, n := "", -1
	for _, p := range g.Members[g.Leader].Protocols {
		if v, ok := votes[p.Name]; ok && v > n {
			best, n = p.Name, v
		}
	}
	return best
}

// joinResult is m's answer for the current generation.
func (g *Group) joinResult(m *Member) *JoinResult {
	r := &JoinResult{MemberID: m.ID, Generation: g.Generation, ProtocolType: g.ProtocolType, Protocol: g.Protocol, Leader: g.Leader}
	if m.ID == g.Leader {
		for _, id := range g.Order {
			o := g.Members[id]
			r.Members = append(r.Members, JoinedMember{ID: o.ID, InstanceID: o.InstanceID, Metadata: o.Metadata(g.Protocol)})
		}
	}
	return r
}

// remove drops member id; a new leader is the first member of the join
// order still awaiting its JoinGroup answer, or else the first member.
func (g *Group) remove(id string) {
	m := g.Members[id]
	if m == nil {
		return
	}
	if m.joining || m.syncing {
		m.joining, m.syncing = false, false
		m.join = &JoinResult{Error: ErrUnknownMemberID, MemberID: id, Generation: -1}
		m.sync = &SyncResult{Error: ErrUnknownMemberID}
	}
	delete(g.Members, id)
	g.Order = slices.DeleteFunc(g.Order, func(s string) bool { return s == id })
	if g.Leader == id {
		g.Leader = ""
		for _, o := range g.Order {
			if g.Members[o].joining {
				g.Leader = o
				break
			}
		}
		if g.Leader == "" && len(g.Order) > 0 {
			g.Leader = g.Order[0]
		}
	}
}

// TakeJoin takes the parked JoinGroup answer of m: nil while the join
// phase runs; UNKNOWN_MEMBER_ID once the member is gone.
func TakeJoin(m *Member) *JoinResult {
	r := m.join
	if r != nil {
		m.join = nil
	}
	return r
}

// Member is the member named id, or nil.
func (g *Group) Member(id string) *Member { return g.Members[id] }

// Sync is one SyncGroup request.
type Sync struct {
	MemberID     string
	InstanceID   string // a static member's; empty for a dynamic one
	Generation   int32
	ProtocolType string // empty before SyncGroup v5: not checked
	Protocol     string
	// Assignments is the leader's, by member id.
	Assignments map[string][]byte
}

// Sync handles a SyncGroup; nil when parked until the leader's
// (TakeSync has it then).
func (g *Group) Sync(s Sync, now time.Time) *SyncResult {
	m := g.Members[s.MemberID]
	switch {
	case g.fenced(s.MemberID, s.InstanceID):
		return &SyncResult{Error: ErrFencedInstanceID}
	case m == nil:
		return &SyncResult{Error: ErrUnknownMemberID}
	case s.Generation != g.Generation:
		return &SyncResult{Error: ErrIllegalGeneration}
	case s.ProtocolType != "" && s.ProtocolType != g.ProtocolType, s.Protocol != "" && s.Protocol != g.Protocol:
		return &SyncResult{Error: ErrInconsistentGroupProtocol}
	}
	m.lastSeen = now
	switch g.State {
	case StatePreparingRebalance:
		return &SyncResult{Error: ErrRebalanceInProgress}
	case StateStable:
		return g.syncResult(m)
	case StateCompletingRebalance:
	default:
		return &SyncResult{Error: ErrUnknownMemberID}
	}
	m.syncing, m.sync = true, nil
	if m.ID == g.Leader {
		for id, o := range g.Members {
			o.Assignment = s.Assignments[id]
		}
		g.State = StateStable
		for _, o := range g.Members {
			if o.syncing {
				o.syncing, o.sync = false, g.syncResult(o)
			}
		}
		g.notify()
	}
	return m.sync
}

func (g *Group) syncResult(m *Member) *SyncResult {
	return &SyncResult{ProtocolType: g.ProtocolType, Protocol: g.Protocol, Assignment: m.Assignment}
}

// TakeSync takes the parked SyncGroup answer of m, as TakeJoin.
func TakeSync(m *Member) *SyncResult {
	r := m.sync
	if r != nil {
		m.sync = nil
	}
	return r
}

// Heartbeat handles a Heartbeat: REBALANCE_IN_PROGRESS tells the member to
// join again.
func (g *Group) Heartbeat(id, instanceID string, generation int32, now time.Time) int16 {
	m := g.Members[id]
	switch {
	case g.fenced(id, instanceID):
		return ErrFencedInstanceID
	case m == nil:
		return ErrUnknownMemberID
	case generation != g.Generation:
		return ErrIllegalGeneration
	}
	m.lastSeen = now
	if g.State == StatePreparingRebalance {
		return ErrRebalanceInProgress
	}
	return ErrNone
}

// CheckCommit checks a member's OffsetCommit as Kafka's
// validateOffsetCommit: a commit without member and with a negative
// generation is a standalone one, accepted while the group is empty.
func (g *Group) CheckCommit(id string, generation int32, now time.Time) int16 {
	if id == "" && generation < 0 && len(g.Members) == 0 {
		return ErrNone
	}
	m := g.Members[id]
	switch {
	case m == nil:
		return ErrUnknownMemberID
	case generation != g.Generation:
		return ErrIllegalGeneration
	case g.State == StateCompletingRebalance:
		return ErrRebalanceInProgress
	}
	m.lastSeen = now
	return ErrNone
}

// Leave removes member id (LeaveGroup), or the static member instanceID
// names when it is set (from LeaveGroup v3, id may then be empty): Kafka's
// error for the member, UNKNOWN_MEMBER_ID when there is none and
// FENCED_INSTANCE_ID when id is another incarnation's.
func (g *Group) Leave(id, instanceID string, now time.Time) int16 {
	if instanceID != "" {
		m := g.static(instanceID)
		switch {
		case m == nil:
			return ErrUnknownMemberID
		case id != "" && id != m.ID:
			return ErrFencedInstanceID
		}
		id = m.ID
	}
	if g.Members[id] == nil {
		return ErrUnknownMemberID
	}
	g.leave([]string{id}, now)
	return ErrNone
}

func (g *Group) leave(ids []string, now time.Time) {
	for _, id := range ids {
		g.remove(id)
	}
	switch g.State {
	case StateStable, StateCompletingRebalance:
		g.rebalance(now)
	}
	g.maybeCompleteJoin(now)
	g.notify()
}

// Tick ends a join phase past its deadline and removes members whose
// session ended (a member parked in a JoinGroup or SyncGroup is waiting on
// the coordinator, not silent). It returns the removed members; dirty
// reports any change to save.
func (g *Group) Tick(now time.Time) (gone []string, dirty bool) {
	g.expirePending(now)
	for id, m := range g.Members {
		if !m.joining && !m.syncing && now.Sub(m.lastSeen) > m.SessionTimeout {
			gone = append(gone, id)
		}
	}
	before := g.State
	if len(gone) > 0 {
		g.leave(gone, now)
	}
	g.maybeCompleteJoin(now)
	return gone, len(gone) > 0 || g.State != before
}

func (g *Group) expirePending(now time.Time) {
	for id, at := range g.pending {
		if !now.Before(at) {
			delete(g.pending, id)
		}
	}
}

// Marshal encodes the group for the offsets database: generation,
// protocol type and name, leader, members with their protocols and
// assignments.
func (g *Group) Marshal() ([]byte, error) { return json.Marshal(g) }

// Unmarshal decodes a saved group. Every member's session starts again at
// now; a group saved mid-rebalance waits for its members to join again
// (their JoinGroup calls were to the previous owner) until the rebalance
// timeout.
func Unmarshal(b []byte, now time.Time) (*Group, error) {
	g := New("")
	if err := json.Unmarshal(b, g); err != nil {
		return nil, fmt.Errorf("classic: decode: %w", err)
	}
	if g.Members == nil {
		g.Members = map[string]*Member{}
	}
	var timeout time.Duration
	for _, m := range g.Members {
		m.lastSeen = now
		timeout = max(timeout, m.RebalanceTimeout)
	}
	g.deadline = now.Add(timeout)
	return g, nil
}
