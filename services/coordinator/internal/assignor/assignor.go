// Package assignor computes a consumer group's target assignment on the
// coordinator (server-side assignment, as in Kafka's KIP-848).
//
// Uniform is the one assignor: sticky and balanced. It keeps every partition
// with the member that had it in the previous target when that member is
// still subscribed to the topic, hands out partitions nobody has to the
// least loaded eligible member, then moves partitions one at a time from
// the most to the least loaded member until no two members that could
// trade differ by more than one. With every member subscribed to the same
// topics the result is perfectly balanced (counts differ by at most one)
// and moves the fewest partitions. The result depends only on its inputs.
package assignor

import (
	"slices"
	"sort"
)

// Name is the name of Uniform in ConsumerGroupHeartbeat.server_assignor.
const Name = "uniform"

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Less orders partitions by topic, then index.
func Less(a, b TopicPartition) bool {
	return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
}

// Compare is Less as a three-way comparison, for slices.SortFunc.
func Compare(a, b TopicPartition) int {
	switch {
	case Less(a, b):
		return -1
	case Less(b, a):
		return 1
	}
	return 0
}

// Member is one member's subscription.
type Member struct {
	ID     string
	Topics []string
}

// Uniform returns the target assignment of members to the partitions of
// the topics they subscribe to. partitions gives each topic's partition
// count (topics missing from it are not assigned); prev is the previous
// target. Every member is in the result, each list sorted.
func Uniform(members []Member, partitions map[string]int32, prev map[string][]TopicPartition) map[string][]TopicPartition {
	ids := make([]string, 0, len(members))
	subs := map[string]map[string]bool{}
	for _, m := range members {
		ids = append(ids, m.ID)
		s := map[string]bool{}
		for _, t := range m.Topics {
			if _, ok := partitions[t]; ok {
				s[t] = true
			}
		}
		subs[m.ID] = s
	}
	sort.Strings(ids)
	owner := map[TopicPartition]string{}
	load := map[string]int{}
	for _, id := range ids {
		load[id] = 0
	}
	// 1. Stickiness: keep what members had, where still valid.
	for _, id := range ids {
		for _, tp := range prev[id] {
			if !subs[id][tp.Topic] || tp.Partition < 0 || tp.Partition >= partitions[tp.Topic] {
				continue
			}
			if _, taken := owner[tp]; taken {
				continue
			}
			owner[tp] = id
			load[id]++
		}
	}
	// 2. Hand out the rest, least loaded eligible member first.
	topics := make([]string, 0, len(partitions))
	for t := range partitions {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		for p := range partitions[t] {
			tp := TopicPartition{t, p}
			if _, ok := owner[tp]; ok {
				continue
			}
			best := ""
			for _, id := range ids {
				if subs[id][t] && (best == "" || load[id] < load[best]) {
					best = id
				}
			}
			if best != "" {
				owner[tp] = best
				load[best]++
			}
		}
	}
	// 3. Balance: move one partition at a time from a heavier member to a
	// lighter eligible one while counts differ by more than one.
	byMember := func() map[string][]TopicPartition {
		out := map[string][]TopicPartition{}
		for _, id := range ids {
			out[id] = nil
		}
		for tp, id := range owner {
			out[id] = append(out[id], tp)
		}
		for _, l := range out {
			slices.SortFunc(l, Compare)
		}
		return out
	}
	for moved := true; moved; {
		moved = false
		cur := byMember()
		donors := slices.Clone(ids)
		sort.SliceStable(donors, func(i, j int) bool { return load[donors[i]] > load[donors[j]] })
		receivers := slices.Clone(ids)
		sort.SliceStable(receivers, func(i, j int) bool { return load[receivers[i]] < load[receivers[j]] })
	search:
		for _, d := range donors {
			for _, r := range receivers {
				if load[d]-load[r] <= 1 {
					break
				}
				// Move the donor's last partition the receiver may take.
				l := cur[d]
				for i := len(l) - 1; i >= 0; i-- {
					if subs[r][l[i].Topic] {
						owner[l[i]] = r
						load[d]--
						load[r]++
						moved = true
						break search
					}
				}
			}
		}
	}
	return byMember()
}
