package checker

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// The anomaly names of the summary table.
const (
	KindLostWrite          = "lost-write"
	KindDuplicate          = "duplicate"
	KindInconsistentOffset = "inconsistent-offset"
	KindAbortedRead        = "aborted-read"
	KindVanishedRead       = "vanished-read"
	KindPhantomRead        = "phantom-read"
	KindNonmonotonicSend   = "nonmonotonic-send"
	KindNonmonotonicPoll   = "nonmonotonic-poll"
	KindPollSkip           = "poll-skip"
	KindCommitBackwards    = "commit-backwards"
	KindEffectDuplicate    = "effect-duplicate"
	KindEffectMissing      = "effect-missing"
	KindEffectWrong        = "effect-wrong"
	KindStaleKey           = "stale-key"
	KindResurrectedKey     = "resurrected-key"
	KindTxnAbortedRead     = "txn-aborted-read"
	KindTxnIntermediate    = "txn-intermediate-read"
	KindTxnPartlyVisible   = "txn-partly-visible"
	KindTxnLostCommit      = "txn-lost-commit"
	KindTxnInputDuplicate  = "txn-input-duplicate"
	KindTxnInputMissing    = "txn-input-missing"
)

// row is one anomaly kind of the summary.
type row struct {
	kind    string
	count   int
	details []string
}

func (r Result) anomalyRows() []row {
	return []row{
		{KindLostWrite, r.LostWrites.Count, lines(r.LostWrites.First)},
		{KindDuplicate, r.Duplicates.Count, lines(r.Duplicates.First)},
		{KindInconsistentOffset, r.InconsistentOffsets.Count, lines(r.InconsistentOffsets.First)},
		{KindAbortedRead, r.AbortedReads.Count, lines(r.AbortedReads.First)},
		{KindVanishedRead, r.VanishedReads.Count, lines(r.VanishedReads.First)},
		{KindPhantomRead, r.PhantomReads.Count, lines(r.PhantomReads.First)},
		{KindNonmonotonicSend, r.NonmonotonicSends.Count, lines(r.NonmonotonicSends.First)},
		{KindNonmonotonicPoll, r.NonmonotonicPolls.Count, lines(r.NonmonotonicPolls.First)},
		{KindPollSkip, r.PollSkips.Count, lines(r.PollSkips.First)},
		{KindCommitBackwards, r.CommitsBackwards.Count, lines(r.CommitsBackwards.First)},
		{KindEffectDuplicate, r.EffectDuplicates.Count, lines(r.EffectDuplicates.First)},
		{KindEffectMissing, r.EffectsMissing.Count, lines(r.EffectsMissing.First)},
		{KindEffectWrong, r.EffectsWrong.Count, lines(r.EffectsWrong.First)},
		{KindStaleKey, r.StaleKeys.Count, lines(r.StaleKeys.First)},
		{KindResurrectedKey, r.ResurrectedKeys.Count, lines(r.ResurrectedKeys.First)},
		{KindTxnAbortedRead, r.TxnAbortedReads.Count, lines(r.TxnAbortedReads.First)},
		{KindTxnIntermediate, r.TxnIntermediateReads.Count, lines(r.TxnIntermediateReads.First)},
		{KindTxnPartlyVisible, r.TxnPartlyVisible.Count, lines(r.TxnPartlyVisible.First)},
		{KindTxnLostCommit, r.TxnLostCommits.Count, lines(r.TxnLostCommits.First)},
		{KindTxnInputDuplicate, r.TxnInputDuplicates.Count, lines(r.TxnInputDuplicates.First)},
		{KindTxnInputMissing, r.TxnInputsMissing.Count, lines(r.TxnInputsMissing.First)},
	}
}

// Counts returns the number of anomalies per kind (the Kind* names).
func (r Result) Counts() map[string]int {
	out := map[string]int{}
	for _, row := range r.anomalyRows() {
		out[row.kind] = row.count
	}
	return out
}

func lines[T fmt.Stringer](l []T) []string {
	out := make([]string, len(l))
	for i, a := range l {
		out[i] = a.String()
	}
	return out
}

// String is a report for a person: totals, a table of anomalies, the
// availability windows, then the first anomalies of each kind found.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d events, %d records polled\n", r.Events, r.Records)
	fmt.Fprintf(&b, "%-10s %8s %8s %8s %8s\n", "operation", "ok", "fail", "info", "pending")
	for _, f := range []history.Func{history.FSend, history.FPoll, history.FCommit, history.FAssign, history.FReset, history.FEffects, history.FTxn} {
		o := r.Ops[f]
		fmt.Fprintf(&b, "%-10s %8d %8d %8d %8d\n", f, o.Ok, o.Fail, o.Info, o.Pending)
	}
	fmt.Fprintf(&b, "faults: %s\n", countsLine(r.Faults))
	if r.Compaction != (Compaction{}) {
		fmt.Fprintf(&b, "compacted topics: %v\n", r.Compaction)
	}
	b.WriteString("\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "anomaly\tcount")
	for _, row := range r.anomalyRows() {
		fmt.Fprintf(tw, "%s\t%d\n", row.kind, row.count)
	}
	fmt.Fprintf(tw, "unread (info)\t%d\n", r.Unread.Count)
	fmt.Fprintf(tw, "rebalance-skip (info)\t%d\n", r.RebalanceSkips)
	tw.Flush()
	for _, a := range []struct {
		what string
		av   Availability
	}{{"send", r.SendAvailability}, {"poll", r.PollAvailability}} {
		fmt.Fprintf(&b, "%s unavailable: %d windows, %v in all", a.what, a.av.Windows.Count, a.av.Total.Round(time.Millisecond))
		if len(a.av.Longest) > 0 {
			fmt.Fprintf(&b, "; longest by fault: %s", durationsLine(a.av.Longest))
		}
		b.WriteString("\n")
		for _, w := range a.av.Windows.First {
			fmt.Fprintf(&b, "  %v\n", w)
		}
	}

	details := [][]string{}
	for _, row := range r.anomalyRows() {
		if row.count > 0 {
			details = append(details, append([]string{fmt.Sprintf("%s (%d, first %d):", row.kind, row.count, len(row.details))}, row.details...))
		}
	}
	if r.Unread.Count > 0 {
		details = append(details, append([]string{fmt.Sprintf("unread (%d, first %d):", r.Unread.Count, len(r.Unread.First))}, lines(r.Unread.First)...))
	}
	for _, d := range details {
		fmt.Fprintf(&b, "\n%s\n", d[0])
		for _, l := range d[1:] {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	if n := r.Anomalies(); n > 0 {
		fmt.Fprintf(&b, "\nFAIL: %d anomalies\n", n)
	} else {
		b.WriteString("\nok: no anomaly\n")
	}
	return b.String()
}

func countsLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func durationsLine(m map[string]time.Duration) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// quoteAll formats values for a detail line.
func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
