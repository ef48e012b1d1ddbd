package checker

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// CommitBackwards is a group's committed offset for a partition going
// backwards: an ok commit lower than an ok commit that completed before it
// was invoked, with no explicit reset of the partition in between.
type CommitBackwards struct {
	Group string
	TP    history.TopicPartition
	// Earlier is the higher commit, completed first; Later the lower.
	Earlier, Later CommitAt
}

// CommitAt is an ok commit of one partition.
type CommitAt struct {
	Process, Member string
	Epoch           int32
	Offset          int64
	// Invoke and Event are the commit's invoke and ok events.
	Invoke, Event int64
}

func (a CommitBackwards) at() int64 { return a.Later.Event }

func (a CommitBackwards) String() string {
	return fmt.Sprintf("group %s %v: %s (member %q epoch %d) committed %d (event %d), then %s (member %q epoch %d) committed %d (events %d-%d)",
		a.Group, a.TP, a.Earlier.Process, a.Earlier.Member, a.Earlier.Epoch, a.Earlier.Offset, a.Earlier.Event,
		a.Later.Process, a.Later.Member, a.Later.Epoch, a.Later.Offset, a.Later.Invoke, a.Later.Event)
}

// groupTP is one partition of one group.
type groupTP struct {
	group string
	tp    history.TopicPartition
}

// commitsBackwards walks the history in index (real-time) order. At each
// commit's invoke it notes, per partition, the highest ok commit completed
// so far; at the commit's ok it compares. A reset that did not fail starts
// its partitions afresh at its invoke, and exempts every commit in flight
// then: it may have been applied either side of the reset, so it is
// neither judged nor judged against.
func commitsBackwards(h *hist) []CommitBackwards {
	type point struct {
		index int64
		order int // at one index: resets, then invokes, then completions
		op    *op
	}
	var points []point
	for _, o := range h.byF(history.FCommit) {
		if o.ok() {
			points = append(points, point{o.invoke, 1, o}, point{o.complete, 2, o})
		}
	}
	for _, o := range h.byF(history.FReset) {
		if o.typ != history.Fail {
			points = append(points, point{o.invoke, 0, o})
		}
	}
	slices.SortStableFunc(points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.index, b.index), cmp.Compare(a.order, b.order))
	})

	type snapshot struct {
		best      *CommitAt
		gen, ggen int
	}
	best := map[groupTP]*CommitAt{}
	gen := map[groupTP]int{} // resets of one partition
	ggen := map[string]int{} // resets of a whole group
	snaps := map[*op]map[groupTP]snapshot{}
	var out []CommitBackwards
	for _, pt := range points {
		o := pt.op
		switch pt.order {
		case 0:
			r := o.ev.Reset
			if len(r.Offsets) == 0 {
				ggen[r.Group]++
				for k := range best {
					if k.group == r.Group {
						delete(best, k)
					}
				}
				continue
			}
			for _, po := range r.Offsets {
				k := groupTP{r.Group, po.TP()}
				gen[k]++
				delete(best, k)
			}
		case 1:
			c := o.ev.Commit
			s := map[groupTP]snapshot{}
			for _, po := range c.Offsets {
				k := groupTP{c.Group, po.TP()}
				s[k] = snapshot{best: best[k], gen: gen[k], ggen: ggen[c.Group]}
			}
			snaps[o] = s
		case 2:
			c := o.ev.Commit
			for _, po := range c.Offsets {
				k := groupTP{c.Group, po.TP()}
				this := &CommitAt{Process: o.process, Member: c.Member, Epoch: c.Epoch, Offset: po.Offset,
					Invoke: o.invoke, Event: o.complete}
				s := snaps[o][k]
				if s.gen != gen[k] || s.ggen != ggen[c.Group] {
					continue // in flight across a reset: either side of it
				}
				if s.best != nil && po.Offset < s.best.Offset {
					out = append(out, CommitBackwards{Group: c.Group, TP: k.tp, Earlier: *s.best, Later: *this})
				}
				if b := best[k]; b == nil || po.Offset > b.Offset {
					best[k] = this
				}
			}
			delete(snaps, o)
		}
	}
	return out
}
