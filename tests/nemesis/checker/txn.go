package checker

import (
	"fmt"
	"slices"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// The transactional rules. A transaction's records (sends naming it,
// Send.Txn) count once it commits and never once it aborts; a consumer
// that reads committed records (Poll.Committed, Kafka's read_committed)
// must see each committed transaction whole and nothing else of any
// transaction. The anomalies, in the terms of Adya's and Jepsen's
// analyses:
//
//   - aborted read (G1a): a committed read returned a record of an aborted
//     transaction;
//   - intermediate read (G1b, a read of a transaction's writes before it
//     ended): a committed read that completed before the producer even
//     asked to commit returned one of its records;
//   - partly visible: committed reads returned some records of a
//     committed transaction and passed over others (read their partition
//     beyond their offset without them);
//   - lost commit: a committed transaction none of whose records any
//     committed read returned, though committed reads passed over them;
//   - for consume-transform-produce (Txn.Inputs): an input record
//     transformed by two committed transactions (not exactly once), or
//     one below the group's committed offset that no committed
//     transaction transformed (not at all).
//
// A transaction whose end is unknown (info, pending, or never asked) is
// not judged, except that its records may not be read by a committed read
// before the producer asked to end it.

// txnState is what the history says became of a transaction.
type txnState int

const (
	txnUnknown txnState = iota
	txnCommitted
	txnAborted
)

// txnInfo is one transaction: its end and its sends.
type txnInfo struct {
	id    string
	state txnState
	// end is the FTxn op; nil when the history has none.
	end   *op
	sends []*op
}

// TxnRead is a committed read of a transaction's record that must not
// have happened: an aborted read, or an intermediate read.
type TxnRead struct {
	Txn, Value string
	Position   Position
	// End is the transaction's end event (its completion for an aborted
	// read, its invoke for an intermediate read); Read the ok event of the
	// poll, by Process.
	End, Read int64
	Process   string
	kind      string
}

func (a TxnRead) at() int64 { return a.Read }

func (a TxnRead) String() string {
	return fmt.Sprintf("%s read %q of transaction %s at %v (event %d), %s (event %d)",
		a.Process, a.Value, a.Txn, a.Position, a.Read, a.kind, a.End)
}

// TxnPartial is a committed transaction committed reads saw only part of,
// or none of (a lost commit).
type TxnPartial struct {
	Txn string
	// Commit is the transaction's ok end event.
	Commit int64
	// Read are the values committed reads returned; Missed the positions
	// of its records they passed over without returning them.
	Read   []string
	Missed []Position
}

func (a TxnPartial) at() int64 { return a.Commit }

func (a TxnPartial) String() string {
	if len(a.Read) == 0 {
		return fmt.Sprintf("transaction %s committed (event %d), but committed reads passed over all its records %v", a.Txn, a.Commit, a.Missed)
	}
	return fmt.Sprintf("transaction %s committed (event %d): committed reads returned %s but passed over %v", a.Txn, a.Commit, quoteAll(a.Read), a.Missed)
}

// TxnInput is an input record of a consume-transform-produce pipeline not
// transformed exactly once by committed transactions.
type TxnInput struct {
	Group    string
	Position Position
	// Txns are the committed transactions that transformed it: two or
	// more (a duplicate), or none although the group committed past it.
	Txns []string
	// Event orders the anomaly: the last of those transactions' commits,
	// or the commit that moved past the record.
	Event int64
}

func (a TxnInput) at() int64 { return a.Event }

func (a TxnInput) String() string {
	if len(a.Txns) == 0 {
		return fmt.Sprintf("group %s committed past input %v (event %d), which no committed transaction transformed", a.Group, a.Position, a.Event)
	}
	return fmt.Sprintf("group %s: input %v transformed by %d committed transactions %v", a.Group, a.Position, len(a.Txns), a.Txns)
}

// txnAnomalies judges the transactions of h.
func txnAnomalies(m *model) (aborted, intermediate []TxnRead, partial, lostCommits []TxnPartial, inputDups, inputsMissing []TxnInput) {
	txns := transactions(m.h)
	if len(txns) == 0 {
		return
	}
	// Each value's transaction.
	of := map[string]*txnInfo{}
	for _, t := range txns {
		for _, s := range t.sends {
			of[s.ev.Send.Value] = t
		}
	}
	// What committed reads returned, in completion order: each value
	// judged at the first such read, and how far they read each
	// partition.
	read := map[string]bool{}
	maxRead := map[history.TopicPartition]int64{}
	for _, p := range m.polls {
		if !p.ev.Poll.Committed {
			continue
		}
		for _, r := range p.ev.Poll.Records {
			if v, ok := maxRead[r.TP()]; !ok || r.Offset > v {
				maxRead[r.TP()] = r.Offset
			}
			if read[r.Value] {
				continue
			}
			read[r.Value] = true
			t := of[r.Value]
			if t == nil {
				continue
			}
			a := TxnRead{Txn: t.id, Value: r.Value, Position: at(r.TP(), r.Offset), Read: p.complete, Process: p.process}
			switch {
			case t.state == txnAborted:
				a.End, a.kind = t.end.complete, "which aborted"
				aborted = append(aborted, a)
			case t.end == nil:
				a.kind = "which its producer never asked to end"
				intermediate = append(intermediate, a)
			case p.complete < t.end.invoke:
				a.End, a.kind = t.end.invoke, "before its producer asked to end it"
				intermediate = append(intermediate, a)
			}
		}
	}
	for _, t := range txns {
		if t.state != txnCommitted {
			continue
		}
		var seen []string
		var missed []Position
		for _, s := range t.sends {
			snd := s.ev.Send
			if read[snd.Value] {
				seen = append(seen, snd.Value)
				continue
			}
			if !s.ok() || snd.Partition < 0 || snd.Offset < 0 {
				continue
			}
			tp := history.TopicPartition{Topic: snd.Topic, Partition: snd.Partition}
			if v, ok := maxRead[tp]; ok && v > snd.Offset {
				missed = append(missed, at(tp, snd.Offset))
			}
		}
		if len(missed) == 0 {
			continue
		}
		a := TxnPartial{Txn: t.id, Commit: t.end.complete, Read: seen, Missed: missed}
		if len(seen) == 0 {
			lostCommits = append(lostCommits, a)
		} else {
			partial = append(partial, a)
		}
	}
	inputDups, inputsMissing = txnInputs(m, txns)
	return
}

// transactions gathers the transactions of h, by id, in the order of
// their first send.
func transactions(h *hist) []*txnInfo {
	byID := map[string]*txnInfo{}
	var out []*txnInfo
	get := func(id string) *txnInfo {
		t := byID[id]
		if t == nil {
			t = &txnInfo{id: id}
			byID[id] = t
			out = append(out, t)
		}
		return t
	}
	for _, o := range h.byF(history.FSend) {
		if id := o.ev.Send.Txn; id != "" {
			t := get(id)
			t.sends = append(t.sends, o)
		}
	}
	for _, o := range h.byF(history.FTxn) {
		t := get(o.ev.Txn.ID)
		t.end = o
		switch {
		case o.ok() && o.ev.Txn.Commit:
			t.state = txnCommitted
		case o.ok(), o.typ == history.Fail && !o.pending:
			t.state = txnAborted
		}
	}
	return out
}

// txnInputs judges consume-transform-produce: every input record below
// its group's committed offset transformed by exactly one committed
// transaction. The input records are the acknowledged sends of the input
// partitions (committed ones, for a transactional input topic).
func txnInputs(m *model, txns []*txnInfo) (dups, missing []TxnInput) {
	type key struct {
		group string
		pos   Position
	}
	by := map[key][]string{}
	last := map[key]int64{}
	committedTo := map[string]map[history.TopicPartition]history.PartitionOffset{}
	commitEvent := map[string]map[history.TopicPartition]int64{}
	for _, t := range txns {
		if t.state != txnCommitted || t.end.ev.Txn.Group == "" {
			continue
		}
		g := t.end.ev.Txn.Group
		for _, in := range t.end.ev.Txn.Inputs {
			k := key{group: g, pos: at(in.TP(), in.Offset)}
			by[k] = append(by[k], t.id)
			last[k] = max(last[k], t.end.complete)
		}
		if committedTo[g] == nil {
			committedTo[g] = map[history.TopicPartition]history.PartitionOffset{}
			commitEvent[g] = map[history.TopicPartition]int64{}
		}
		for _, po := range t.end.ev.Txn.Offsets {
			if cur, ok := committedTo[g][po.TP()]; !ok || po.Offset > cur.Offset {
				committedTo[g][po.TP()] = po
				commitEvent[g][po.TP()] = t.end.complete
			}
		}
	}
	for k, ids := range by {
		if len(ids) > 1 {
			dups = append(dups, TxnInput{Group: k.group, Position: k.pos, Txns: ids, Event: last[k]})
		}
	}
	// The input records: acknowledged sends, counting a transactional
	// one only once its transaction committed.
	state := map[string]txnState{}
	for _, t := range txns {
		state[t.id] = t.state
	}
	for g, tps := range committedTo {
		for tp, po := range tps {
			p := m.parts[tp]
			if p == nil {
				continue
			}
			offs := make([]int64, 0, len(p.acked))
			for off := range p.acked {
				offs = append(offs, off)
			}
			slices.Sort(offs)
			for _, off := range offs {
				if off >= po.Offset {
					break
				}
				counts := slices.ContainsFunc(p.acked[off], func(o *op) bool {
					id := o.ev.Send.Txn
					return id == "" || state[id] == txnCommitted
				})
				if !counts {
					continue
				}
				if len(by[key{group: g, pos: at(tp, off)}]) == 0 {
					missing = append(missing, TxnInput{Group: g, Position: at(tp, off), Event: commitEvent[g][tp]})
				}
			}
		}
	}
	return dups, missing
}
