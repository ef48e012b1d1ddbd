package balancer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-mq/strata/services/controller/internal/placement"
)

// topic places a topic with placement.Assign, as CreateTopic does.
func topic(t *testing.T, name string, ids []int32, partitions, rf, start int) []Partition {
	t.Helper()
	var ns []placement.Node
	for _, id := range ids {
		ns = append(ns, placement.Node{ID: id})
	}
	assign, err := placement.Assign(ns, partitions, rf, start)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Partition, len(assign))
	for i, rs := range assign {
		out[i] = Partition{Topic: name, Index: int32(i), Replicas: rs, Size: 100}
	}
	return out
}

func alive(ids ...int32) []Node {
	var out []Node
	for _, id := range ids {
		out = append(out, Node{ID: id, Alive: true})
	}
	return out
}

// checkEven requires every eligible node to hold floor or ceil of the
// eligible share of replicas and of preferred leaders.
func checkEven(t *testing.T, nodes []Node, parts []Partition) {
	t.Helper()
	loads := Loads(nodes, parts)
	var elig []Load
	totalR, totalL := 0, 0
	for _, l := range loads {
		if l.Eligible {
			elig = append(elig, l)
			totalR += l.Replicas
			totalL += l.Leaders
		}
	}
	n := len(elig)
	for _, l := range elig {
		if l.Replicas < totalR/n || l.Replicas > (totalR+n-1)/n {
			t.Errorf("node %d holds %d replicas, want %d..%d (loads %v)", l.ID, l.Replicas, totalR/n, (totalR+n-1)/n, loads)
		}
		if l.Leaders < totalL/n || l.Leaders > (totalL+n-1)/n {
			t.Errorf("node %d is preferred leader of %d, want %d..%d (loads %v)", l.ID, l.Leaders, totalL/n, (totalL+n-1)/n, loads)
		}
	}
}

// checkValid requires every partition to keep its replication factor with
// distinct replicas, and a move's From to be what the input held.
func checkValid(t *testing.T, in []Partition, moves []Move) []Partition {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range moves {
		k := fmt.Sprintf("%s-%d", m.Topic, m.Index)
		if seen[k] {
			t.Fatalf("%s moved twice", k)
		}
		seen[k] = true
		for _, p := range in {
			if p.Topic == m.Topic && p.Index == m.Index {
				if !slices.Equal(p.Replicas, m.From) {
					t.Fatalf("%s: move from %v, partition holds %v", k, m.From, p.Replicas)
				}
				if p.Fixed {
					t.Fatalf("%s is fixed but moved", k)
				}
			}
		}
		if len(m.To) != len(m.From) {
			t.Fatalf("%s: replication factor %d -> %d", k, len(m.From), len(m.To))
		}
		u := slices.Clone(m.To)
		slices.Sort(u)
		if len(slices.Compact(u)) != len(m.To) {
			t.Fatalf("%s: duplicate replica in %v", k, m.To)
		}
	}
	return Apply(in, moves)
}

// copied counts replicas the moves add (data copied).
func copied(moves []Move) int {
	n := 0
	for _, m := range moves {
		for _, r := range m.To {
			if !slices.Contains(m.From, r) {
				n++
			}
		}
	}
	return n
}

func TestScaleOutThreeToFive(t *testing.T) {
	parts := topic(t, "orders", []int32{1, 2, 3}, 12, 3, 5)
	nodes := alive(1, 2, 3, 4, 5)
	moves := Plan(Input{Nodes: nodes, Partitions: parts})
	after := checkValid(t, parts, moves)
	checkEven(t, nodes, after)
	// 36 replicas over 5 nodes: nodes 4 and 5 need 7 each, the least data
	// any plan can copy.
	if got := copied(moves); got != 14 {
		t.Errorf("copied %d replicas, want the minimum 14", got)
	}
	// A second plan on the result finds nothing to do.
	if again := Plan(Input{Nodes: nodes, Partitions: after}); len(again) != 0 {
		t.Errorf("balanced cluster planned %d more moves: %v", len(again), again)
	}
}

