// Package placement chooses the replicas of new partitions: leaders round
// robin over the nodes from a start offset (as Kafka does), followers on
// the least-loaded nodes, and, when nodes carry a rack label, consecutive
// replicas of a partition on different racks.
//
// Placement is a pure function of its inputs; the caller persists the
// result.
package placement

import (
	"errors"
	"fmt"
	"sort"
)

// ErrReplicationFactor is returned when more replicas are asked for than
// there are nodes.
var ErrReplicationFactor = errors.New("placement: replication factor larger than the number of live nodes")

// Node is a placement candidate.
type Node struct {
	// ID is the node id.
	ID int32
	// Rack is the rack label; empty when unset.
	Rack string
}

// Assign returns, for each of partitions partitions, replicationFactor
// distinct node ids, preferred leader first. start shifts the round robin
// so that topics do not all lead on the same node (the caller derives it
// from the topic name). Followers go to the nodes holding the fewest
// replicas of this topic so far, preferring racks the partition does not
// use yet.
func Assign(nodes []Node, partitions, replicationFactor int, start int) ([][]int32, error) {
	if partitions < 0 || replicationFactor < 1 {
		return nil, fmt.Errorf("placement: bad request: %d partitions, replication factor %d", partitions, replicationFactor)
	}
	if replicationFactor > len(nodes) {
		return nil, fmt.Errorf("%w (%d > %d)", ErrReplicationFactor, replicationFactor, len(nodes))
	}
	ring := rackAlternating(nodes)
	n := len(ring)
	if start < 0 {
		start = -start
	}
	load := make(map[int32]int, n)
	out := make([][]int32, partitions)
	for p := 0; p < partitions; p++ {
		first := (start + p) % n
		replicas := []int32{ring[first].ID}
		used := map[int32]bool{ring[first].ID: true}
		racks := map[string]bool{ring[first].Rack: true}
		load[ring[first].ID]++
		// A per-round shift varies which followers pair with a leader, so
		// that a dead node's followers spread over the others.
		shift := p / n
		for len(replicas) < replicationFactor {
			best := -1
			bestKey := [3]int{}
			for k := 1; k < n; k++ {
				idx := (first + 1 + (shift+k-1)%(n-1)) % n
				c := ring[idx]
				if used[c.ID] {
					continue
				}
				rackUsed := 0
				if c.Rack != "" && racks[c.Rack] {
					rackUsed = 1
				}
				key := [3]int{rackUsed, load[c.ID], k}
				if best < 0 || less(key, bestKey) {
					best, bestKey = idx, key
				}
			}
			c := ring[best]
			replicas = append(replicas, c.ID)
			used[c.ID] = true
			racks[c.Rack] = true
			load[c.ID]++
			if len(racks) == countRacks(ring) {
				// Every rack holds a replica; start another round of racks.
				racks = map[string]bool{c.Rack: true}
			}
		}
		out[p] = replicas
	}
	return out, nil
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func countRacks(ring []Node) int {
	m := map[string]bool{}
	for _, n := range ring {
		m[n.Rack] = true
	}
	return len(m)
}

// rackAlternating orders nodes by id within each rack and then takes one
// node from each rack in turn (Kafka's rack-alternated broker list), so
// that consecutive leaders land on different racks.
func rackAlternating(nodes []Node) []Node {
	byRack := map[string][]Node{}
	var racks []string
	for _, n := range nodes {
		if _, ok := byRack[n.Rack]; !ok {
			racks = append(racks, n.Rack)
		}
		byRack[n.Rack] = append(byRack[n.Rack], n)
	}
	sort.Strings(racks)
	for _, r := range racks {
		sort.Slice(byRack[r], func(i, j int) bool { return byRack[r][i].ID < byRack[r][j].ID })
	}
	out := make([]Node, 0, len(nodes))
	for i := 0; len(out) < len(nodes); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				out = append(out, byRack[r][i])
			}
		}
	}
	return out
}
