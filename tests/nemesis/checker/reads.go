package checker

import (
	"fmt"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// AbortedRead is a value a poll returned whose send failed: a failed send
// is known not to have happened, so no consumer may see it (Jepsen's G1a).
type AbortedRead struct {
	Value    string
	Position Position
	// Send is the send's fail event; Read the ok event of the first poll
	// that returned the value, by Process.
	Send, Read int64
	Process    string
}

func (a AbortedRead) at() int64 { return a.Read }

func (a AbortedRead) String() string {
	return fmt.Sprintf("value %q failed (event %d) but %s read it at %v (event %d)",
		a.Value, a.Send, a.Process, a.Position, a.Read)
}

// PhantomRead is a value a poll returned that no send of the history
// wrote: a record from nowhere, or a corrupted one.
type PhantomRead struct {
	Value    string
	Position Position
	Read     int64
	Process  string
}

func (a PhantomRead) at() int64 { return a.Read }

func (a PhantomRead) String() string {
	return fmt.Sprintf("%s read %q at %v (event %d), which no send wrote", a.Process, a.Value, a.Position, a.Read)
}

// VanishedRead is a record a consumer was served and that was later gone:
// after the last poll that returned it, a read of its partition found
// another value at its offset, or read from before it to the partition's
// end without finding it (the log was truncated). A record once served to
// a consumer must stay; retention, which removes a log's head, is not
// judged, since a read that starts after the offset says nothing of it.
type VanishedRead struct {
	Value    string
	Position Position
	// Served is the ok event of the last poll that returned the value
	// there.
	Served int64
	// Later is the ok event of the later poll, by LaterProcess, that
	// passed over the offset without it; SeenThere is what that read
	// returned at the offset ("" when nothing).
	Later        int64
	LaterProcess string
	SeenThere    string
}

func (a VanishedRead) at() int64 { return a.Later }

func (a VanishedRead) String() string {
	seen := "nothing"
	if a.SeenThere != "" {
		seen = fmt.Sprintf("%q", a.SeenThere)
	}
	return fmt.Sprintf("value %q served at %v (last at event %d), later gone: %s read %s there (event %d)",
		a.Value, a.Position, a.Served, a.LaterProcess, seen, a.Later)
}

// abortedAndPhantomReads judges every value polls returned by its send:
// failed (aborted read) or missing (phantom read). Each value is reported
// once, at the first poll that returned it. A send whose outcome is unknown
// (info or pending) may have been written: reading it is no anomaly.
func abortedAndPhantomReads(m *model) (aborted []AbortedRead, phantom []PhantomRead) {
	judged := map[string]bool{}
	for _, p := range m.polls {
		for _, r := range p.ev.Poll.Records {
			if judged[r.Value] {
				continue
			}
			judged[r.Value] = true
			pos := at(r.TP(), r.Offset)
			send := m.sends[r.Value]
			switch {
			case send == nil:
				phantom = append(phantom, PhantomRead{Value: r.Value, Position: pos, Read: p.complete, Process: p.process})
			case send.typ == history.Fail && !send.pending:
				aborted = append(aborted, AbortedRead{Value: r.Value, Position: pos, Send: send.complete,
					Read: p.complete, Process: p.process})
			}
		}
	}
	return aborted, phantom
}

// vanishedReads finds the records served and later gone. Evidence is
// either a poll, invoked after the last one that served the record,
// returning another value at its offset; or a run (one consumer's reads of
// the partition between resets) started after that poll, that began at or
// before the offset and reached the partition's end (Poll.AtEnd) short of
// it. The earliest evidence is reported, once per value and position. A
// later read that jumps over the offset is a poll skip, not judged here.
// Compacted topics are not judged: the cleaner removes records served
// before (compacted.go judges what must stay), nor transactional ones,
// whose aborted records a read_committed read passes over (txn.go).
func vanishedReads(m *model, runs map[history.TopicPartition][]*run) []VanishedRead {
	var out []VanishedRead
	for _, tp := range m.sortedTPs() {
		if !m.byRecord(tp.Topic) {
			continue
		}
		p := m.parts[tp]
		for _, off := range p.offsets {
			svs := p.at[off]
			for _, sv := range svs {
				served := sv.last.complete
				var best *VanishedRead
				consider := func(poll *op, seen string) {
					if poll == nil || (best != nil && best.Later <= poll.complete) {
						return
					}
					best = &VanishedRead{Value: sv.value, Position: at(tp, off), Served: served,
						Later: poll.complete, LaterProcess: poll.process, SeenThere: seen}
				}
				for _, other := range svs {
					if other != sv {
						if poll := firstInvokedAfter(other, served); poll != nil {
							consider(poll, other.value)
						}
					}
				}
				for _, r := range runs[tp] {
					if r.start > served {
						consider(r.passedWithout(off, sv.value))
					}
				}
				if best != nil {
					out = append(out, *best)
				}
			}
		}
	}
	return out
}

// firstInvokedAfter returns a poll that served sv and was invoked after
// index, or nil. Only the first and last polls that served sv are known
// here; the runs catch the others.
func firstInvokedAfter(sv *served, index int64) *op {
	for _, p := range []*op{sv.first, sv.last} {
		if p.invoke > index {
			return p
		}
	}
	return nil
}
