// Package group is one consumer group's membership and assignment state
// machine, in the style of Kafka's KIP-848 server-side protocol. It does
// no I/O: the coordinator feeds it heartbeats, partition counts and the
// clock, persists it (Marshal) after every change, and loads it back
// (Unmarshal) when an instance takes the group over.
//
// Epochs: the group epoch grows whenever membership, subscriptions or the
// partition counts of subscribed topics change; the target assignment is
// recomputed then (assignor.Uniform) and takes the group epoch as its
// assignment epoch. A member moves to the new target in two steps. First it
// is told to give up the partitions it holds that are no longer in its
// target, keeping its epoch; it confirms by heartbeating without them
// (owned_partitions). Then it takes the assignment epoch and the
// partitions of its target that no other member holds; partitions still
// held by another member are added on a later heartbeat, once released.
// So no partition is ever held by two members: a partition is "held" by a
// member from the response that grants it until the heartbeat that
// confirms its release, or until the member is removed (leave, session
// timeout, rebalance timeout).
//
// A partition is only ever granted under a new member epoch, and each held
// partition keeps the epoch it was granted at (its assignment epoch, as in
// Kafka's KIP-1251). When a member that already has the assignment epoch
// is granted a partition (one released late by its previous holder), the
// group epoch is bumped first, the target unchanged, so member epochs are
// all values of the one group epoch, which only grows. Two rules rest on
// this:
//
//   - A heartbeat confirms revocations only at the member's current epoch.
//     Its owned list was then built after the member learned of every
//     partition it holds, so a partition missing from it is one the member
//     stopped reading. A heartbeat at the previous epoch is still answered
//     (the answer that moved the member on may have been lost), but a late
//     one may carry a list from before a grant, so its list releases
//     nothing. A join (epoch 0) of a known member releases nothing either:
//     it is either the member starting over after a fence or its own join
//     delivered late; the member gets a new epoch and everything it holds
//     is granted anew under it.
//   - A commit of a partition is accepted for records read under an epoch
//     from the partition's assignment epoch to the member's current one.
//     Records read before the member lost the partition and got it back
//     carry an older epoch, and their commit is refused rather than moving
//     the offset behind what the member committed since.
//
// Static members (KIP-848's instance id): a static member that leaves
// with epoch -2 says it will come back (a restart). It stays in the group
// with its assignment, and nobody else is given its partitions, until its
// session timeout; a member joining with its instance id in that time
// takes its place, its epoch and partitions with it, and nothing else
// changes. A join with an instance id a live member uses is refused
// (ErrUnreleasedInstance).
//
// A Group is not safe for concurrent use; the coordinator locks it.
package group

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-mq/strata/services/coordinator/internal/assignor"
)

// TP is a topic partition.
type TP = assignor.TopicPartition

// Errors of Heartbeat and CheckCommit; the coordinator maps them to codes.
var (
	ErrUnknownMember = errors.New("unknown member id")
	ErrFencedEpoch   = errors.New("stale member epoch")
	ErrInvalid       = errors.New("invalid heartbeat")
	ErrNotEmpty      = errors.New("the group has live members")
	// ErrNotAssigned refuses one partition of a commit: the member does
	// not hold it, or was granted it after the epoch the committed records
	// were read under.
	ErrNotAssigned = errors.New("partition not assigned to the member")
	// ErrUnreleasedInstance refuses a join with a static instance id that
	// a live member still uses (Kafka's UNRELEASED_INSTANCE_ID).
	ErrUnreleasedInstance = errors.New("the instance id is used by a member that has not left")
)

// States of a group as ListGroups and DescribeGroup report them.
const (
	StateEmpty       = "empty"
	StateReconciling = "reconciling"
	StateStable      = "stable"
)

// Grant is a partition a member holds and the member epoch it was granted
// at (its assignment epoch). Encoded as the partition's fields plus Epoch;
// state saved without Epoch loads with the member's epoch.
type Grant struct {
	TP
	Epoch int32 `json:",omitempty"`
}

