package checker

import (
	"cmp"
	"slices"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// Options tune a check. The zero value is the defaults.
type Options struct {
	// UnavailableAfter is how long operations of one kind may go without
	// a success, while some are attempted, before the gap is reported as
	// an unavailability window. Zero or negative: 1s.
	UnavailableAfter time.Duration
	// MaxListed is how many of each anomaly a Result lists (the earliest
	// in the history); all are counted. Zero or negative: 20.
	MaxListed int
}

// Defaults of Options.
const (
	DefaultUnavailableAfter = time.Second
	DefaultMaxListed        = 20
)

func (o Options) withDefaults() Options {
	if o.UnavailableAfter <= 0 {
		o.UnavailableAfter = DefaultUnavailableAfter
	}
	if o.MaxListed <= 0 {
		o.MaxListed = DefaultMaxListed
	}
	return o
}

// Result is what a check found. Anomalies are counted in full and listed
// up to Options.MaxListed each, earliest first; the informational fields
// (Unread, RebalanceSkips, the availability reports) never make a result
// fail.
type Result struct {
	// Events is how many events the history holds.
	Events int
	// Ops counts operations by F and outcome (notes count as ok).
	Ops map[history.Func]Outcomes
	// Faults counts fault starts by kind.
	Faults map[string]int
	// Records is how many records ok polls returned, re-reads included.
	Records int

	LostWrites          Found[LostWrite]
	Duplicates          Found[Duplicate]
	InconsistentOffsets Found[InconsistentOffset]
	AbortedReads        Found[AbortedRead]
	VanishedReads       Found[VanishedRead]
	PhantomReads        Found[PhantomRead]
	NonmonotonicSends   Found[NonmonotonicSend]
	NonmonotonicPolls   Found[NonmonotonicPoll]
	PollSkips           Found[PollSkip]
	CommitsBackwards    Found[CommitBackwards]
	EffectDuplicates    Found[EffectDuplicate]
	EffectsMissing      Found[EffectMissing]
	EffectsWrong        Found[EffectWrong]
	StaleKeys           Found[CompactedKey]
	ResurrectedKeys     Found[CompactedKey]
	// The transactional anomalies (txn.go).
	TxnAbortedReads      Found[TxnRead]
	TxnIntermediateReads Found[TxnRead]
	TxnPartlyVisible     Found[TxnPartial]
	TxnLostCommits       Found[TxnPartial]
	TxnInputDuplicates   Found[TxnInput]
	TxnInputsMissing     Found[TxnInput]

	// Unread are acknowledged sends never read where no poll read as far
	// as their offset: not judged lost. The suite's final full read
	// normally leaves none.
	Unread Found[UnreadWrite]
	// RebalanceSkips counts polls that jumped over existing offsets of a
	// partition across an assignment change: allowed.
	RebalanceSkips int
	// Compaction is what the complete reads of compacted topics cover and
	// show the cleaner removed.
	Compaction Compaction
	// SendAvailability and PollAvailability are the periods without a
	// successful send, and poll, while some were attempted.
	SendAvailability Availability
	PollAvailability Availability
}

// Outcomes counts one operation's completions.
type Outcomes struct {
	Ok, Fail, Info int
	// Pending are invokes that never completed: indeterminate, like Info.
	Pending int
}

// Found is the anomalies of one kind: how many, and the first of them.
type Found[T any] struct {
	Count int
	First []T
}

// Ok reports whether the history shows no anomaly.
func (r Result) Ok() bool { return r.Anomalies() == 0 }

// Anomalies is how many anomalies of every kind the check found.
func (r Result) Anomalies() int {
	n := 0
	for _, row := range r.anomalyRows() {
		n += row.count
	}
	return n
}

// Check judges a history: h as recorded or read back, in any order (it is
// sorted by index). A history is judged as it is: an operation whose
// completion is missing is pending (indeterminate), and a completion whose
// invoke is missing stands as an operation of its own. Check never fails;
// a history that is not well formed yields what can be judged of it.
func Check(h []history.Event, opts Options) Result {
	opts = opts.withDefaults()
	hs := index(h)
	m := newModel(hs)
	res := Result{
		Events:  len(h),
		Ops:     hs.outcomes(),
		Faults:  hs.faultCounts(),
		Records: m.records,
	}
	limit := opts.MaxListed
	lost, unread := lostWrites(m)
	res.LostWrites, res.Unread = found(lost, limit), found(unread, limit)
	res.Duplicates = found(duplicates(m), limit)
	res.InconsistentOffsets = found(inconsistentOffsets(m), limit)
	aborted, phantom := abortedAndPhantomReads(m)
	res.AbortedReads, res.PhantomReads = found(aborted, limit), found(phantom, limit)
	res.NonmonotonicSends = found(nonmonotonicSends(hs), limit)
	pr := checkPolls(hs, m)
	res.NonmonotonicPolls = found(pr.nonmonotonic, limit)
	res.PollSkips = found(pr.skips, limit)
	res.RebalanceSkips = pr.rebalanceSkips
	res.VanishedReads = found(vanishedReads(m, pr.runs), limit)
	res.CommitsBackwards = found(commitsBackwards(hs), limit)
	edups, emissing, ewrong := effectAnomalies(hs, m)
	res.EffectDuplicates, res.EffectsMissing, res.EffectsWrong = found(edups, limit), found(emissing, limit), found(ewrong, limit)
	stale, resurrected, compaction := compactedKeys(m)
	res.StaleKeys, res.ResurrectedKeys, res.Compaction = found(stale, limit), found(resurrected, limit), compaction
	taborted, tinter, tpartial, tlost, tdups, tmissing := txnAnomalies(m)
	res.TxnAbortedReads, res.TxnIntermediateReads = found(taborted, limit), found(tinter, limit)
	res.TxnPartlyVisible, res.TxnLostCommits = found(tpartial, limit), found(tlost, limit)
	res.TxnInputDuplicates, res.TxnInputsMissing = found(tdups, limit), found(tmissing, limit)
	res.SendAvailability = availability(hs, history.FSend, opts)
	res.PollAvailability = availability(hs, history.FPoll, opts)
	return res
}

// anomaly is what found needs of a detail: the event that orders it.
type anomaly interface {
	at() int64
}

// found sorts all by the event that orders each and keeps the first limit.
func found[T anomaly](all []T, limit int) Found[T] {
	slices.SortStableFunc(all, func(a, b T) int { return cmp.Compare(a.at(), b.at()) })
	return firstOf(all, limit)
}

// firstOf counts all and keeps its first limit.
func firstOf[T any](all []T, limit int) Found[T] {
	f := Found[T]{Count: len(all)}
	if len(all) > 0 {
		f.First = slices.Clone(all[:min(limit, len(all))])
	}
	return f
}
