// Package balancer computes partition moves that even out a cluster: every
// replica off drained nodes, then every eligible node (alive, not drained)
// within one replica and one preferred leader of an even share, moving as
// few replicas as possible and, among equal choices, the smallest
// partitions. Preferred leaders are balanced by reordering replicas, which
// copies no data.
//
// Plan is a pure function of its input; the caller starts the moves (as
// partition reassignments) and persists nothing here. See
// docs/design/rebalance.md.
package balancer

import (
	"cmp"
	"slices"
)

// Node is one registered node.
type Node struct {
	// ID is the node id.
	ID int32
	// Rack is the rack label; empty when unset.
	Rack string
	// Alive reports an unexpired lease.
	Alive bool
	// Drained reports that the node must hold nothing: its replicas move
	// away whether it is alive or not.
	Drained bool
}

// eligible reports whether the node may receive replicas.
func (n Node) eligible() bool { return n.Alive && !n.Drained }

// Partition is one partition as the plan sees it.
type Partition struct {
	// Topic is the topic name.
	Topic string
	// Index is the partition index.
	Index int32
	// Replicas are the node ids holding it, preferred leader first. For a
	// partition being moved, its target replicas.
	Replicas []int32
	// Fixed marks a partition the plan must not change (a move of it is
	// running); it still counts toward the nodes' loads.
	Fixed bool
	// Size is the partition's size in bytes, or -1 when unknown (then it is
	// taken as the largest known size, so unknown partitions are not
	// preferred for moves).
	Size int64
}

// Input is what Plan balances.
type Input struct {
	// Nodes are every registered node. Replicas on nodes not listed are
	// left where they are.
	Nodes []Node
	// Partitions are every partition of every topic.
	Partitions []Partition
	// OnlyEvict limits the plan to moving replicas off drained nodes,
	// as a drain does; no other replica or leader moves.
	OnlyEvict bool
}

// Move is one partition's change.
type Move struct {
	// Topic is the topic name.
	Topic string
	// Index is the partition index.
	Index int32
	// From are the replicas before, preferred leader first.
	From []int32
	// To are the replicas after, preferred leader first. The same set in
	// another order moves only the preferred leader.
	To []int32
	// Size is the partition's size in bytes, or -1 when unknown.
	Size int64
}

// CopiesData reports whether the move adds a replica somewhere (rather
// than only reordering the replicas).
func (m Move) CopiesData() bool {
	for _, r := range m.To {
		if !slices.Contains(m.From, r) {
			return true
		}
	}
	return false
}

// Load is a node's share as a plan counts it.
type Load struct {
	// ID is the node id.
	ID int32
	// Replicas are the replicas on the node.
	Replicas int
	// Leaders are the partitions whose preferred leader is the node.
	Leaders int
	// Eligible reports that the node takes part in the balance.
	Eligible bool
}

// Loads counts each listed node's replicas and preferred leaders in parts,
// sorted by node id.
func Loads(nodes []Node, parts []Partition) []Load {
	byID := map[int32]*Load{}
	out := make([]Load, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, Load{ID: n.ID, Eligible: n.eligible()})
	}
	slices.SortFunc(out, func(a, b Load) int { return cmp.Compare(a.ID, b.ID) })
	for i := range out {
		byID[out[i].ID] = &out[i]
	}
	for _, p := range parts {
		for i, r := range p.Replicas {
			if l := byID[r]; l != nil {
				l.Replicas++
				if i == 0 {
					l.Leaders++
				}
			}
		}
	}
	return out
}

// Apply returns parts with moves applied.
func Apply(parts []Partition, moves []Move) []Partition {
	type key struct {
		topic string
		index int32
	}
	to := map[key][]int32{}
	for _, m := range moves {
		to[key{m.Topic, m.Index}] = m.To
	}
	out := make([]Partition, len(parts))
	for i, p := range parts {
		out[i] = p
		if r, ok := to[key{p.Topic, p.Index}]; ok {
			out[i].Replicas = slices.Clone(r)
		}
	}
	return out
}

// state is the plan under construction.
type state struct {
	nodes    map[int32]Node
	eligible []int32 // sorted ids of eligible nodes
	parts    []Partition
	replicas map[int32]int            // replicas per eligible node
	leaders  map[int32]int            // preferred leaders per eligible node
	topicRep map[string]map[int32]int // replicas per topic per node
	topicLdr map[string]map[int32]int // preferred leaders per topic per node
	maxSize  int64
}