// Member is one live member. Exported fields are persisted.
type Member struct {
	ID         string
	InstanceID string `json:",omitempty"`
	ClientID   string `json:",omitempty"`
	ClientHost string `json:",omitempty"`
	RackID     string `json:",omitempty"`
	// Assignor is the server-side assignor the member asks for ("" for
	// none): the group uses the one most of its members ask for
	// (Group.preferredAssignor).
	Assignor  string `json:",omitempty"`
	Epoch     int32  // current member epoch
	PrevEpoch int32  // epoch before the last bump; heartbeats with it are still answered
	// Away is set once a static member left saying it will come back
	// (epoch -2): it keeps its assignment, and nobody else is given its
	// partitions, until its session times out or a member with its
	// instance id joins and takes its place.
	Away   bool     `json:",omitempty"`
	Topics []string // subscription
	// Regex is the regular expression the member subscribes with ("" for
	// none); Topics then holds what it matched when last resolved, with
	// the names the member gave.
	Regex string `json:",omitempty"`
	// Hidden are the topics of Topics the member may not be assigned (its
	// principal may not describe them, as of its last heartbeat), sorted;
	// the assignor leaves them out.
	Hidden             []string `json:",omitempty"`
	RebalanceTimeoutMs int32
	Held               []Grant `json:",omitempty"` // partitions the member may own, Revoking included, sorted
	Revoking           []TP    `json:",omitempty"` // held partitions it was told to give up
	Sent               []TP    `json:",omitempty"` // assignment last sent

	deadline       time.Time // session expiry
	revokeDeadline time.Time // zero unless revoking
	needSend       bool      // send the assignment on the next response
}

// Group is the state of one group. Exported fields are persisted.
type Group struct {
	ID              string
	Epoch           int32 // group epoch
	AssignmentEpoch int32
	Members         map[string]*Member
	Target          map[string][]TP
	Parts           map[string]int32 // partition counts the target was computed from
	// Assignor is the server-side assignor the target was computed with
	// ("" for the default, assignor.Name).
	Assignor string `json:",omitempty"`

	sessionTimeout time.Duration
	owners         map[TP]string
}

// New returns an empty group.
func New(id string, sessionTimeout time.Duration) *Group {
	return &Group{ID: id, Members: map[string]*Member{}, Target: map[string][]TP{}, Parts: map[string]int32{},
		sessionTimeout: sessionTimeout, owners: map[TP]string{}}
}

// Marshal encodes the persisted state.
func (g *Group) Marshal() ([]byte, error) { return json.Marshal(g) }

// Unmarshal decodes a saved group. Every member's session starts again at
// now: a new owner cannot know when members last heartbeated.
func Unmarshal(b []byte, sessionTimeout time.Duration, now time.Time) (*Group, error) {
	g := New("", sessionTimeout)
	if err := json.Unmarshal(b, g); err != nil {
		return nil, fmt.Errorf("group: decode: %w", err)
	}
	if g.Members == nil {
		g.Members = map[string]*Member{}
	}
	if g.Target == nil {
		g.Target = map[string][]TP{}
	}
	if g.Parts == nil {
		g.Parts = map[string]int32{}
	}
	g.owners = map[TP]string{}
	for _, m := range g.Members {
		m.deadline = now.Add(sessionTimeout)
		m.needSend = true
		for i, h := range m.Held {
			g.owners[h.TP] = m.ID
			if h.Epoch == 0 {
				m.Held[i].Epoch = m.Epoch // saved before grants had epochs
			}
		}
		if len(m.Revoking) > 0 {
			m.revokeDeadline = now.Add(m.rebalanceTimeout())
		}
	}
	return g, nil
}

// Partitions returns the partitions the member holds, sorted.
func (m *Member) Partitions() []TP {
	out := make([]TP, len(m.Held))
	for i, h := range m.Held {
		out[i] = h.TP
	}
	return out
}

// grant returns the member's grant of tp.
func (m *Member) grant(tp TP) (Grant, bool) {
	for _, h := range m.Held {
		if h.TP == tp {
			return h, true
		}
	}
	return Grant{}, false
}

func (m *Member) rebalanceTimeout() time.Duration {
	if m.RebalanceTimeoutMs <= 0 {
		return 5 * time.Minute
	}
	return time.Duration(m.RebalanceTimeoutMs) * time.Millisecond
}

