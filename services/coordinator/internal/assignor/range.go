package assignor

import (
	"slices"
	"sort"
)

// RangeName is the name of Range in ConsumerGroupHeartbeat.server_assignor.
const RangeName = "range"

// Names lists the server-side assignors, the default first.
var Names = []string{Name, RangeName}

// Known reports whether name is a server-side assignor.
func Known(name string) bool { return slices.Contains(Names, name) }

// Assign runs the assignor called name (Uniform for any other).
func Assign(name string, members []Member, partitions map[string]int32, prev map[string][]TopicPartition) map[string][]TopicPartition {
	if name == RangeName {
		return Range(members, partitions, prev)
	}
	return Uniform(members, partitions, prev)
}

// Range returns the target assignment of the range assignor, as Kafka's
// server-side "range" (KIP-848) defines it. Topic by topic, the M members
// subscribed to it share its P partitions in member id order: each gets
// P/M and the first P%M one more, as contiguous ranges. Members subscribed
// to co-partitioned topics (equal partition counts) therefore get the
// same partition numbers of each, which joins need. It is sticky as
// Kafka's: a member first keeps its lowest-numbered partitions of the
// topic from prev, up to its share (and one more while extra partitions
// remain), and the partitions left go out in ranges to the members short
// of their share. Every member is in the result, each list sorted; the
// result depends only on the inputs.
func Range(members []Member, partitions map[string]int32, prev map[string][]TopicPartition) map[string][]TopicPartition {
	out := map[string][]TopicPartition{}
	subscribers := map[string][]string{}
	for _, m := range members {
		out[m.ID] = nil
		for _, t := range m.Topics {
			if _, ok := partitions[t]; ok && !slices.Contains(subscribers[t], m.ID) {
				subscribers[t] = append(subscribers[t], m.ID)
			}
		}
	}
	topics := make([]string, 0, len(subscribers))
	for t := range subscribers {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		ids := subscribers[t]
		sort.Strings(ids)
		n := partitions[t]
		share, extra := n/int32(len(ids)), n%int32(len(ids))
		taken := make([]bool, n)
		type short struct {
			id      string
			missing int32
		}
		var shorts []short
		for _, id := range ids {
			var had []int32
			for _, tp := range prev[id] {
				if tp.Topic == t && tp.Partition >= 0 && tp.Partition < n && !taken[tp.Partition] {
					had = append(had, tp.Partition)
				}
			}
			slices.Sort(had)
			had = slices.Compact(had)
			keep := min(int32(len(had)), share)
			if int32(len(had)) > share && extra > 0 {
				keep++
				extra--
			}
			for _, p := range had[:keep] {
				taken[p] = true
				out[id] = append(out[id], TopicPartition{t, p})
			}
			if keep < share || keep == share && int32(len(had)) <= share {
				shorts = append(shorts, short{id, share - keep})
			}
		}
		var free []int32
		for p := range n {
			if !taken[p] {
				free = append(free, p)
			}
		}
		for _, s := range shorts {
			want := s.missing
			if extra > 0 {
				want++
				extra--
			}
			want = min(want, int32(len(free)))
			for _, p := range free[:want] {
				out[s.id] = append(out[s.id], TopicPartition{t, p})
			}
			free = free[want:]
		}
	}
	for _, l := range out {
		slices.SortFunc(l, Compare)
	}
	return out
}
