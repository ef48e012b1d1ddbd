package placement

import (
	"errors"
	"fmt"
	"testing"
)

func nodes(n int, racks ...string) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = Node{ID: int32(i + 1)}
		if len(racks) > 0 {
			out[i].Rack = racks[i%len(racks)]
		}
	}
	return out
}

func TestAssignEvenSpread(t *testing.T) {
	for _, tc := range []struct {
		nodes, partitions, rf, start int
	}{
		{3, 12, 3, 0}, {3, 12, 3, 7}, {5, 12, 3, 0}, {5, 12, 3, 3}, {5, 10, 2, 1}, {1, 4, 1, 0},
	} {
		t.Run(fmt.Sprintf("%dnodes_%dp_rf%d_s%d", tc.nodes, tc.partitions, tc.rf, tc.start), func(t *testing.T) {
			got, err := Assign(nodes(tc.nodes), tc.partitions, tc.rf, tc.start)
			if err != nil {
				t.Fatal(err)
			}
			leaders := map[int32]int{}
			replicas := map[int32]int{}
			for p, rs := range got {
				if len(rs) != tc.rf {
					t.Fatalf("partition %d: %v", p, rs)
				}
				seen := map[int32]bool{}
				for _, r := range rs {
					if seen[r] {
						t.Fatalf("partition %d: duplicate replica in %v", p, rs)
					}
					seen[r] = true
					replicas[r]++
				}
				leaders[rs[0]]++
			}
			checkSpread(t, "leaders", leaders, tc.nodes, tc.partitions)
			checkSpread(t, "replicas", replicas, tc.nodes, tc.partitions*tc.rf)
		})
	}
}

// checkSpread requires every node to get floor or ceil of total/n.
func checkSpread(t *testing.T, what string, counts map[int32]int, n, total int) {
	t.Helper()
	lo, hi := total/n, (total+n-1)/n
	for id := int32(1); id <= int32(n); id++ {
		if c := counts[id]; c < lo || c > hi {
			t.Errorf("%s: node %d has %d, want %d..%d (all: %v)", what, id, c, lo, hi, counts)
		}
	}
}

func TestAssignRackAware(t *testing.T) {
	// 6 nodes in 3 racks: every partition's 3 replicas sit on 3 racks.
	ns := nodes(6, "a", "b", "c")
	rackOf := map[int32]string{}
	for _, n := range ns {
		rackOf[n.ID] = n.Rack
	}
	got, err := Assign(ns, 12, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for p, rs := range got {
		racks := map[string]bool{}
		for _, r := range rs {
			racks[rackOf[r]] = true
		}
		if len(racks) != 3 {
			t.Errorf("partition %d: replicas %v span racks %v, want 3", p, rs, racks)
		}
	}
	// 4 nodes in 2 racks with RF 2: consecutive replicas on different racks.
	ns = nodes(4, "x", "y")
	got, err = Assign(ns, 8, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p, rs := range got {
		if rackOf2(ns, rs[0]) == rackOf2(ns, rs[1]) {
			t.Errorf("partition %d: %v on one rack", p, rs)
		}
	}
}

func rackOf2(ns []Node, id int32) string {
	for _, n := range ns {
		if n.ID == id {
			return n.Rack
		}
	}
	return ""
}

func TestAssignReplicationFactorTooLarge(t *testing.T) {
	_, err := Assign(nodes(2), 3, 3, 0)
	if !errors.Is(err, ErrReplicationFactor) {
		t.Fatalf("err = %v, want ErrReplicationFactor", err)
	}
	if _, err := Assign(nil, 1, 1, 0); !errors.Is(err, ErrReplicationFactor) {
		t.Fatalf("no nodes: err = %v", err)
	}
}