// State is the group's lifecycle state.
func (g *Group) State() string {
	if len(g.Members) == 0 {
		return StateEmpty
	}
	for id, m := range g.Members {
		if m.Epoch != g.AssignmentEpoch || len(m.Revoking) > 0 || !slices.Equal(m.Partitions(), g.Target[id]) {
			return StateReconciling
		}
	}
	return StateStable
}

// Heartbeat is one member heartbeat.
type Heartbeat struct {
	MemberID           string
	Epoch              int32
	InstanceID         string
	RackID             string
	ClientID           string
	ClientHost         string
	RebalanceTimeoutMs int32
	// Assignor is the server-side assignor the member asks for, sent in
	// full on every heartbeat: "" for none, else one of assignor.Names.
	Assignor string
	// Topics is the subscription; empty leaves it as it was, unless Regex
	// is set: Topics is then what it resolved to (with the names given),
	// which may be nothing.
	Topics []string
	// Regex is the regular expression the member subscribes with, sent in
	// full on every heartbeat ("" for none); the coordinator resolves it.
	Regex string
	// Hidden are the topics of the subscription (Topics, or the one in
	// force when Topics is empty) that must not be assigned to the member:
	// the coordinator names those its principal may not describe. A
	// change rebalances the group like a change of subscription. Empty
	// hides nothing.
	Hidden []string
	Owned  []TP
}

// Response is the answer to a heartbeat.
type Response struct {
	Epoch      int32
	Assignment []TP // nil when unchanged
	Changed    bool // Assignment is set (an empty assignment is a change too)
}

