package checker

import (
	"fmt"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// NonmonotonicSend is a producer whose acknowledged offsets for one key (in
// one partition) went backwards: a send invoked after another got an offset
// at or below the other's.
type NonmonotonicSend struct {
	Process, Topic, Key string
	Partition           int32
	// Prev is the earlier-invoked send, Next the one after it.
	Prev, Next SendAt
}

// SendAt is an acknowledged send.
type SendAt struct {
	Value  string
	Offset int64
	// Event is the send's ok event.
	Event int64
}

func (a NonmonotonicSend) at() int64 { return max(a.Prev.Event, a.Next.Event) }

func (a NonmonotonicSend) String() string {
	return fmt.Sprintf("%s key %q in %s-%d: %q at %d (event %d) then %q at %d (event %d)",
		a.Process, a.Key, a.Topic, a.Partition, a.Prev.Value, a.Prev.Offset, a.Prev.Event,
		a.Next.Value, a.Next.Offset, a.Next.Event)
}

// nonmonotonicSends compares, per process, key and partition, each ok
// send's offset with the one of the ok send invoked before it, as Jepsen
// does: a producer's records for one key must land in the order it sent
// them.
func nonmonotonicSends(h *hist) []NonmonotonicSend {
	type stream struct {
		process, topic, key string
		partition           int32
	}
	last := map[stream]*op{}
	var out []NonmonotonicSend
	for _, o := range h.byF(history.FSend) {
		s := o.ev.Send
		if !o.ok() || s.Partition < 0 || s.Offset < 0 {
			continue
		}
		k := stream{process: o.process, topic: s.Topic, key: s.Key, partition: s.Partition}
		if prev := last[k]; prev != nil && s.Offset <= prev.ev.Send.Offset {
			ps := prev.ev.Send
			out = append(out, NonmonotonicSend{Process: o.process, Topic: s.Topic, Key: s.Key, Partition: s.Partition,
				Prev: SendAt{Value: ps.Value, Offset: ps.Offset, Event: prev.complete},
				Next: SendAt{Value: s.Value, Offset: s.Offset, Event: o.complete}})
		}
		last[k] = o
	}
	return out
}
