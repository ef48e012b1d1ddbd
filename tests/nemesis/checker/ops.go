package checker

import (
	"cmp"
	"slices"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// op is one operation: an invoke and its completion paired, or a note.
type op struct {
	process string
	f       history.Func
	// typ is the outcome: Ok, Fail or Info; a pending op is Info.
	typ     history.Type
	pending bool
	// invoke and complete are event indexes; a note has both equal to its
	// own index, a pending op has complete 0.
	invoke, complete int64
	// start and end are the invoke and completion times; end is the
	// history's last time for a pending op.
	start, end time.Time
	// ev is the completion (the invoke while pending, the note itself):
	// its payload holds the result.
	ev history.Event
}

func (o *op) ok() bool { return o.typ == history.Ok }

// fault is one fault's span, from its start to its stop or the end of the
// history.
type fault struct {
	kind, description string
	start             int64 // index of the start event
	from, to          time.Time
}

// hist is a history indexed for the detectors.
type hist struct {
	ops    []*op // in invoke order
	faults []fault
	last   time.Time // the latest event time
}

// index pairs completions with their invokes and fault stops with their
// starts.
func index(events []history.Event) *hist {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b history.Event) int { return cmp.Compare(a.Index, b.Index) })
	h := &hist{}
	for _, ev := range evs {
		if ev.Time.After(h.last) {
			h.last = ev.Time
		}
	}
	open := map[int64]*op{}
	starts := map[int64]int{} // fault start index -> h.faults position
	for _, ev := range evs {
		switch {
		case ev.F == history.FFault && ev.Fault != nil:
			switch ev.Fault.Phase {
			case history.FaultStart:
				starts[ev.Index] = len(h.faults)
				h.faults = append(h.faults, fault{kind: ev.Fault.Kind, description: ev.Fault.Description,
					start: ev.Index, from: ev.Time, to: h.last})
			case history.FaultStop:
				if i, ok := starts[ev.Fault.Start]; ok {
					h.faults[i].to = ev.Time
					delete(starts, ev.Fault.Start)
				}
			}
		case ev.Type == history.Invoke:
			o := &op{process: ev.Process, f: ev.F, typ: history.Info, pending: true,
				invoke: ev.Index, start: ev.Time, end: h.last, ev: ev}
			open[ev.Index] = o
			h.ops = append(h.ops, o)
		default:
			if o, ok := open[ev.Invoke]; ok && ev.Invoke != 0 {
				delete(open, ev.Invoke)
				o.typ, o.pending, o.complete, o.end, o.ev = ev.Type, false, ev.Index, ev.Time, ev
				continue
			}
			// A note, or a completion whose invoke is missing: an
			// operation of its own, at one point in time.
			h.ops = append(h.ops, &op{process: ev.Process, f: ev.F, typ: ev.Type,
				invoke: ev.Index, complete: ev.Index, start: ev.Time, end: ev.Time, ev: ev})
		}
	}
	return h
}

// outcomes counts operations by F and outcome.
func (h *hist) outcomes() map[history.Func]Outcomes {
	out := map[history.Func]Outcomes{}
	for _, o := range h.ops {
		c := out[o.f]
		switch {
		case o.pending:
			c.Pending++
		case o.typ == history.Ok:
			c.Ok++
		case o.typ == history.Fail:
			c.Fail++
		default:
			c.Info++
		}
		out[o.f] = c
	}
	return out
}

// faultCounts counts fault starts by kind.
func (h *hist) faultCounts() map[string]int {
	out := map[string]int{}
	for _, f := range h.faults {
		out[f.kind]++
	}
	return out
}

// byF returns the operations of f that carry f's payload, in invoke
// order.
func (h *hist) byF(f history.Func) []*op {
	var out []*op
	for _, o := range h.ops {
		if o.f == f && hasPayload(o.ev) {
			out = append(out, o)
		}
	}
	return out
}

// hasPayload reports whether ev carries the payload its F names: a history
// given to Check unread may not.
func hasPayload(ev history.Event) bool {
	switch ev.F {
	case history.FSend:
		return ev.Send != nil
	case history.FPoll:
		return ev.Poll != nil
	case history.FCommit:
		return ev.Commit != nil
	case history.FAssign:
		return ev.Assign != nil
	case history.FReset:
		return ev.Reset != nil
	case history.FEffects:
		return ev.Effects != nil
	case history.FTopic:
		return ev.Topic != nil
	case history.FTxn:
		return ev.Txn != nil
	}
	return false
}
