package checker

import (
	"fmt"
	"slices"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// NonmonotonicPoll is a consumer returning, for one partition, an offset
// at or below one it returned before, with no assignment change or seek of
// the partition in between.
type NonmonotonicPoll struct {
	Process string
	TP      history.TopicPartition
	// Prev is the offset returned before, Offset the one after it.
	Prev, Offset int64
	// PrevPoll and Poll are the ok events of the polls that returned
	// them (equal when WithinPoll).
	PrevPoll, Poll int64
	// WithinPoll: both came in one poll.
	WithinPoll bool
}

func (a NonmonotonicPoll) at() int64 { return a.Poll }

func (a NonmonotonicPoll) String() string {
	within := ""
	if a.WithinPoll {
		within = " in one poll"
	}
	return fmt.Sprintf("%s read %v offset %d (event %d) after %d (event %d)%s",
		a.Process, a.TP, a.Offset, a.Poll, a.Prev, a.PrevPoll, within)
}

// PollSkip is a consumer jumping, for one partition, over offsets that
// exist (some poll returned records there), with no assignment change or
// seek of the partition in between.
type PollSkip struct {
	Process string
	TP      history.TopicPartition
	// From is the offset returned before, To the next one returned.
	From, To int64
	// Skipped is how many existing offsets lie between them, FirstSkipped
	// the first.
	Skipped      int
	FirstSkipped int64
	// PrevPoll and Poll are the ok events of the polls that returned From
	// and To (equal when the skip is inside one poll).
	PrevPoll, Poll int64
}

func (a PollSkip) at() int64 { return a.Poll }

func (a PollSkip) String() string {
	return fmt.Sprintf("%s read %v offset %d (event %d) then %d (event %d), skipping %d existing offsets from %d",
		a.Process, a.TP, a.From, a.PrevPoll, a.To, a.Poll, a.Skipped, a.FirstSkipped)
}

// run is what one consumer read of one partition between two resets (an
// assignment change or seek of it): a contiguous read if all is well.
type run struct {
	process string
	tp      history.TopicPartition
	// start is the invoke index of the run's first poll.
	start int64
	// reads are the records returned, in order.
	reads    []runRead
	min, max int64
	// end is the first poll, after the run returned a record, whose
	// position reached the partition's end (Poll.AtEnd).
	end *op
}

type runRead struct {
	offset int64
	value  string
	poll   *op
}

// passedWithout returns the poll at which the run showed that offset o no
// longer held value: it returned another value there, or it started at or
// before o and reached the partition's end without getting to o. It
// returns nil when the run shows neither. A run that jumps over o, with
// records on both sides, shows a poll skip (reported as such) rather than a
// record gone.
func (r *run) passedWithout(o int64, value string) (poll *op, seen string) {
	if len(r.reads) == 0 || r.min > o {
		return nil, ""
	}
	for _, rd := range r.reads {
		if rd.offset == o && rd.value != value {
			return rd.poll, rd.value
		}
	}
	if o > r.max && r.end != nil {
		return r.end, ""
	}
	return nil, ""
}

func (r *run) add(rec history.Record, poll *op) {
	if len(r.reads) == 0 {
		r.min, r.max = rec.Offset, rec.Offset
	}
	r.min, r.max = min(r.min, rec.Offset), max(r.max, rec.Offset)
	r.reads = append(r.reads, runRead{offset: rec.Offset, value: rec.Value, poll: poll})
}

// pollResult is what checkPolls found.
type pollResult struct {
	nonmonotonic   []NonmonotonicPoll
	skips          []PollSkip
	rebalanceSkips int
	// runs are every consumer's runs, per partition, by start.
	runs map[history.TopicPartition][]*run
}

// cursor is where one consumer is in one partition.
type cursor struct {
	last     int64 // last offset returned
	lastPoll *op   // the poll that returned it
	run      *run
	// moved is set by a poll since lastPoll that shows the partition
	// reassigned: not in its Assigned list, or a new member id or a lower
	// member epoch than the poll before it.
	moved bool
}

// checkPolls follows each consumer through its polls, partition by
// partition, comparing each offset returned with the one before: lower or
// equal is a nonmonotonic poll, a jump over existing offsets is a skip,
// unless the partition was reassigned or sought in between (then a skip is
// only counted as a rebalance skip). In a compacted topic a jump over
// offsets is the cleaner's doing: only going backwards is judged there.
//
// "In between" two polls P1 and P2 is generous: an assign event of the
// process naming the partition (or naming none) anywhere after P1's invoke
// and before P2's completion, since a client may learn of a rebalance in
// the middle of a poll; and, for group members, a change of member id, a
// lower member epoch (the member was fenced and rejoined), or either poll's
// Assigned list lacking the partition.
func checkPolls(h *hist, m *model) pollResult {
	assigns := assignIndexes(h)
	res := pollResult{runs: map[history.TopicPartition][]*run{}}
	cursors := map[string]map[history.TopicPartition]*cursor{}
	prevPoll := map[string]*op{}
	newRun := func(proc string, tp history.TopicPartition, p *op) *run {
		r := &run{process: proc, tp: tp, start: p.invoke}
		res.runs[tp] = append(res.runs[tp], r)
		return r
	}
	for _, p := range m.polls {
		proc := p.process
		cs := cursors[proc]
		if cs == nil {
			cs = map[history.TopicPartition]*cursor{}
			cursors[proc] = cs
		}
		rejoined := prevPoll[proc] != nil && rejoinedGroup(prevPoll[proc].ev.Poll, p.ev.Poll)
		for tp, c := range cs {
			if rejoined || lacks(p.ev.Poll.Assigned, tp) {
				c.moved = true
			}
		}
		prevPoll[proc] = p
		moved := func(c *cursor, tp history.TopicPartition) bool {
			return c.moved || assignedBetween(assigns[proc], tp, c.lastPoll, p)
		}
		for _, rec := range p.ev.Poll.Records {
			tp := rec.TP()
			c := cs[tp]
			if c == nil {
				c = &cursor{run: newRun(proc, tp, p)}
				cs[tp] = c
			} else if c.lastPoll != p && moved(c, tp) {
				if n, _ := m.parts[tp].existingBetween(c.last, rec.Offset); rec.Offset > c.last && n > 0 && m.byRecord(tp.Topic) {
					res.rebalanceSkips++
				}
				c.run = newRun(proc, tp, p)
			} else if rec.Offset <= c.last {
				res.nonmonotonic = append(res.nonmonotonic, NonmonotonicPoll{Process: proc, TP: tp,
					Prev: c.last, Offset: rec.Offset, PrevPoll: c.lastPoll.complete, Poll: p.complete,
					WithinPoll: c.lastPoll == p})
			} else if n, first := m.parts[tp].existingBetween(c.last, rec.Offset); n > 0 && m.byRecord(tp.Topic) {
				res.skips = append(res.skips, PollSkip{Process: proc, TP: tp, From: c.last, To: rec.Offset,
					Skipped: n, FirstSkipped: first, PrevPoll: c.lastPoll.complete, Poll: p.complete})
			}
			c.run.add(rec, p)
			c.last, c.lastPoll, c.moved = rec.Offset, p, false
		}
		for _, tp := range p.ev.Poll.AtEnd {
			if c := cs[tp]; c != nil && c.run.end == nil && (c.lastPoll == p || !moved(c, tp)) {
				c.run.end = p
			}
		}
	}
	return res
}

// procAssigns are the indexes of one process's assign events, per
// partition named, and of those naming none (all partitions).
type procAssigns struct {
	byTP map[history.TopicPartition][]int64
	all  []int64
}

// assignIndexes collects every process's assign events that did not fail.
func assignIndexes(h *hist) map[string]*procAssigns {
	out := map[string]*procAssigns{}
	for _, o := range h.byF(history.FAssign) {
		if o.typ == history.Fail {
			continue
		}
		pa := out[o.process]
		if pa == nil {
			pa = &procAssigns{byTP: map[history.TopicPartition][]int64{}}
			out[o.process] = pa
		}
		a := o.ev.Assign
		if len(a.Assigned) == 0 && len(a.Revoked) == 0 {
			pa.all = append(pa.all, o.invoke)
			continue
		}
		for _, tp := range append(slices.Clone(a.Revoked), a.Assigned...) {
			if l := pa.byTP[tp]; len(l) == 0 || l[len(l)-1] != o.invoke {
				pa.byTP[tp] = append(l, o.invoke)
			}
		}
	}
	return out
}

// assignedBetween reports whether the process recorded an assign naming
// tp, or naming none, after p1's invoke and before p2's completion.
func assignedBetween(pa *procAssigns, tp history.TopicPartition, p1, p2 *op) bool {
	return pa != nil && (anyBetween(pa.byTP[tp], p1.invoke, p2.complete) || anyBetween(pa.all, p1.invoke, p2.complete))
}

// rejoinedGroup reports whether a group member's poll b, after its poll
// a, shows it joined anew: another member id, or a lower member epoch (a
// fenced member starts again from zero).
func rejoinedGroup(a, b *history.Poll) bool {
	return a.Group != "" && b.Group != "" && (a.Member != b.Member || b.Epoch < a.Epoch)
}

// lacks reports whether an assignment list is known and lacks tp.
func lacks(assigned []history.TopicPartition, tp history.TopicPartition) bool {
	return assigned != nil && !slices.Contains(assigned, tp)
}

// anyBetween reports whether sorted holds an index strictly between lo and
// hi.
func anyBetween(sorted []int64, lo, hi int64) bool {
	i, found := slices.BinarySearch(sorted, lo)
	if found {
		i++
	}
	return i < len(sorted) && sorted[i] < hi
}