func TestBalancedClusterPlansNothing(t *testing.T) {
	ids := []int32{1, 2, 3, 4, 5}
	parts := topic(t, "a", ids, 12, 3, 0)
	if moves := Plan(Input{Nodes: alive(ids...), Partitions: parts}); len(moves) != 0 {
		t.Fatalf("planned %v", moves)
	}
}

func TestDrainEvictsOnly(t *testing.T) {
	parts := topic(t, "orders", []int32{1, 2, 3, 4}, 12, 3, 0)
	nodes := alive(1, 2, 3, 4)
	nodes[2].Drained = true // node 3
	moves := Plan(Input{Nodes: nodes, Partitions: parts, OnlyEvict: true})
	after := checkValid(t, parts, moves)
	for _, l := range Loads(nodes, after) {
		if l.ID == 3 && l.Replicas != 0 {
			t.Fatalf("drained node 3 still holds %d replicas", l.Replicas)
		}
	}
	for _, m := range moves {
		if !slices.Contains(m.From, 3) {
			t.Errorf("evict-only plan moved %s-%d, which has no replica on node 3: %v -> %v", m.Topic, m.Index, m.From, m.To)
		}
		for i := range m.From {
			if m.From[i] != 3 && m.From[i] != m.To[i] {
				t.Errorf("%s-%d: replica %d replaced, only node 3's should be: %v -> %v", m.Topic, m.Index, m.From[i], m.From, m.To)
			}
		}
	}
	// The three remaining nodes take 12 each: 36 over 3.
	checkEven(t, nodes, after)
}

func TestDrainedDeadNodeIsEvictedDeadNodeIsNot(t *testing.T) {
	parts := topic(t, "orders", []int32{1, 2, 3, 4}, 8, 2, 0)
	nodes := alive(1, 2, 3, 4)
	nodes[3].Alive = false // node 4 dead, not drained: left alone
	moves := Plan(Input{Nodes: nodes, Partitions: parts})
	for _, m := range moves {
		if slices.Contains(m.From, 4) != slices.Contains(m.To, 4) {
			t.Errorf("replica on dead node 4 moved: %v -> %v", m.From, m.To)
		}
	}
	nodes[3].Drained = true // now drained: its replicas go
	after := checkValid(t, parts, Plan(Input{Nodes: nodes, Partitions: parts}))
	for _, p := range after {
		if slices.Contains(p.Replicas, 4) {
			t.Errorf("%s-%d still on drained node 4: %v", p.Topic, p.Index, p.Replicas)
		}
	}
}

func TestFixedPartitionsStay(t *testing.T) {
	parts := topic(t, "orders", []int32{1, 2, 3}, 12, 3, 0)
	for i := range parts {
		parts[i].Fixed = i%2 == 0
	}
	nodes := alive(1, 2, 3, 4, 5)
	moves := Plan(Input{Nodes: nodes, Partitions: parts})
	checkValid(t, parts, moves)
	if len(moves) == 0 {
		t.Fatal("no moves for the six movable partitions")
	}
}

func TestSmallestPartitionsMoveFirst(t *testing.T) {
	parts := topic(t, "orders", []int32{1, 2}, 4, 1, 0)
	for i := range parts {
		parts[i].Size = int64(1000 * (i + 1))
	}
	parts[0].Size, parts[2].Size = 5000, 10 // partitions 0 and 2 lead on node 1
	moves := Plan(Input{Nodes: alive(1, 2, 3), Partitions: parts})
	if copied(moves) != 1 {
		t.Fatalf("moves %v, want one", moves)
	}
	if m := moves[0]; m.Index != 2 && m.Index != 1 {
		// Partitions 1 (2000 bytes, node 2) and 2 (10 bytes, node 1) are
		// the candidates on the two equally loaded nodes; the 5000-byte
		// partition 0 must not move.
		t.Fatalf("moved partition %d (%d bytes)", m.Index, m.Size)
	}
	if moves[0].Index == 0 {
		t.Fatal("moved the largest partition")
	}
}