// Plan returns the moves, sorted by topic and partition. A partition moves
// at most once per plan (its From is its current replicas).
func Plan(in Input) []Move {
	s := &state{
		nodes: map[int32]Node{}, replicas: map[int32]int{}, leaders: map[int32]int{},
		topicRep: map[string]map[int32]int{}, topicLdr: map[string]map[int32]int{},
	}
	for _, n := range in.Nodes {
		s.nodes[n.ID] = n
		if n.eligible() {
			s.eligible = append(s.eligible, n.ID)
		}
	}
	slices.Sort(s.eligible)
	if len(s.eligible) == 0 {
		return nil
	}
	s.parts = make([]Partition, len(in.Partitions))
	for i, p := range in.Partitions {
		p.Replicas = slices.Clone(p.Replicas)
		s.parts[i] = p
		s.maxSize = max(s.maxSize, p.Size)
	}
	slices.SortFunc(s.parts, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Index, b.Index))
	})
	for _, p := range s.parts {
		for i, r := range p.Replicas {
			s.count(p.Topic, r, i == 0, +1)
		}
	}
	s.evict()
	if !in.OnlyEvict {
		s.balanceReplicas()
		s.balanceLeaders()
		s.moveLeadersWithData()
	}
	var moves []Move
	orig := map[[2]any][]int32{}
	for _, p := range in.Partitions {
		orig[[2]any{p.Topic, p.Index}] = p.Replicas
	}
	for _, p := range s.parts {
		from := orig[[2]any{p.Topic, p.Index}]
		if !slices.Equal(from, p.Replicas) {
			moves = append(moves, Move{Topic: p.Topic, Index: p.Index, From: slices.Clone(from), To: p.Replicas, Size: p.Size})
		}
	}
	return moves
}

// count adds d to node r's counts for one replica of a topic.
func (s *state) count(topic string, r int32, preferred bool, d int) {
	if s.topicRep[topic] == nil {
		s.topicRep[topic] = map[int32]int{}
		s.topicLdr[topic] = map[int32]int{}
	}
	s.topicRep[topic][r] += d
	if preferred {
		s.topicLdr[topic][r] += d
	}
	if !s.nodes[r].eligible() {
		return
	}
	s.replicas[r] += d
	if preferred {
		s.leaders[r] += d
	}
}

// place moves replica position i of partition p to node dst.
func (s *state) place(p *Partition, i int, dst int32) {
	s.count(p.Topic, p.Replicas[i], i == 0, -1)
	p.Replicas[i] = dst
	s.count(p.Topic, dst, i == 0, +1)
}

// rackClash counts the replicas of p, other than position skip, on node
// id's rack. Nodes without a rack clash with nothing.
func (s *state) rackClash(p *Partition, skip int, id int32) int {
	rack := s.nodes[id].Rack
	if rack == "" {
		return 0
	}
	n := 0
	for i, r := range p.Replicas {
		if i != skip && s.nodes[r].Rack == rack {
			n++
		}
	}
	return n
}

func (s *state) size(p *Partition) int64 {
	if p.Size < 0 {
		return s.maxSize
	}
	return p.Size
}

// evict moves every replica on a drained node to an eligible node. Where
// they go is a capacitated matching of the evicted replicas to the nodes
// not yet holding their partition, each node taking at most what brings it
// to the floor (then the ceiling) of the even share, so the replicas land
// where the balance needs them and the balance phase moves no more than it
// must. Replicas the matching cannot place go to the node that best keeps
// the partition's rack spread, then has the fewest replicas.
func (s *state) evict() {
	type slot struct{ pi, i int }
	var slots []slot
	total := 0
	for pi, p := range s.parts {
		for i, r := range p.Replicas {
			switch {
			case s.nodes[r].eligible():
				total++
			case s.nodes[r].Drained && !p.Fixed:
				slots = append(slots, slot{pi, i})
				total++
			}
		}
	}
	if len(slots) == 0 {
		return
	}
	n := len(s.eligible)
	cands := func(k int) []int32 {
		sl := slots[k]
		p := &s.parts[sl.pi]
		var out []int32
		for _, c := range s.eligible {
			if !slices.Contains(p.Replicas, c) && s.rackClash(p, sl.i, c) == 0 {
				out = append(out, c)
			}
		}
		return out
	}
	m := newMatching(cands)
	for _, limit := range []int{total / n, (total + n - 1) / n} {
		m.cap = func(id int32) int { return limit - s.replicas[id] }
		for k := range slots {
			if _, ok := m.assigned[k]; !ok {
				m.augment(k, map[int]bool{}, -1)
			}
		}
	}
	for k, sl := range slots {
		p := &s.parts[sl.pi]
		if id, ok := m.assigned[k]; ok && !slices.Contains(p.Replicas, id) {
			s.place(p, sl.i, id)
			continue
		}
		best, bestKey := int32(-1), [3]int{}
		for _, c := range s.eligible {
			if slices.Contains(p.Replicas, c) {
				continue
			}
			key := [3]int{s.rackClash(p, sl.i, c), s.replicas[c], s.topicRep[p.Topic][c]}
			if best < 0 || less(key[:], bestKey[:]) {
				best, bestKey = c, key
			}
		}
		if best >= 0 {
			s.place(p, sl.i, best)
		}
	}
}