// Heartbeat applies a heartbeat at now with the current partition counts
// of the subscribed topics (topics missing from parts are not assigned).
// dirty reports whether the persisted state changed.
func (g *Group) Heartbeat(h Heartbeat, parts map[string]int32, now time.Time) (resp Response, dirty bool, err error) {
	if h.MemberID == "" {
		return resp, false, fmt.Errorf("%w: member_id is empty", ErrInvalid)
	}
	if h.Assignor != "" && !assignor.Known(h.Assignor) {
		return resp, false, fmt.Errorf("%w: unknown server assignor %q (known: %s)", ErrInvalid, h.Assignor, strings.Join(assignor.Names, ", "))
	}
	m := g.Members[h.MemberID]
	// current: the heartbeat is at the member's epoch, so its owned list
	// may confirm revocations. fresh: a join of a known member.
	current, fresh := false, false
	switch {
	case h.Epoch == -2 && m != nil && m.InstanceID != "":
		// A static member leaving for a while (a restart): no rebalance.
		m.Away = true
		m.deadline = now.Add(g.sessionTimeout)
		return Response{Epoch: -2}, true, nil
	case h.Epoch == -1 || h.Epoch == -2:
		if m != nil {
			g.remove(m.ID)
			g.rebalance(parts)
			dirty = true
		}
		return Response{Epoch: h.Epoch}, dirty, nil
	case h.Epoch == 0:
		if len(h.Topics) == 0 && h.Regex == "" {
			return resp, false, fmt.Errorf("%w: a join needs subscribed topics or a regular expression", ErrInvalid)
		}
		prev := g.staticMember(h.InstanceID)
		switch {
		case m == nil && prev != nil && !prev.Away:
			return resp, false, fmt.Errorf("%w: instance id %q, member %s", ErrUnreleasedInstance, h.InstanceID, prev.ID)
		case m == nil && prev != nil:
			// Its restart: the new member takes the place of the one
			// that left, its epoch and assignment with it, and nothing
			// else changes. The old process's member id is gone, so none
			// of its late heartbeats or commits is taken.
			m = g.takeOver(prev, h.MemberID)
		case m == nil:
			m = &Member{ID: h.MemberID}
			g.Members[m.ID] = m
		default:
			// The member starting over after a fence, or its own join
			// delivered after newer heartbeats: nothing is released on its
			// word (see the package doc).
			fresh = true
		}
		m.needSend = true
		dirty = true
	case h.Epoch < 0:
		return resp, false, fmt.Errorf("%w: member epoch %d", ErrInvalid, h.Epoch)
	default:
		if m == nil {
			return resp, false, fmt.Errorf("%w %q", ErrUnknownMember, h.MemberID)
		}
		if h.Epoch != m.Epoch && h.Epoch != m.PrevEpoch {
			return resp, false, fmt.Errorf("%w: %d, current is %d", ErrFencedEpoch, h.Epoch, m.Epoch)
		}
		current = h.Epoch == m.Epoch
		if !current {
			m.needSend = true // it missed our last answer
		}
	}
	m.deadline = now.Add(g.sessionTimeout)
	m.Away = false
	if m.InstanceID != h.InstanceID || m.ClientID != h.ClientID || m.ClientHost != h.ClientHost || m.RackID != h.RackID || m.RebalanceTimeoutMs != h.RebalanceTimeoutMs || m.Assignor != h.Assignor {
		m.InstanceID, m.ClientID, m.ClientHost, m.RackID, m.RebalanceTimeoutMs, m.Assignor = h.InstanceID, h.ClientID, h.ClientHost, h.RackID, h.RebalanceTimeoutMs, h.Assignor
		dirty = true
	}
	topics := slices.Clone(h.Topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	subsChanged := false
	if (len(topics) > 0 || h.Regex != "") && !slices.Equal(topics, m.Topics) {
		m.Topics = topics
		subsChanged, dirty = true, true
	}
	if m.Regex != h.Regex {
		m.Regex, dirty = h.Regex, true
	}
	hidden := slices.Clone(h.Hidden)
	slices.Sort(hidden)
	if hidden = slices.Compact(hidden); len(hidden) == 0 {
		hidden = nil
	}
	if !slices.Equal(hidden, m.Hidden) {
		m.Hidden = hidden
		subsChanged, dirty = true, true
	}
	if subsChanged || g.rebalanceNeeded(parts) || g.preferredAssignor() != g.Assignor {
		g.rebalance(parts)
		dirty = true
	}
	if current {
		owned := map[TP]bool{}
		for _, tp := range h.Owned {
			owned[tp] = true
			if !slices.Contains(m.Sent, tp) {
				// It still reads a partition it was told to give up: it
				// may have missed that answer, so it is sent again.
				m.needSend = true
			}
		}
		// Revocations the member confirms by no longer reporting them.
		var gone []TP
		for _, tp := range m.Revoking {
			if !owned[tp] {
				gone = append(gone, tp)
			}
		}
		if len(gone) > 0 {
			g.release(m, gone)
			dirty = true
		}
	}
	if g.reconcile(m, fresh, now) {
		dirty = true
	}
	resp.Epoch = m.Epoch
	if m.needSend {
		resp.Assignment, resp.Changed = slices.Clone(m.Sent), true
		if resp.Assignment == nil {
			resp.Assignment = []TP{}
		}
		m.needSend = false
	}
	return resp, dirty, nil
}

// rebalanceNeeded reports whether the partition counts of subscribed topics
// differ from those the target was computed from.
func (g *Group) rebalanceNeeded(parts map[string]int32) bool {
	want := g.subscribedParts(parts)
	if len(want) != len(g.Parts) {
		return true
	}
	for t, n := range want {
		if g.Parts[t] != n {
			return true
		}
	}
	for id := range g.Members {
		if _, ok := g.Target[id]; !ok {
			return true
		}
	}
	return false
}

func (g *Group) subscribedParts(parts map[string]int32) map[string]int32 {
	out := map[string]int32{}
	for _, m := range g.Members {
		for _, t := range m.assignable() {
			if n, ok := parts[t]; ok {
				out[t] = n
			}
		}
	}
	return out
}

// assignable is the member's subscription without its hidden topics.
func (m *Member) assignable() []string {
	if len(m.Hidden) == 0 {
		return m.Topics
	}
	return slices.DeleteFunc(slices.Clone(m.Topics), func(t string) bool {
		_, hidden := slices.BinarySearch(m.Hidden, t)
		return hidden
	})
}

// rebalance bumps the group epoch and computes a new target.
func (g *Group) rebalance(parts map[string]int32) {
	g.Epoch++
	g.Parts = g.subscribedParts(parts)
	ms := make([]assignor.Member, 0, len(g.Members))
	for _, m := range g.Members {
		ms = append(ms, assignor.Member{ID: m.ID, Topics: m.assignable()})
	}
	g.Assignor = g.preferredAssignor()
	g.Target = assignor.Assign(g.Assignor, ms, g.Parts, g.Target)
	g.AssignmentEpoch = g.Epoch
}

// preferredAssignor is the server-side assignor most members ask for, as
// Kafka's ConsumerGroup.computePreferredServerAssignor chooses it (a tie
// goes to the one listed first in assignor.Names); "" (the default) when
// none asks for one. A change of it rebalances the group.
func (g *Group) preferredAssignor() string {
	votes := map[string]int{}
	for _, m := range g.Members {
		if m.Assignor != "" {
			votes[m.Assignor]++
		}
	}
	best := ""
	for _, name := range assignor.Names {
		if votes[name] > votes[best] {
			best = name
		}
	}
	if best == assignor.Name {
		return "" // the default by its own name
	}
	return best
}

// AssignorName is the server-side assignor the group's target was
// computed with.
func (g *Group) AssignorName() string {
	if g.Assignor == "" {
		return assignor.Name
	}
	return g.Assignor
}

// reconcile moves a member toward its target; true when it changed. fresh
// moves the member to a new epoch and grants anew, under it, every
// partition it holds and keeps.
func (g *Group) reconcile(m *Member, fresh bool, now time.Time) bool {
	target := map[TP]bool{}
	for _, tp := range g.Target[m.ID] {
		target[tp] = true
	}
	changed := false
	// A revocation, once told, completes even when the partition comes
	// back into the target: the member may have dropped it already, so it
	// gets it again as a new grant once it has confirmed.
	for _, h := range m.Held {
		if !target[h.TP] && !slices.Contains(m.Revoking, h.TP) {
			m.Revoking = append(m.Revoking, h.TP)
			changed = true
		}
	}
	slices.SortFunc(m.Revoking, assignor.Compare)
	var gained []TP
	if len(m.Revoking) > 0 {
		if m.revokeDeadline.IsZero() {
			m.revokeDeadline = now.Add(m.rebalanceTimeout())
		}
	} else {
		m.revokeDeadline = time.Time{}
		for _, tp := range g.Target[m.ID] {
			if _, held := g.owners[tp]; !held {
				g.owners[tp] = m.ID
				gained = append(gained, tp)
			}
		}
	}
	if fresh || len(gained) > 0 || len(m.Revoking) == 0 && m.Epoch != g.AssignmentEpoch {
		g.advance(m)
		if fresh {
			for i, h := range m.Held {
				if !slices.Contains(m.Revoking, h.TP) {
					m.Held[i].Epoch = m.Epoch
				}
			}
		}
		for _, tp := range gained {
			m.Held = append(m.Held, Grant{TP: tp, Epoch: m.Epoch})
		}
		slices.SortFunc(m.Held, func(a, b Grant) int { return assignor.Compare(a.TP, b.TP) })
		changed = true
	}
	send := slices.DeleteFunc(m.Partitions(), func(tp TP) bool { return slices.Contains(m.Revoking, tp) })
	if !slices.Equal(send, m.Sent) {
		m.Sent = send
		m.needSend = true
		changed = true
	}
	return changed
}

// advance moves a member to an epoch it never had: the assignment epoch
// when it is behind, otherwise a new group epoch (the target unchanged).
// Member epochs are values of the group epoch, which only grows, so a
// member's epochs grow too, across rejoins.
func (g *Group) advance(m *Member) {
	if m.Epoch >= g.AssignmentEpoch {
		g.Epoch++
		g.AssignmentEpoch = g.Epoch
	}
	m.PrevEpoch, m.Epoch = m.Epoch, g.AssignmentEpoch
}

// release gives up partitions a member held.
func (g *Group) release(m *Member, tps []TP) {
	for _, tp := range tps {
		if g.owners[tp] == m.ID {
			delete(g.owners, tp)
		}
		m.Held = slices.DeleteFunc(m.Held, func(h Grant) bool { return h.TP == tp })
		m.Revoking = slices.DeleteFunc(m.Revoking, func(x TP) bool { return x == tp })
	}
}

// staticMember is the member with instance id id, nil for none (or for
// "": dynamic members have none).
func (g *Group) staticMember(id string) *Member {
	if id == "" {
		return nil
	}
	for _, m := range g.Members {
		if m.InstanceID == id {
			return m
		}
	}
	return nil
}

// takeOver moves a member that left (Away) to the member id newID, with
// its subscription, its target and the partitions it holds, as Kafka
// replaces a static member that rejoins: the target is not recomputed.
func (g *Group) takeOver(prev *Member, newID string) *Member {
	m := *prev
	m.ID, m.Away, m.needSend = newID, false, true
	delete(g.Members, prev.ID)
	g.Members[newID] = &m
	g.Target[newID] = g.Target[prev.ID]
	delete(g.Target, prev.ID)
	for _, h := range m.Held {
		if g.owners[h.TP] == prev.ID {
			g.owners[h.TP] = newID
		}
	}
	return &m
}

// remove deletes a member and frees what it held.
func (g *Group) remove(id string) {
	m := g.Members[id]
	if m == nil {
		return
	}
	g.release(m, m.Partitions())
	delete(g.Members, id)
	delete(g.Target, id)
}

// Expire removes members whose session or rebalance timeout passed at now
// and recomputes the target; it returns the removed member ids.
func (g *Group) Expire(parts map[string]int32, now time.Time) []string {
	var gone []string
	for id, m := range g.Members {
		if now.After(m.deadline) || !m.revokeDeadline.IsZero() && now.After(m.revokeDeadline) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		g.remove(id)
	}
	if len(gone) > 0 {
		g.rebalance(parts)
	}
	return gone
}

// Remove removes members on an operator's behalf, by member id or static
// instance id, and returns the removed ids.
func (g *Group) Remove(parts map[string]int32, memberID, instanceID string) []string {
	var gone []string
	for id, m := range g.Members {
		if memberID != "" && id == memberID || instanceID != "" && m.InstanceID == instanceID {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		g.remove(id)
	}
	if len(gone) > 0 {
		g.rebalance(parts)
	}
	return gone
}

// CommitPartition is one partition of an offset commit and the member
// epoch its records were read under; 0 means the commit's epoch.
type CommitPartition struct {
	TP
	Epoch int32
}

// CheckCommit validates an offset commit of member memberID at epoch (its
// epoch as it last heard it). It returns an error for the whole request
// (unknown member, an epoch the member has not had, -1 commit to a group
// with members) or, per partition, nil when the partition may be committed
// and otherwise why not (ErrNotAssigned): a member may commit only
// partitions it holds, so one that lost a partition cannot move its offset
// after the new owner has, and only records read under an epoch from the
// partition's assignment epoch to its current epoch (KIP-1251), so records
// read before it lost the partition and got it back cannot move the offset
// behind what it committed since.
func (g *Group) CheckCommit(memberID string, epoch int32, parts []CommitPartition) ([]error, error) {
	refused := make([]error, len(parts))
	if epoch == -1 && memberID == "" {
		if len(g.Members) > 0 {
			return nil, ErrNotEmpty
		}
		return refused, nil
	}
	m := g.Members[memberID]
	if m == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownMember, memberID)
	}
	if epoch <= 0 || epoch > m.Epoch {
		return nil, fmt.Errorf("%w: %d, current is %d", ErrFencedEpoch, epoch, m.Epoch)
	}
	for i, p := range parts {
		read := p.Epoch
		if read == 0 {
			read = epoch
		}
		h, held := m.grant(p.TP)
		switch {
		case !held:
			refused[i] = fmt.Errorf("%w: member %s does not own %s-%d", ErrNotAssigned, memberID, p.Topic, p.Partition)
		case read < h.Epoch:
			refused[i] = fmt.Errorf("%w: %s-%d was assigned to member %s at epoch %d, after epoch %d its records were read under; "+
				"committing them would move the offset back", ErrNotAssigned, p.Topic, p.Partition, memberID, h.Epoch, read)
		case read > m.Epoch:
			refused[i] = fmt.Errorf("%w: records of %s-%d read under epoch %d, newer than member %s's epoch %d",
				ErrNotAssigned, p.Topic, p.Partition, read, memberID, m.Epoch)
		}
	}
	return refused, nil
}

// Owner returns the member holding a partition, or "".
func (g *Group) Owner(tp TP) string { return g.owners[tp] }

// SessionTimeout is the timeout members are expired after.
func (g *Group) SessionTimeout() time.Duration { return g.sessionTimeout }