func TestRacksKeptApart(t *testing.T) {
	var nodes []Node
	var ns []placement.Node
	for id := int32(1); id <= 6; id++ {
		rack := fmt.Sprintf("r%d", (id-1)%3)
		nodes = append(nodes, Node{ID: id, Rack: rack, Alive: true})
		if id <= 3 {
			ns = append(ns, placement.Node{ID: id, Rack: rack})
		}
	}
	assign, err := placement.Assign(ns, 12, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parts []Partition
	for i, rs := range assign {
		parts = append(parts, Partition{Topic: "t", Index: int32(i), Replicas: rs, Size: 1})
	}
	rack := map[int32]string{}
	for _, n := range nodes {
		rack[n.ID] = n.Rack
	}
	after := checkValid(t, parts, Plan(Input{Nodes: nodes, Partitions: parts}))
	checkEven(t, nodes, after)
	for _, p := range after {
		racks := map[string]bool{}
		for _, r := range p.Replicas {
			racks[rack[r]] = true
		}
		if len(racks) != 3 {
			t.Errorf("partition %d on %v spans racks %v; want all three", p.Index, p.Replicas, racks)
		}
	}
}

// Random clusters and placements: the plan always ends even (floor/ceil),
// and, without drained nodes or single-replica partitions, copies no more
// replicas than the least any plan must.
func TestRandomClustersEndEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		nNodes := 2 + rng.IntN(7)
		var nodes []Node
		for id := int32(1); id <= int32(nNodes); id++ {
			nodes = append(nodes, Node{ID: id, Alive: true})
		}
		drained := 0
		if nNodes > 3 && rng.IntN(3) == 0 {
			nodes[rng.IntN(nNodes)].Drained = true
			drained = 1
		}
		var parts []Partition
		minRF := 3
		for tp := range 1 + rng.IntN(3) {
			rf := 1 + rng.IntN(min(3, nNodes-drained))
			minRF = min(minRF, rf)
			// Placed on a random subset of the nodes, as if created before
			// some of them joined.
			k := max(rf, 1+rng.IntN(nNodes))
			perm := rng.Perm(nNodes)[:k]
			var ids []int32
			for _, i := range perm {
				ids = append(ids, int32(i+1))
			}
			slices.Sort(ids)
			parts = append(parts, topic(t, fmt.Sprintf("t%d", tp), ids, 1+rng.IntN(20), rf, rng.IntN(10))...)
		}
		for i := range parts {
			parts[i].Size = int64(rng.IntN(1000))
		}
		moves := Plan(Input{Nodes: nodes, Partitions: parts})
		after := checkValid(t, parts, moves)
		t.Run(fmt.Sprint(trial), func(t *testing.T) { checkEven(t, nodes, after) })

		// The least any plan copies: the replicas on drained nodes plus
		// each node's excess over the ceiling of the share, or the nodes'
		// shortfall below its floor, whichever is more.
		loads := Loads(nodes, parts)
		total, elig := 0, 0
		for _, l := range loads {
			if !nodes[l.ID-1].Drained {
				elig++
			}
			total += l.Replicas
		}
		excess, short := 0, 0
		for _, l := range loads {
			if nodes[l.ID-1].Drained {
				excess += l.Replicas
				continue
			}
			excess += max(l.Replicas-(total+elig-1)/elig, 0)
			short += max(total/elig-l.Replicas, 0)
		}
		bound := max(excess, short)
		// The bound is exact when every partition can give a replica to
		// any node short of its share; a drained node's replicas (whose
		// partitions may already hold the short nodes) and single-replica
		// partitions (whose leaders can only move with their data) may
		// need more.
		if got := copied(moves); got > bound && drained == 0 && minRF >= 2 {
			t.Errorf("trial %d: copied %d replicas; the least possible is %d", trial, got, bound)
		}
	}
}
