package checker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// EffectDuplicate is a record whose effect a sink wrote more than once.
type EffectDuplicate struct {
	Group    string
	Position Position
	Value    string
	Rows     int   // effect rows for the record
	Event    int64 // the effects note
}

func (a EffectDuplicate) at() int64 { return a.Event }

func (a EffectDuplicate) String() string {
	return fmt.Sprintf("group %s: %q at %v has %d effect rows (event %d)", a.Group, a.Value, a.Position, a.Rows, a.Event)
}

// EffectMissing is a record of a sink's topic, below the offset the sink
// had reached, with no effect row: skipped, or its effect lost.
type EffectMissing struct {
	Group    string
	Position Position
	Value    string
	Next     int64 // the sink's offset of the partition when it stopped
	Event    int64
}

func (a EffectMissing) at() int64 { return a.Event }

func (a EffectMissing) String() string {
	return fmt.Sprintf("group %s: %q at %v has no effect row, though the sink reached offset %d (event %d)", a.Group, a.Value, a.Position, a.Next, a.Event)
}

// EffectWrong is an effect row that matches no record of the log: its
// position held another value, or no poll returned a record there.
type EffectWrong struct {
	Group    string
	Position Position
	Value    string   // the row's value
	Log      []string // the values polls returned at the position; none when never read
	Event    int64
}

func (a EffectWrong) at() int64 { return a.Event }

func (a EffectWrong) String() string {
	return fmt.Sprintf("group %s: effect row %q at %v, where the log holds %q (event %d)", a.Group, a.Value, a.Position, a.Log, a.Event)
}

// effectAnomalies judges each sink's effects against the log as the
// polls saw it: one row per record, for every record of its topics below
// the offsets it reached, and none for anything else.
func effectAnomalies(h *hist, m *model) (dups []EffectDuplicate, missing []EffectMissing, wrong []EffectWrong) {
	for _, o := range h.byF(history.FEffects) {
		e := o.ev.Effects
		ev := o.ev.Index
		rows := map[Position]map[string]int{}
		for _, r := range e.Rows {
			pos := at(r.TP(), r.Offset)
			if rows[pos] == nil {
				rows[pos] = map[string]int{}
			}
			rows[pos][r.Value]++
		}
		for _, pos := range slices.SortedFunc(maps.Keys(rows), comparePos) {
			var log []string
			if p := m.parts[pos.TP()]; p != nil {
				for _, s := range p.at[pos.Offset] {
					log = append(log, s.value)
				}
			}
			for _, v := range sortedKeys(rows[pos]) {
				if !slices.Contains(log, v) {
					wrong = append(wrong, EffectWrong{Group: e.Group, Position: pos, Value: v, Log: log, Event: ev})
					continue
				}
				if n := rows[pos][v]; n > 1 {
					dups = append(dups, EffectDuplicate{Group: e.Group, Position: pos, Value: v, Rows: n, Event: ev})
				}
			}
		}
		for _, next := range e.Next {
			if !slices.Contains(e.Topics, next.Topic) {
				continue
			}
			p := m.parts[next.TP()]
			if p == nil {
				continue
			}
			for _, off := range p.offsets {
				if off >= next.Offset {
					break
				}
				pos := at(next.TP(), off)
				if len(rows[pos]) == 0 {
					missing = append(missing, EffectMissing{Group: e.Group, Position: pos, Value: p.at[off][0].value, Next: next.Offset, Event: ev})
				}
			}
		}
	}
	return dups, missing, wrong
}