// balanceReplicas moves one replica at a time from the most loaded node to
// the least loaded one it can go to, until no two eligible nodes differ by
// more than one. Each move lowers the sum of squared counts, so the loop
// ends; the number of moves is the excess over the even share, the least
// any plan needs.
func (s *state) balanceReplicas() {
	for {
		if !s.moveOneReplica() {
			return
		}
	}
}

func (s *state) moveOneReplica() bool {
	srcs := s.byCount(s.replicas, true)
	dsts := s.byCount(s.replicas, false)
	for _, src := range srcs {
		for _, dst := range dsts {
			if s.replicas[src]-s.replicas[dst] < 2 {
				break
			}
			if pi, i := s.bestReplicaMove(src, dst); pi >= 0 {
				s.place(&s.parts[pi], i, dst)
				return true
			}
		}
	}
	return false
}

// bestReplicaMove picks the partition whose replica on src moves to dst:
// rack spread not worse, then a preferred leader only when that also
// evens the leaders, then the topic's own spread, then the smallest.
func (s *state) bestReplicaMove(src, dst int32) (int, int) {
	bestP, bestI := -1, -1
	var bestKey []int64
	for pi := range s.parts {
		p := &s.parts[pi]
		if p.Fixed || slices.Contains(p.Replicas, dst) {
			continue
		}
		i := slices.Index(p.Replicas, src)
		if i < 0 {
			continue
		}
		if s.rackClash(p, i, dst) > s.rackClash(p, i, src) {
			continue
		}
		ldrPenalty := int64(0)
		if i == 0 {
			// Moving the preferred replica moves a preferred leader too:
			// good when src leads two more than dst, neutral at one, bad
			// otherwise.
			ldrPenalty = int64(1 - (s.leaders[src] - s.leaders[dst] - 1))
			ldrPenalty = max(ldrPenalty, 0)
		}
		topicPenalty := int64(s.topicRep[p.Topic][dst] - s.topicRep[p.Topic][src] + 1)
		key := []int64{ldrPenalty, max(topicPenalty, 0), s.size(p), int64(pi)}
		if bestP < 0 || less(key, bestKey) {
			bestP, bestI, bestKey = pi, i, key
		}
	}
	return bestP, bestI
}

// balanceLeaders chooses each movable partition's preferred replica among
// its replicas so that every eligible node is preferred leader of floor or
// ceil of the even share, changing as few as it can. It is a capacitated
// matching of partitions to nodes found with augmenting paths: first up to
// the floor of the share for every node, then up to the ceiling, so no node
// ends below the floor when that is possible. Every partition starts on its
// current preferred replica, and paths try that one first, so a balanced
// cluster keeps its order. Reordering copies no data.
func (s *state) balanceLeaders() {
	fixed := map[int32]int{}
	var movable []int // indexes into s.parts
	for pi, p := range s.parts {
		if len(p.Replicas) == 0 || !s.nodes[p.Replicas[0]].eligible() {
			continue // a dead node's preferred leadership waits for it
		}
		if p.Fixed {
			fixed[p.Replicas[0]]++
			continue
		}
		movable = append(movable, pi)
	}
	total := len(movable)
	for _, c := range fixed {
		total += c
	}
	n := len(s.eligible)
	floor, ceil := total/n, (total+n-1)/n
	m := newMatching(func(k int) []int32 {
		p := s.parts[movable[k]]
		var out []int32
		for _, r := range p.Replicas {
			if s.nodes[r].eligible() {
				out = append(out, r)
			}
		}
		return out
	})
	var free []int
	for k, pi := range movable {
		if r := s.parts[pi].Replicas[0]; m.load[r]+fixed[r] < floor {
			m.assign(k, r)
		} else {
			free = append(free, k)
		}
	}
	for _, limit := range []int{floor, ceil} {
		m.cap = func(id int32) int { return limit - fixed[id] }
		var still []int
		for _, k := range free {
			if !m.augment(k, map[int]bool{}, -1) {
				still = append(still, k)
			}
		}
		free = still
	}
	for k, pi := range movable {
		id, ok := m.assigned[k]
		if !ok {
			continue // found no place: keeps its preferred replica
		}
		p := &s.parts[pi]
		if j := slices.Index(p.Replicas, id); j > 0 {
			s.count(p.Topic, p.Replicas[0], true, -1)
			s.count(p.Topic, p.Replicas[0], false, +1)
			s.count(p.Topic, id, false, -1)
			s.count(p.Topic, id, true, +1)
			p.Replicas[0], p.Replicas[j] = p.Replicas[j], p.Replicas[0]
		}
	}
}

