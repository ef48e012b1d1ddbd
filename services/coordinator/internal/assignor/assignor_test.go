package assignor

import (
	"fmt"
	"testing"
)

func members(n int, topics ...string) []Member {
	var out []Member
	for i := range n {
		out = append(out, Member{ID: fmt.Sprintf("m%02d", i), Topics: topics})
	}
	return out
}

// check verifies that every partition of the subscribed topics is assigned
// exactly once, only to a subscribed member.
func check(t *testing.T, ms []Member, parts map[string]int32, got map[string][]TopicPartition) {
	t.Helper()
	seen := map[TopicPartition]string{}
	subs := map[string]map[string]bool{}
	for _, m := range ms {
		subs[m.ID] = map[string]bool{}
		for _, tp := range m.Topics {
			subs[m.ID][tp] = true
		}
	}
	for id, l := range got {
		for _, tp := range l {
			if o, dup := seen[tp]; dup {
				t.Fatalf("%v assigned to %s and %s", tp, o, id)
			}
			if !subs[id][tp.Topic] {
				t.Fatalf("%v assigned to %s, which does not subscribe to it", tp, id)
			}
			seen[tp] = id
		}
	}
	for topic, n := range parts {
		subscribed := false
		for _, m := range ms {
			subscribed = subscribed || subs[m.ID][topic]
		}
		for p := range n {
			if _, ok := seen[TopicPartition{topic, p}]; subscribed && !ok {
				t.Fatalf("%s-%d unassigned", topic, p)
			}
		}
	}
}

func spread(got map[string][]TopicPartition) (lo, hi int) {
	lo = 1 << 30
	for _, l := range got {
		lo, hi = min(lo, len(l)), max(hi, len(l))
	}
	return lo, hi
}

func TestUniformBalanced(t *testing.T) {
	for _, tc := range []struct{ members, partitions int }{{1, 12}, {3, 12}, {12, 12}, {5, 12}, {16, 12}, {7, 100}} {
		t.Run(fmt.Sprintf("%dx%d", tc.members, tc.partitions), func(t *testing.T) {
			ms := members(tc.members, "orders")
			parts := map[string]int32{"orders": int32(tc.partitions)}
			got := Uniform(ms, parts, nil)
			check(t, ms, parts, got)
			if lo, hi := spread(got); hi-lo > 1 {
				t.Fatalf("counts %d..%d differ by more than one: %v", lo, hi, got)
			}
		})
	}
}

func TestUniformSticky(t *testing.T) {
	parts := map[string]int32{"orders": 12}
	three := members(3, "orders")
	prev := Uniform(three, parts, nil)
	// A fourth member joins: only 3 partitions move, all to it.
	four := members(4, "orders")
	next := Uniform(four, parts, prev)
	check(t, four, parts, next)
	moved := 0
	for _, m := range three {
		have := map[TopicPartition]bool{}
		for _, tp := range next[m.ID] {
			have[tp] = true
		}
		for _, tp := range prev[m.ID] {
			if !have[tp] {
				moved++
			}
		}
	}
	if moved != 3 || len(next["m03"]) != 3 {
		t.Fatalf("moved %d partitions, new member got %d; want 3 and 3: %v", moved, len(next["m03"]), next)
	}
	// m01 leaves: its partitions are shared out, the others keep theirs.
	left := []Member{four[0], four[2], four[3]}
	after := Uniform(left, parts, next)
	check(t, left, parts, after)
	for _, m := range left {
		have := map[TopicPartition]bool{}
		for _, tp := range after[m.ID] {
			have[tp] = true
		}
		for _, tp := range next[m.ID] {
			if !have[tp] {
				t.Fatalf("%s lost %v although it stayed", m.ID, tp)
			}
		}
	}
	if lo, hi := spread(after); lo != 4 || hi != 4 {
		t.Fatalf("after leave counts %d..%d; want 4", lo, hi)
	}
}

func TestUniformMixedSubscriptions(t *testing.T) {
	ms := []Member{
		{ID: "a", Topics: []string{"orders"}},
		{ID: "b", Topics: []string{"orders", "payments"}},
		{ID: "c", Topics: []string{"payments", "missing"}},
	}
	parts := map[string]int32{"orders": 4, "payments": 4}
	got := Uniform(ms, parts, nil)
	check(t, ms, parts, got)
	if lo, hi := spread(got); hi-lo > 1 {
		t.Fatalf("unbalanced: %v", got)
	}
}

func TestUniformShrinkAndUnsubscribe(t *testing.T) {
	ms := members(2, "orders")
	prev := map[string][]TopicPartition{"m00": {{"orders", 0}, {"orders", 7}}, "m01": {{"gone", 0}}}
	got := Uniform(ms, map[string]int32{"orders": 4}, prev)
	check(t, ms, map[string]int32{"orders": 4}, got)
	for _, l := range got {
		for _, tp := range l {
			if tp.Partition >= 4 || tp.Topic != "orders" {
				t.Fatalf("assigned %v, which does not exist", tp)
			}
		}
	}
	if got["m00"][0] != (TopicPartition{"orders", 0}) {
		t.Fatalf("m00 lost orders-0: %v", got)
	}
}

func TestUniformDeterministic(t *testing.T) {
	ms := members(5, "a", "b")
	parts := map[string]int32{"a": 7, "b": 5}
	first := fmt.Sprint(Uniform(ms, parts, nil))
	for range 20 {
		if got := fmt.Sprint(Uniform(ms, parts, nil)); got != first {
			t.Fatalf("result changed: %s vs %s", got, first)
		}
	}
}
