package checker

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// Compacted topics (a topic note whose cleanup.policy holds compact) are
// judged by key: the cleaner removes a record once a newer one of its key
// is in the log, and a tombstone once its delete horizon has passed, so
// records go missing and offsets leave gaps legitimately. What must hold
// is what a reader of a compacted topic relies on: reading a partition
// from its start to its end yields, for every key, its newest write.
//
// A key's order is its sends' invoke order: the workload writes each key
// of a compacted topic from one idempotent producer, whose records of one
// partition land in the order it sent them, so the newest acknowledged
// write of a key is its last ok send in invoke order. A key sent by more
// than one process has no such order and is not judged (Compaction.Shared). A send after it
// whose outcome is unknown (info, pending) may have landed after it; so
// may a failed one, as far as this rule goes (reading a failed send is an
// aborted read, judged by reads.go).

// CompactedKey is a key of a compacted topic that a complete read of its
// partition (see completeReads) shows wrong: the read's last record of the
// key is neither the key's newest acknowledged write nor a send after it
// (at an offset at or above the newest acknowledged one), or, where the
// newest acknowledged write is a value, the read has no record of the key
// at all. Listed as stale-key, or as resurrected-key
// when the newest acknowledged write is a tombstone and the read shows an
// older value: a deleted key come back.
type CompactedKey struct {
	Topic, Key string
	Partition  int32
	// Newest is the key's newest write acknowledged before the read
	// began.
	Newest KeyWrite
	// Shown is the read's last record of the key; nil when it returned
	// none.
	Shown *KeyRecord
	// From is the offset the read started at, End the ok event of the
	// poll at which it reached the partition's end, and Reader the
	// process that read.
	From   int64
	End    int64
	Reader string
}

// KeyWrite is an acknowledged send of a key of a compacted topic.
type KeyWrite struct {
	Value     string
	Tombstone bool
	Offset    int64
	// Event is the send's ok event.
	Event int64
}

// KeyRecord is a record of a key of a compacted topic as a poll returned
// it.
type KeyRecord struct {
	Value     string
	Tombstone bool
	Offset    int64
	// Poll is the ok event of the poll that returned it; Send the event
	// that completed the send of its value (the invoke while pending), 0
	// when no send wrote it.
	Poll, Send int64
}

func (a CompactedKey) at() int64 { return a.End }

func (a CompactedKey) String() string {
	shown := "no record of the key"
	if s := a.Shown; s != nil {
		shown = fmt.Sprintf("%s at %d (poll event %d, send event %d)", describeWrite(s.Value, s.Tombstone), s.Offset, s.Poll, s.Send)
	}
	return fmt.Sprintf("key %q in %s-%d: newest acked write %s at %d (event %d); %s read from %d to the end (event %d) shows %s",
		a.Key, a.Topic, a.Partition, describeWrite(a.Newest.Value, a.Newest.Tombstone), a.Newest.Offset, a.Newest.Event,
		a.Reader, a.From, a.End, shown)
}

func describeWrite(value string, tombstone bool) string {
	if tombstone {
		return fmt.Sprintf("tombstone %q", value)
	}
	return fmt.Sprintf("%q", value)
}

// Compaction is what the complete reads of compacted topics cover and
// what they show the cleaner removed (informational: the figures tell
// whether the cleaner ran at all, which a run needs for the compaction
// rules to have judged anything).
type Compaction struct {
	// Partitions counts the compacted partitions with a complete read;
	// Unread those with acknowledged sends but no complete read (their
	// keys are not judged).
	Partitions, Unread int
	// Keys counts the keys judged: those with a write acknowledged before
	// their partition's complete read began. Shared counts the keys not
	// judged because more than one process sent them.
	Keys, Shared int
	// Acked counts the acknowledged sends the complete reads cover (acked
	// before the read began, at or after its start offset), Tombstones
	// the tombstones among them; Read counts the records the reads
	// returned.
	Acked, Tombstones, Read int
	// Removed counts the covered sends the reads did not return: records
	// the cleaner removed. TombstonesRemoved counts the tombstones among
	// them.
	Removed, TombstonesRemoved int
	// Deleted counts the judged keys whose newest acknowledged write is a
	// tombstone; DeletedGone those of them the read shows no record of:
	// deleted keys whose tombstone the cleaner removed as well.
	Deleted, DeletedGone int
}

