package checker

import (
	"fmt"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// LostWrite is an acknowledged send whose value no poll ever returned,
// although polls read its partition as far as its offset or beyond: the
// log moved on without it.
type LostWrite struct {
	Key, Value string
	// Position is where the send was acknowledged.
	Position Position
	// Send is the index of the send's ok event.
	Send int64
	// ReadUpTo is the highest offset any poll returned in the partition.
	ReadUpTo int64
	// SeenThere are the values polls returned at Position instead; none
	// when no poll returned that offset.
	SeenThere []string
}

func (a LostWrite) at() int64 { return a.Send }

func (a LostWrite) String() string {
	s := fmt.Sprintf("value %q (key %q) acked at %v (event %d), never read; partition read up to %d",
		a.Value, a.Key, a.Position, a.Send, a.ReadUpTo)
	if len(a.SeenThere) > 0 {
		s += "; the offset holds " + quoteAll(a.SeenThere)
	}
	return s
}

// UnreadWrite is an acknowledged send never read, in a partition no poll
// read as far as its offset: not judged.
type UnreadWrite struct {
	Key, Value string
	Position   Position
	Send       int64
	// ReadUpTo is the highest offset any poll returned in the partition;
	// -1 when none.
	ReadUpTo int64
}

func (a UnreadWrite) at() int64 { return a.Send }

func (a UnreadWrite) String() string {
	return fmt.Sprintf("value %q (key %q) acked at %v (event %d); partition read up to %d",
		a.Value, a.Key, a.Position, a.Send, a.ReadUpTo)
}

// lostWrites judges every ok send whose value no poll returned anywhere:
// lost when polls returned its offset or a later one in its partition (the
// "read past" rule of Jepsen's Kafka checker), unread otherwise. A value
// returned at another position is not lost: that is a duplicate or an
// inconsistent offset, reported by their own rules. Sends that failed or
// are indeterminate are never lost. Sends to compacted topics, whose
// records the cleaner removes, are judged by key instead (compacted.go),
// and sends in transactions by their transaction (txn.go).
func lostWrites(m *model) (lost []LostWrite, unread []UnreadWrite) {
	for _, o := range m.h.byF(history.FSend) {
		s := o.ev.Send
		if !o.ok() || s.Partition < 0 || s.Offset < 0 || len(m.positions[s.Value]) > 0 || !m.byRecord(s.Topic) {
			continue
		}
		tp := history.TopicPartition{Topic: s.Topic, Partition: s.Partition}
		pos := at(tp, s.Offset)
		p := m.parts[tp] // it exists: newModel made it for this ack
		if p.maxRead < s.Offset {
			unread = append(unread, UnreadWrite{Key: s.Key, Value: s.Value, Position: pos, Send: o.complete, ReadUpTo: p.maxRead})
			continue
		}
		var there []string
		for _, sv := range p.at[s.Offset] {
			there = append(there, sv.value)
		}
		lost = append(lost, LostWrite{Key: s.Key, Value: s.Value, Position: pos, Send: o.complete,
			ReadUpTo: p.maxRead, SeenThere: there})
	}
	return lost, unread
}
