package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Duplicate is one value at two or more positions, in one partition or
// several: the log holds a record twice (a retried send appended again),
// or an acknowledgement named a position other than where the record is.
type Duplicate struct {
	Value string
	// Positions are where it was seen, and Events the first event that
	// showed each (a poll's ok, or the send's ok for the acknowledged
	// position), earliest first.
	Positions []Position
	Events    []int64
	// Send is the index of the send's completion (or invoke, while
	// pending); 0 when no send wrote the value.
	Send int64
}

func (a Duplicate) at() int64 { return a.Events[1] }

func (a Duplicate) String() string {
	parts := make([]string, len(a.Positions))
	for i, p := range a.Positions {
		parts[i] = fmt.Sprintf("%v (event %d)", p, a.Events[i])
	}
	return fmt.Sprintf("value %q (send event %d) at %s", a.Value, a.Send, strings.Join(parts, ", "))
}

// InconsistentOffset is one position holding two or more values, as polls
// returned it or a send was acknowledged there.
type InconsistentOffset struct {
	Position Position
	// Values are the values seen there, and Events the first event that
	// showed each, earliest first.
	Values []string
	Events []int64
	// Acked are the values a send was acknowledged with at Position.
	Acked []string
}

func (a InconsistentOffset) at() int64 { return a.Events[1] }

func (a InconsistentOffset) String() string {
	parts := make([]string, len(a.Values))
	for i, v := range a.Values {
		parts[i] = fmt.Sprintf("%q (event %d)", v, a.Events[i])
	}
	s := fmt.Sprintf("%v holds %s", a.Position, strings.Join(parts, ", "))
	if len(a.Acked) > 0 {
		s += "; acked: " + quoteAll(a.Acked)
	}
	return s
}

// sighting is a value seen at a position, by the first event that showed
// it there.
type sighting struct {
	value string
	pos   Position
	event int64
	acked bool
}

// sightings returns every (value, position) pair the history shows, polls
// and acknowledgements merged, each with the first event that showed it.
func sightings(m *model) []sighting {
	seen := map[sighting]int64{} // keyed with event and acked zero
	acked := map[sighting]bool{}
	note := func(value string, pos Position, event int64, ack bool) {
		k := sighting{value: value, pos: pos}
		if e, ok := seen[k]; !ok || event < e {
			seen[k] = event
		}
		acked[k] = acked[k] || ack
	}
	for _, tp := range m.sortedTPs() {
		p := m.parts[tp]
		for off, svs := range p.at {
			for _, sv := range svs {
				note(sv.value, at(tp, off), sv.first.complete, false)
			}
		}
		for off, sends := range p.acked {
			for _, o := range sends {
				note(o.ev.Send.Value, at(tp, off), o.complete, true)
			}
		}
	}
	out := make([]sighting, 0, len(seen))
	for k, e := range seen {
		k.event, k.acked = e, acked[k]
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b sighting) int {
		return cmp.Or(cmp.Compare(a.event, b.event), cmp.Compare(a.value, b.value), comparePos(a.pos, b.pos))
	})
	return out
}

// duplicates finds the values seen at more than one position. A send
// whose outcome was unknown and whose record was written once is seen at
// one position and is no duplicate.
func duplicates(m *model) []Duplicate {
	byValue := map[string]*Duplicate{}
	var order []string
	for _, s := range sightings(m) {
		d, ok := byValue[s.value]
		if !ok {
			d = &Duplicate{Value: s.value}
			if o := m.sends[s.value]; o != nil {
				d.Send = max(o.complete, o.invoke)
			}
			byValue[s.value] = d
			order = append(order, s.value)
		}
		d.Positions = append(d.Positions, s.pos)
		d.Events = append(d.Events, s.event)
	}
	var out []Duplicate
	for _, v := range order {
		if d := byValue[v]; len(d.Positions) > 1 {
			out = append(out, *d)
		}
	}
	return out
}

// inconsistentOffsets finds the positions seen holding more than one
// value.
func inconsistentOffsets(m *model) []InconsistentOffset {
	byPos := map[Position]*InconsistentOffset{}
	var order []Position
	for _, s := range sightings(m) {
		io, ok := byPos[s.pos]
		if !ok {
			io = &InconsistentOffset{Position: s.pos}
			byPos[s.pos] = io
			order = append(order, s.pos)
		}
		io.Values = append(io.Values, s.value)
		io.Events = append(io.Events, s.event)
		if s.acked {
			io.Acked = append(io.Acked, s.value)
		}
	}
	var out []InconsistentOffset
	for _, p := range order {
		if io := byPos[p]; len(io.Values) > 1 {
			out = append(out, *io)
		}
	}
	return out
}

func comparePos(a, b Position) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
}
