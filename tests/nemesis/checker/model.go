package checker

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// Position is where a record sits: a partition and an offset.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// TP is the partition of p.
func (p Position) TP() history.TopicPartition {
	return history.TopicPartition{Topic: p.Topic, Partition: p.Partition}
}

func (p Position) String() string { return fmt.Sprintf("%s-%d@%d", p.Topic, p.Partition, p.Offset) }

func at(tp history.TopicPartition, offset int64) Position {
	return Position{Topic: tp.Topic, Partition: tp.Partition, Offset: offset}
}

// served is one value at one position, as ok polls returned it.
type served struct {
	value string
	// first and last are the polls that served it and completed first
	// and last.
	first, last *op
}

// partition is what the history says of one partition's log.
type partition struct {
	// at holds, per offset, the values polls returned there, in the order
	// first served: one, unless the log disagreed with itself.
	at map[int64][]*served
	// acked holds, per offset, the ok sends acknowledged there.
	acked map[int64][]*op
	// maxRead is the highest offset a poll returned; -1 when none.
	maxRead int64
	// offsets are the offsets polls returned, sorted, each once: the
	// offsets known to exist.
	offsets []int64
}

// existingBetween counts the offsets known to exist strictly between lo
// and hi, and returns the first of them.
func (p *partition) existingBetween(lo, hi int64) (n int, first int64) {
	i, _ := slices.BinarySearch(p.offsets, lo+1)
	j, _ := slices.BinarySearch(p.offsets, hi)
	if j <= i {
		return 0, -1
	}
	return j - i, p.offsets[i]
}

// model is the log as the history shows it: sends by value, and what polls
// read where.
type model struct {
	h *hist
	// sends maps each value to its send; a value the workload sent twice
	// (which it must not) maps to the first.
	sends map[string]*op
	// compacted names the compacted topics (compacted.go): their records
	// are judged by key, and the rules that take a gap in offsets or a
	// record gone for a loss pass over them.
	compacted map[string]bool
	// transactional names the topics written in transactions (txn.go):
	// their records count only once committed, so the rules that take a
	// record never read, gone, or jumped over for an anomaly pass over
	// them, and txn.go judges them.
	transactional map[string]bool
	parts         map[history.TopicPartition]*partition
	// positions maps each value read to the positions polls returned it
	// at, each once, first served first.
	positions map[string][]Position
	// polls are the ok polls, in completion order.
	polls []*op
	// records counts the records ok polls returned.
	records int
}

func newModel(h *hist) *model {
	m := &model{h: h, sends: map[string]*op{}, compacted: compactedTopics(h), transactional: map[string]bool{},
		parts: map[history.TopicPartition]*partition{}, positions: map[string][]Position{}}
	for _, o := range h.byF(history.FSend) {
		s := o.ev.Send
		if s.Txn != "" {
			m.transactional[s.Topic] = true
		}
		if _, dup := m.sends[s.Value]; !dup {
			m.sends[s.Value] = o
		}
		if o.ok() && s.Partition >= 0 && s.Offset >= 0 {
			p := m.part(history.TopicPartition{Topic: s.Topic, Partition: s.Partition})
			p.acked[s.Offset] = append(p.acked[s.Offset], o)
		}
	}
	for _, o := range h.byF(history.FPoll) {
		if o.ok() {
			m.polls = append(m.polls, o)
		}
	}
	slices.SortStableFunc(m.polls, func(a, b *op) int { return cmp.Compare(a.complete, b.complete) })
	for _, o := range m.polls {
		for _, r := range o.ev.Poll.Records {
			m.records++
			p := m.part(r.TP())
			p.maxRead = max(p.maxRead, r.Offset)
			i := slices.IndexFunc(p.at[r.Offset], func(s *served) bool { return s.value == r.Value })
			if i < 0 {
				p.at[r.Offset] = append(p.at[r.Offset], &served{value: r.Value, first: o, last: o})
				m.positions[r.Value] = append(m.positions[r.Value], at(r.TP(), r.Offset))
				continue
			}
			p.at[r.Offset][i].last = o
		}
	}
	for _, p := range m.parts {
		for off := range p.at {
			p.offsets = append(p.offsets, off)
		}
		slices.Sort(p.offsets)
	}
	return m
}

// byRecord reports whether topic's records are judged one by one (lost,
// vanished, jumped over): not a compacted topic, whose cleaner removes
// records, nor a transactional one, whose aborted records read_committed
// readers never see.
func (m *model) byRecord(topic string) bool { return !m.compacted[topic] && !m.transactional[topic] }

func (m *model) part(tp history.TopicPartition) *partition {
	p, ok := m.parts[tp]
	if !ok {
		p = &partition{at: map[int64][]*served{}, acked: map[int64][]*op{}, maxRead: -1}
		m.parts[tp] = p
	}
	return p
}

// sortedTPs returns the partitions of m in a fixed order.
func (m *model) sortedTPs() []history.TopicPartition {
	tps := make([]history.TopicPartition, 0, len(m.parts))
	for tp := range m.parts {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, compareTP)
	return tps
}

func compareTP(a, b history.TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}
