package checker

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// NoFault is the key of Availability.Longest for windows during which no
// fault was active: the ones to worry about.
const NoFault = "none"

// Availability is one operation's periods without a success.
type Availability struct {
	// Windows are the periods longer than Options.UnavailableAfter with
	// no successful operation while some were attempted, in time order.
	Windows Found[Window]
	// Longest is the longest window per kind of fault active during it
	// (a window counts for every kind active), NoFault when none was.
	Longest map[string]time.Duration
	// Total is the windows' length added up.
	Total time.Duration
}

// Window is a period without a success. It starts at the success before it
// (or at the first attempt after it, when nothing was attempted in
// between) and ends at the next success (or when the last attempt ended,
// or the history did, for a pending one).
type Window struct {
	Start, End time.Time
	Length     time.Duration
	// LastOk is the ok event before the window, NextOk the one ending
	// it; 0 when there is none.
	LastOk, NextOk int64
	// Attempts is how many operations were invoked during the window.
	Attempts int
	// Faults are the faults active at some time of the window.
	Faults []ActiveFault
}

// ActiveFault is a fault active during a window.
type ActiveFault struct {
	Kind, Description string
	// Start is the fault's start event.
	Start int64
}

func (w Window) String() string {
	s := fmt.Sprintf("%v from %s to %s (after event %d, %d attempts)",
		w.Length.Round(time.Millisecond), w.Start.Format("15:04:05.000"), w.End.Format("15:04:05.000"), w.LastOk, w.Attempts)
	if len(w.Faults) == 0 {
		return s + "; no fault active"
	}
	fs := make([]string, len(w.Faults))
	for i, f := range w.Faults {
		fs[i] = fmt.Sprintf("%s %q (event %d)", f.Kind, f.Description, f.Start)
	}
	return s + "; during " + strings.Join(fs, ", ")
}

// availability finds the windows of operation f: the gaps between
// consecutive successes (by completion time) longer than the threshold in
// which some operation of f was attempted, clipped to the attempts.
func availability(h *hist, f history.Func, opts Options) Availability {
	ops := h.byF(f)
	av := Availability{Longest: map[string]time.Duration{}}
	if len(ops) == 0 {
		return av
	}
	var oks []*op
	for _, o := range ops {
		if o.ok() {
			oks = append(oks, o)
		}
	}
	slices.SortStableFunc(oks, func(a, b *op) int { return a.end.Compare(b.end) })
	// Attempts by start time, with the latest end among each prefix.
	byStart := slices.Clone(ops)
	slices.SortStableFunc(byStart, func(a, b *op) int { return a.start.Compare(b.start) })
	starts := make([]time.Time, len(byStart))
	maxEnd := make([]time.Time, len(byStart))
	for i, o := range byStart {
		starts[i] = o.start
		maxEnd[i] = o.end
		if i > 0 && maxEnd[i-1].After(o.end) {
			maxEnd[i] = maxEnd[i-1]
		}
	}
	// countBefore is how many attempts started before t (or at t, when
	// inclusive).
	countBefore := func(t time.Time, inclusive bool) int {
		n, _ := slices.BinarySearchFunc(starts, t, func(s, t time.Time) int {
			if s.Before(t) || (inclusive && s.Equal(t)) {
				return -1
			}
			return 1
		})
		return n
	}

	var windows []Window
	for i := 0; i <= len(oks); i++ {
		var prev, next *op
		if i > 0 {
			prev = oks[i-1]
		}
		if i < len(oks) {
			next = oks[i]
		}
		k := len(starts)
		if next != nil {
			k = countBefore(next.end, false)
		}
		if k == 0 || (prev != nil && !maxEnd[k-1].After(prev.end)) {
			continue // nothing attempted in the gap
		}
		var lo time.Time
		switch {
		case prev == nil:
			lo = starts[0]
		default:
			j := countBefore(prev.end, true)
			if j > 0 && maxEnd[j-1].After(prev.end) {
				lo = prev.end // an attempt was in flight across the success
			} else {
				lo = starts[j]
			}
		}
		hi := maxEnd[k-1]
		if next != nil && hi.After(next.end) {
			hi = next.end
		}
		if hi.Sub(lo) <= opts.UnavailableAfter {
			continue
		}
		w := Window{Start: lo, End: hi, Length: hi.Sub(lo),
			Attempts: countBefore(hi, true) - countBefore(lo, false), Faults: activeFaults(h, lo, hi)}
		if prev != nil {
			w.LastOk = prev.complete
		}
		if next != nil {
			w.NextOk = next.complete
		}
		windows = append(windows, w)
	}
	for _, w := range windows {
		av.Total += w.Length
		kinds := map[string]bool{}
		for _, f := range w.Faults {
			kinds[f.Kind] = true
		}
		if len(kinds) == 0 {
			kinds[NoFault] = true
		}
		for k := range kinds {
			av.Longest[k] = max(av.Longest[k], w.Length)
		}
	}
	av.Windows = firstOf(windows, opts.MaxListed)
	return av
}

// activeFaults returns the faults active at some time in [lo, hi].
func activeFaults(h *hist, lo, hi time.Time) []ActiveFault {
	var out []ActiveFault
	for _, f := range h.faults {
		if !f.from.After(hi) && !f.to.Before(lo) {
			out = append(out, ActiveFault{Kind: f.kind, Description: f.description, Start: f.start})
		}
	}
	return out
}
