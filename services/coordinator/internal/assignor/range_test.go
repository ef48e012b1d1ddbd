package assignor

import (
	"fmt"
	"slices"
	"testing"
)

// partitionsOf is a member's partition numbers of one topic.
func partitionsOf(l []TopicPartition, topic string) []int32 {
	var out []int32
	for _, tp := range l {
		if tp.Topic == topic {
			out = append(out, tp.Partition)
		}
	}
	return out
}

// Range hands each topic out in contiguous ranges, P/M each and one more
// to the first P%M members by id, so co-partitioned topics give every
// member the same partition numbers of each.
func TestRangeCoPartitions(t *testing.T) {
	for _, tc := range []struct{ members, partitions int }{{1, 6}, {2, 6}, {4, 6}, {3, 7}, {8, 6}} {
		t.Run(fmt.Sprintf("%dx%d", tc.members, tc.partitions), func(t *testing.T) {
			ms := members(tc.members, "clicks", "views")
			parts := map[string]int32{"clicks": int32(tc.partitions), "views": int32(tc.partitions)}
			got := Range(ms, parts, nil)
			check(t, ms, parts, got)
			share, extra := tc.partitions/tc.members, tc.partitions%tc.members
			next := int32(0)
			for i, m := range ms {
				want := []int32{}
				n := share
				if i < extra {
					n++
				}
				for range n {
					want = append(want, next)
					next++
				}
				clicks, views := partitionsOf(got[m.ID], "clicks"), partitionsOf(got[m.ID], "views")
				if !slices.Equal(append([]int32{}, clicks...), want) || !slices.Equal(clicks, views) {
					t.Fatalf("%s: clicks %v views %v, want %v of each", m.ID, clicks, views, want)
				}
			}
		})
	}
}

// A member that joins takes partitions from the ends of the others'
// ranges; the others keep their lowest partitions.
func TestRangeSticky(t *testing.T) {
	parts := map[string]int32{"orders": 6}
	two := members(2, "orders")
	first := Range(two, parts, nil) // m00: 0-2, m01: 3-5
	three := members(3, "orders")
	got := Range(three, parts, first)
	check(t, three, parts, got)
	want := map[string][]int32{"m00": {0, 1}, "m01": {3, 4}, "m02": {2, 5}}
	for id, w := range want {
		if p := partitionsOf(got[id], "orders"); !slices.Equal(p, w) {
			t.Fatalf("%s: %v, want %v (all: %v)", id, p, w, got)
		}
	}
	// And back to two: m02's partitions go to the members short of their share.
	back := Range(two, parts, got)
	check(t, two, parts, back)
	if a, b := partitionsOf(back["m00"], "orders"), partitionsOf(back["m01"], "orders"); len(a) != 3 || len(b) != 3 || a[0] != 0 || b[0] != 3 {
		t.Fatalf("back to two: %v and %v", a, b)
	}
	// A previous target naming a partition twice, or one the topic no
	// longer has, is not trusted.
	bad := map[string][]TopicPartition{"m00": {{"orders", 0}, {"orders", 9}}, "m01": {{"orders", 0}}}
	check(t, two, parts, Range(two, parts, bad))
}

// Members with different subscriptions share only the topics they name.
func TestRangeMixedSubscriptions(t *testing.T) {
	ms := []Member{{ID: "a", Topics: []string{"x", "y"}}, {ID: "b", Topics: []string{"y"}}, {ID: "c", Topics: []string{"missing"}}}
	parts := map[string]int32{"x": 3, "y": 4}
	got := Range(ms, parts, nil)
	check(t, ms, parts, got)
	if x, y := partitionsOf(got["a"], "x"), partitionsOf(got["a"], "y"); len(x) != 3 || !slices.Equal(y, []int32{0, 1}) {
		t.Fatalf("a: x %v y %v", x, y)
	}
	if l, ok := got["c"]; !ok || len(l) != 0 {
		t.Fatalf("c, subscribed to no existing topic: %v (in result: %v)", l, ok)
	}
	if !Known("range") || !Known("uniform") || Known("sticky") {
		t.Fatal("Known")
	}
}