// moveLeadersWithData handles what reordering cannot: a node that is
// preferred leader of too many partitions none of which has a replica on a
// node short of leaders (a replication factor 1 topic, say). It moves one
// such preferred replica to the short node, lets the replica balance move
// something back, reorders again, and repeats while that helps. Each round
// copies one or two replicas, so it runs only when the counts are off.
func (s *state) moveLeadersWithData() {
	for range len(s.parts) {
		srcs := s.byCount(s.leaders, true)
		dsts := s.byCount(s.leaders, false)
		src, dst := srcs[0], dsts[0]
		if s.leaders[src]-s.leaders[dst] < 2 {
			return
		}
		best := -1
		var bestKey []int64
		for pi := range s.parts {
			p := &s.parts[pi]
			if p.Fixed || len(p.Replicas) == 0 || p.Replicas[0] != src || slices.Contains(p.Replicas, dst) {
				continue
			}
			if s.rackClash(p, 0, dst) > s.rackClash(p, 0, src) {
				continue
			}
			key := []int64{s.size(p), int64(pi)}
			if best < 0 || less(key, bestKey) {
				best, bestKey = pi, key
			}
		}
		if best < 0 {
			return
		}
		s.place(&s.parts[best], 0, dst)
		s.balanceReplicas()
		s.balanceLeaders()
	}
}

// matching assigns items (numbered from 0) to nodes, each item to one of
// its candidate nodes and each node at most cap items: a capacitated
// bipartite matching grown by augmenting paths.
type matching struct {
	cands    func(item int) []int32 // candidate nodes, the one to try first first
	cap      func(id int32) int
	assigned map[int]int32   // item -> node
	load     map[int32]int   // items per node
	byNode   map[int32][]int // items per node
}

func newMatching(cands func(int) []int32) *matching {
	return &matching{cands: cands, assigned: map[int]int32{}, load: map[int32]int{}, byNode: map[int32][]int{}}
}

func (m *matching) assign(k int, id int32) {
	m.assigned[k] = id
	m.load[id]++
	m.byNode[id] = append(m.byNode[id], k)
}

func (m *matching) unassign(k int) {
	id := m.assigned[k]
	delete(m.assigned, k)
	m.load[id]--
	m.byNode[id] = slices.DeleteFunc(m.byNode[id], func(x int) bool { return x == k })
}

// augment finds a place for item k, now on node from (-1 when
// unassigned), on another of its candidate nodes: one with room, or one
// whose assigned item can itself move on (recursively, as in Kuhn's
// matching algorithm). While the search runs, k still counts on from, so
// no item deeper in the search can take its slot. On success k is
// reassigned; on failure nothing changed.
func (m *matching) augment(k int, seen map[int]bool, from int32) bool {
	seen[k] = true
	cands := slices.DeleteFunc(slices.Clone(m.cands(k)), func(id int32) bool { return id == from })
	// The first candidate first, then the least loaded.
	slices.SortStableFunc(cands[min(1, len(cands)):], func(a, b int32) int {
		return cmp.Or(cmp.Compare(m.load[a], m.load[b]), cmp.Compare(a, b))
	})
	move := func(id int32) {
		if from >= 0 {
			m.unassign(k)
		}
		m.assign(k, id)
	}
	for _, id := range cands {
		if m.load[id] < m.cap(id) {
			move(id)
			return true
		}
	}
	for _, id := range cands {
		for _, other := range slices.Clone(m.byNode[id]) {
			if !seen[other] && m.augment(other, seen, id) {
				move(id)
				return true
			}
		}
	}
	return false
}

// byCount returns the eligible node ids ordered by count, descending or
// ascending, ties by id.
func (s *state) byCount(counts map[int32]int, desc bool) []int32 {
	ids := slices.Clone(s.eligible)
	slices.SortStableFunc(ids, func(a, b int32) int {
		c := cmp.Compare(counts[a], counts[b])
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a, b))
	})
	return ids
}

func less[T cmp.Ordered](a, b []T) bool { return slices.Compare(a, b) < 0 }