func (c Compaction) String() string {
	return fmt.Sprintf("%d partitions read whole (%d unread), %d records read, %d keys judged (%d sent by several processes, not judged); %d acked records covered, %d removed by the cleaner; %d tombstones covered, %d removed; %d keys deleted, %d of them with their tombstone gone",
		c.Partitions, c.Unread, c.Read, c.Keys, c.Shared, c.Acked, c.Removed, c.Tombstones, c.TombstonesRemoved, c.Deleted, c.DeletedGone)
}

// compactedTopics returns the topics whose topic note's cleanup.policy
// holds compact.
func compactedTopics(h *hist) map[string]bool {
	out := map[string]bool{}
	for _, o := range h.byF(history.FTopic) {
		if compact, _ := topicconfig.Cleanup(o.ev.Topic.Configs); compact {
			out[o.ev.Topic.Name] = true
		}
	}
	return out
}

// wholeRead is one consumer's read of a compacted partition from an
// offset it set itself (an assign note's Offsets) until a poll at which
// its position reached the partition's end (Poll.AtEnd): everything the
// partition held from there, as the read found it.
type wholeRead struct {
	process string
	from    int64
	// start is the assign note's index; end the ok event of the poll
	// that reached the end, 0 while the read goes on.
	start, end int64
	// values are the values returned; last the record at the highest
	// offset of each key, with the poll that returned it.
	values  map[string]bool
	last    map[string]KeyRecord
	records int
}

func (w *wholeRead) add(rec history.Record, poll *op) {
	w.records++
	w.values[rec.Value] = true
	if l, ok := w.last[rec.Key]; !ok || rec.Offset > l.Offset {
		w.last[rec.Key] = KeyRecord{Value: rec.Value, Tombstone: rec.Tombstone, Offset: rec.Offset, Poll: poll.complete}
	}
}

// completeReads finds, for each compacted partition, the last whole read
// of it to complete. A read ends unfinished at an assign note of its
// process that names its partition (or names none) and at a poll of its
// process whose assignment lacks the partition; only polls invoked after
// the read began count toward it.
func completeReads(h *hist, compacted map[string]bool) map[history.TopicPartition]*wholeRead {
	type key struct {
		process string
		tp      history.TopicPartition
	}
	var ops []*op
	for _, o := range h.ops {
		if (o.f == history.FAssign && o.typ != history.Fail || o.f == history.FPoll && o.ok()) && hasPayload(o.ev) {
			ops = append(ops, o)
		}
	}
	slices.SortStableFunc(ops, func(a, b *op) int { return cmp.Compare(a.complete, b.complete) })
	open := map[key]*wholeRead{}
	out := map[history.TopicPartition]*wholeRead{}
	for _, o := range ops {
		if a := o.ev.Assign; a != nil {
			if len(a.Assigned) == 0 && len(a.Revoked) == 0 {
				for k := range open {
					if k.process == o.process {
						delete(open, k)
					}
				}
			}
			for _, tp := range append(slices.Clone(a.Revoked), a.Assigned...) {
				delete(open, key{o.process, tp})
			}
			for _, po := range a.Offsets {
				if compacted[po.Topic] {
					open[key{o.process, po.TP()}] = &wholeRead{process: o.process, from: po.Offset, start: o.complete,
						values: map[string]bool{}, last: map[string]KeyRecord{}}
				}
			}
			continue
		}
		p := o.ev.Poll
		for _, rec := range p.Records {
			if w := open[key{o.process, rec.TP()}]; w != nil && o.invoke > w.start && rec.Offset >= w.from {
				w.add(rec, o)
			}
		}
		for _, tp := range p.AtEnd {
			k := key{o.process, tp}
			if w := open[k]; w != nil && o.invoke > w.start {
				w.end = o.complete
				out[tp] = w
				delete(open, k)
			}
		}
		if p.Assigned != nil {
			for k := range open {
				if k.process == o.process && !slices.Contains(p.Assigned, k.tp) {
					delete(open, k)
				}
			}
		}
	}
	return out
}

