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
// A Group is not safe for concurrent use; the coordinator locks it.
package group

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
)

// States of a group as ListGroups and DescribeGroup report them.
const (
	StateEmpty       = "empty"
	StateReconciling = "reconciling"
	StateStable      = "stable"
)

// Member is one live member. Exported fields are persisted.
type Member struct {
	ID                 string
	InstanceID         string   `json:",omitempty"`
	ClientID           string   `json:",omitempty"`
	ClientHost         string   `json:",omitempty"`
	RackID             string   `json:",omitempty"`
	Epoch              int32    // current member epoch
	PrevEpoch          int32    // epoch before the last bump; heartbeats and commits with it are still accepted
	Topics             []string // subscription
	RebalanceTimeoutMs int32
	Held               []TP `json:",omitempty"` // partitions the member may own, Revoking included
	Revoking           []TP `json:",omitempty"` // held partitions it was told to give up
	Sent               []TP `json:",omitempty"` // assignment last sent

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
		for _, tp := range m.Held {
			g.owners[tp] = m.ID
		}
		if len(m.Revoking) > 0 {
			m.revokeDeadline = now.Add(m.rebalanceTimeout())
		}
	}
	return g, nil
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
		if m.Epoch != g.AssignmentEpoch || len(m.Revoking) > 0 || !slices.Equal(m.Held, g.Target[id]) {
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
	Topics             []string
	Owned              []TP
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
	m := g.Members[h.MemberID]
	switch {
	case h.Epoch == -1 || h.Epoch == -2:
		if m != nil {
			g.remove(m.ID)
			g.rebalance(parts)
			dirty = true
		}
		return Response{Epoch: -1}, dirty, nil
	case h.Epoch == 0:
		if len(h.Topics) == 0 {
			return resp, false, fmt.Errorf("%w: a join needs subscribed topics", ErrInvalid)
		}
		if m == nil {
			m = &Member{ID: h.MemberID}
			g.Members[m.ID] = m
		} else {
			// A rejoin: the member dropped everything it held.
			g.release(m, m.Held)
			m.Epoch, m.PrevEpoch = 0, 0
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
		if h.Epoch != m.Epoch {
			m.needSend = true // it missed our last answer
		}
	}
	m.deadline = now.Add(g.sessionTimeout)
	if m.InstanceID != h.InstanceID || m.ClientID != h.ClientID || m.ClientHost != h.ClientHost || m.RackID != h.RackID || m.RebalanceTimeoutMs != h.RebalanceTimeoutMs {
		m.InstanceID, m.ClientID, m.ClientHost, m.RackID, m.RebalanceTimeoutMs = h.InstanceID, h.ClientID, h.ClientHost, h.RackID, h.RebalanceTimeoutMs
		dirty = true
	}
	topics := slices.Clone(h.Topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	subsChanged := false
	if len(topics) > 0 && !slices.Equal(topics, m.Topics) {
		m.Topics = topics
		subsChanged, dirty = true, true
	}
	if subsChanged || g.rebalanceNeeded(parts) {
		g.rebalance(parts)
		dirty = true
	}
	// Revocations the member confirms by no longer reporting them.
	if len(m.Revoking) > 0 && h.Epoch != 0 {
		owned := map[TP]bool{}
		for _, tp := range h.Owned {
			owned[tp] = true
		}
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
	if g.reconcile(m, now) {
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
		for _, t := range m.Topics {
			if n, ok := parts[t]; ok {
				out[t] = n
			}
		}
	}
	return out
}

// rebalance bumps the group epoch and computes a new target.
func (g *Group) rebalance(parts map[string]int32) {
	g.Epoch++
	g.Parts = g.subscribedParts(parts)
	ms := make([]assignor.Member, 0, len(g.Members))
	for _, m := range g.Members {
		ms = append(ms, assignor.Member{ID: m.ID, Topics: m.Topics})
	}
	g.Target = assignor.Uniform(ms, g.Parts, g.Target)
	g.AssignmentEpoch = g.Epoch
}

// reconcile moves a member toward its target; true when it changed.
func (g *Group) reconcile(m *Member, now time.Time) bool {
	target := map[TP]bool{}
	for _, tp := range g.Target[m.ID] {
		target[tp] = true
	}
	changed := false
	// Revoked partitions that came back into the target stay held.
	m.Revoking = slices.DeleteFunc(m.Revoking, func(tp TP) bool {
		if target[tp] {
			changed = true
			return true
		}
		return false
	})
	for _, tp := range m.Held {
		if !target[tp] && !slices.Contains(m.Revoking, tp) {
			m.Revoking = append(m.Revoking, tp)
			changed = true
		}
	}
	slices.SortFunc(m.Revoking, assignor.Compare)
	if len(m.Revoking) > 0 {
		if m.revokeDeadline.IsZero() {
			m.revokeDeadline = now.Add(m.rebalanceTimeout())
		}
	} else {
		m.revokeDeadline = time.Time{}
		for _, tp := range g.Target[m.ID] {
			if _, held := g.owners[tp]; !held {
				g.owners[tp] = m.ID
				m.Held = append(m.Held, tp)
				changed = true
			}
		}
		slices.SortFunc(m.Held, assignor.Compare)
		if m.Epoch != g.AssignmentEpoch {
			m.PrevEpoch, m.Epoch = m.Epoch, g.AssignmentEpoch
			changed = true
		}
	}
	send := slices.DeleteFunc(slices.Clone(m.Held), func(tp TP) bool { return slices.Contains(m.Revoking, tp) })
	if !slices.Equal(send, m.Sent) {
		m.Sent = send
		m.needSend = true
		changed = true
	}
	return changed
}

// release gives up partitions a member held.
func (g *Group) release(m *Member, tps []TP) {
	for _, tp := range tps {
		if g.owners[tp] == m.ID {
			delete(g.owners, tp)
		}
		m.Held = slices.DeleteFunc(m.Held, func(x TP) bool { return x == tp })
		m.Revoking = slices.DeleteFunc(m.Revoking, func(x TP) bool { return x == tp })
	}
}

// remove deletes a member and frees what it held.
func (g *Group) remove(id string) {
	m := g.Members[id]
	if m == nil {
		return
	}
	g.release(m, slices.Clone(m.Held))
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

// CheckCommit validates an offset commit. It returns an error for the whole
// request (unknown member, stale epoch, -1 commit to a group with members)
// or, per partition, whether the member holds it: a member may commit only
// partitions it holds, so a member that lost a partition cannot move its
// offset after the new owner has.
func (g *Group) CheckCommit(memberID string, epoch int32, tps []TP) (held []bool, err error) {
	held = make([]bool, len(tps))
	if epoch == -1 && memberID == "" {
		if len(g.Members) > 0 {
			return nil, ErrNotEmpty
		}
		for i := range held {
			held[i] = true
		}
		return held, nil
	}
	m := g.Members[memberID]
	if m == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownMember, memberID)
	}
	if epoch != m.Epoch && epoch != m.PrevEpoch {
		return nil, fmt.Errorf("%w: %d, current is %d", ErrFencedEpoch, epoch, m.Epoch)
	}
	for i, tp := range tps {
		held[i] = slices.Contains(m.Held, tp)
	}
	return held, nil
}

// Owner returns the member holding a partition, or "".
func (g *Group) Owner(tp TP) string { return g.owners[tp] }

// SessionTimeout is the timeout members are expired after.
func (g *Group) SessionTimeout() time.Duration { return g.sessionTimeout }