// compactedKeys judges every key of the compacted topics by the complete
// read of its partition, and counts what the reads cover and show
// removed. A key with no write acknowledged before the read began is not
// judged: any value sent may stand (phantom reads are reads.go's).
func compactedKeys(m *model) (stale, resurrected []CompactedKey, c Compaction) {
	if len(m.compacted) == 0 {
		return nil, nil, c
	}
	reads := completeReads(m.h, m.compacted)
	c.Partitions = len(reads)
	for _, w := range reads {
		c.Read += w.records
	}
	type keyOf struct{ topic, key string }
	sends := map[keyOf][]*op{}
	unread := map[history.TopicPartition]bool{}
	for _, o := range m.h.byF(history.FSend) {
		s := o.ev.Send
		if !m.compacted[s.Topic] {
			continue
		}
		k := keyOf{s.Topic, s.Key}
		sends[k] = append(sends[k], o)
		if !o.ok() || s.Partition < 0 || s.Offset < 0 {
			continue
		}
		tp := history.TopicPartition{Topic: s.Topic, Partition: s.Partition}
		w := reads[tp]
		if w == nil {
			unread[tp] = true
			continue
		}
		if o.complete > w.start || s.Offset < w.from {
			continue
		}
		c.Acked++
		if s.Tombstone {
			c.Tombstones++
		}
		if !w.values[s.Value] {
			c.Removed++
			if s.Tombstone {
				c.TombstonesRemoved++
			}
		}
	}
	c.Unread = len(unread)

	keys := make([]keyOf, 0, len(sends))
	for k := range sends {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b keyOf) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.key, b.key)) })
	for _, k := range keys {
		ss := sends[k] // in invoke order: the key's order
		if slices.ContainsFunc(ss, func(o *op) bool { return o.process != ss[0].process }) {
			c.Shared++
			continue
		}
		newest, w := -1, (*wholeRead)(nil)
		for i := len(ss) - 1; i >= 0 && newest < 0; i-- {
			s := ss[i].ev.Send
			if !ss[i].ok() || s.Partition < 0 || s.Offset < 0 {
				continue
			}
			if rd := reads[history.TopicPartition{Topic: s.Topic, Partition: s.Partition}]; rd != nil && ss[i].complete < rd.start {
				newest, w = i, rd
			}
		}
		if newest < 0 {
			continue
		}
		c.Keys++
		ns := ss[newest].ev.Send
		allowed := map[string]bool{}
		for _, o := range ss[newest:] {
			allowed[o.ev.Send.Value] = true
		}
		var shown *KeyRecord
		if l, ok := w.last[k.key]; ok {
			shown = &l
			if o := m.sends[l.Value]; o != nil {
				shown.Send = max(o.complete, o.invoke)
			}
		}
		if ns.Tombstone {
			c.Deleted++
			if shown == nil {
				c.DeletedGone++
			}
		}
		// A later send shown below the newest acknowledged write's offset
		// does not stand for it: that write is gone.
		if (shown == nil && ns.Tombstone) || (shown != nil && allowed[shown.Value] && shown.Offset >= ns.Offset) {
			continue
		}
		a := CompactedKey{Topic: k.topic, Key: k.key, Partition: ns.Partition,
			Newest: KeyWrite{Value: ns.Value, Tombstone: ns.Tombstone, Offset: ns.Offset, Event: ss[newest].complete},
			Shown:  shown, From: w.from, End: w.end, Reader: w.process}
		if ns.Tombstone && shown != nil && !shown.Tombstone {
			resurrected = append(resurrected, a)
		} else {
			stale = append(stale, a)
		}
	}
	return stale, resurrected, c
}
