package checker

import (
	"errors"
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// txnSent records a send of value in transaction id, acknowledged at
// partition 0 and offset.
func (b *builder) txnSent(proc, id, value string, offset int64) {
	op := history.SendOp(topic, value[:1], value)
	op.Send.Txn = id
	b.rec.Invoke(proc, op).SendOk(0, offset)
}

// endTxn invokes the end of transaction id (a commit or an abort) and
// leaves it open.
func (b *builder) endTxn(proc, id string, commit bool) *history.Handle {
	return b.rec.Invoke(proc, history.TxnOp(history.Txn{ID: id, Commit: commit}))
}

// committedPoll records a read_committed poll returning recs.
func (b *builder) committedPoll(proc string, recs ...history.Record) {
	b.rec.Invoke(proc, history.PollOp("", "")).PollOk(history.Poll{Records: recs, Committed: true})
}

// txnCounts is the transactional anomalies of res, by kind.
func txnCounts(res Result) map[string]int {
	out := map[string]int{}
	for k, n := range res.Counts() {
		if n > 0 {
			out[k] = n
		}
	}
	return out
}

// TestTxnClean: committed transactions read whole by read_committed
// consumers, an aborted one never, and a read_uncommitted consumer
// reading the aborted records too: no anomaly, and none of the record
// rules fires on the aborted records a committed read passed over.
func TestTxnClean(t *testing.T) {
	b := newBuilder()
	b.txnSent("p", "p/1", "a1", 0)
	b.txnSent("p", "p/1", "a2", 1)
	b.endTxn("p", "p/1", true).Ok(history.Op{})
	b.txnSent("p", "p/2", "b1", 3)
	b.endTxn("p", "p/2", false).Ok(history.Op{})
	b.txnSent("p", "p/3", "c1", 5)
	b.endTxn("p", "p/3", true).Ok(history.Op{})
	b.poll("u", r(0, 0, "a1"), r(0, 1, "a2"), r(0, 3, "b1"), r(0, 5, "c1"))
	b.committedPoll("c", r(0, 0, "a1"), r(0, 1, "a2"), r(0, 5, "c1"))
	res := b.check()
	if !res.Ok() {
		t.Fatalf("a clean transactional history: %v", res)
	}
}

// TestTxnAnomalies: each transactional anomaly, alone.
func TestTxnAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder)
		want  string
	}{
		{"aborted read", func(b *builder) {
			b.txnSent("p", "p/1", "a1", 0)
			b.endTxn("p", "p/1", false).Ok(history.Op{})
			b.committedPoll("c", r(0, 0, "a1"))
		}, KindTxnAbortedRead},
		{"aborted read of a commit refused", func(b *builder) {
			b.txnSent("p", "p/1", "a1", 0)
			b.endTxn("p", "p/1", true).Fail(errors.New("producer fenced"))
			b.committedPoll("c", r(0, 0, "a1"))
		}, KindTxnAbortedRead},
		{"intermediate read", func(b *builder) {
			b.txnSent("p", "p/1", "a1", 0)
			b.committedPoll("c", r(0, 0, "a1"))
			b.endTxn("p", "p/1", true).Ok(history.Op{})
		}, KindTxnIntermediate},
		{"partly visible", func(b *builder) {
			b.txnSent("p", "p/1", "a1", 0)
			b.txnSent("p", "p/1", "a2", 1)
			b.endTxn("p", "p/1", true).Ok(history.Op{})
			b.sent("q", "z1", 0, 3)
			b.committedPoll("c", r(0, 0, "a1"), r(0, 3, "z1"))
		}, KindTxnPartlyVisible},
		{"lost commit", func(b *builder) {
			b.txnSent("p", "p/1", "a1", 0)
			b.endTxn("p", "p/1", true).Ok(history.Op{})
			b.sent("q", "z1", 0, 2)
			b.committedPoll("c", r(0, 2, "z1"))
		}, KindTxnLostCommit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b)
			res := b.check()
			if got := txnCounts(res); len(got) != 1 || got[tc.want] != 1 {
				t.Fatalf("anomalies %v; want one %s\n%v", got, tc.want, res)
			}
		})
	}
}

// TestTxnUnknownEndNotJudged: a transaction whose end is unknown may have
// committed or aborted: a committed read of it after the end was asked,
// or none at all, is no anomaly.
func TestTxnUnknownEndNotJudged(t *testing.T) {
	b := newBuilder()
	b.txnSent("p", "p/1", "a1", 0)
	b.endTxn("p", "p/1", true).Info(errTimeout)
	b.txnSent("p", "p/2", "b1", 2)
	b.endTxn("p", "p/2", true).Info(errTimeout)
	b.sent("q", "z1", 0, 4)
	b.committedPoll("c", r(0, 0, "a1"), r(0, 4, "z1"))
	if res := b.check(); !res.Ok() {
		t.Fatalf("unknown ends: %v", res)
	}
}

// TestTxnInputs: consume-transform-produce transactions must transform
// every input record below the group's committed offset exactly once.
func TestTxnInputs(t *testing.T) {
	in := func(offsets ...int64) []history.PartitionOffset {
		var out []history.PartitionOffset
		for _, o := range offsets {
			out = append(out, history.PartitionOffset{Topic: topic, Partition: 1, Offset: o})
		}
		return out
	}
	pipeline := func(b *builder, id string, inputs []history.PartitionOffset, next int64, out string, at int64) {
		b.txnSent("x", id, out, at)
		b.rec.Invoke("x", history.TxnOp(history.Txn{ID: id, Commit: true, Group: "etl", Inputs: inputs,
			Offsets: []history.PartitionOffset{{Topic: topic, Partition: 1, Offset: next}}})).Ok(history.Op{})
	}
	for _, tc := range []struct {
		name  string
		build func(b *builder)
		want  map[string]int
	}{
		{"each input once", func(b *builder) {
			pipeline(b, "x/1", in(0, 1), 2, "o1", 0)
			pipeline(b, "x/2", in(2), 3, "o2", 2)
		}, map[string]int{}},
		{"an input twice", func(b *builder) {
			pipeline(b, "x/1", in(0, 1), 2, "o1", 0)
			pipeline(b, "x/2", in(1, 2), 3, "o2", 2)
		}, map[string]int{KindTxnInputDuplicate: 1}},
		{"an input never", func(b *builder) {
			pipeline(b, "x/1", in(0), 2, "o1", 0)
			pipeline(b, "x/2", in(2), 3, "o2", 2)
		}, map[string]int{KindTxnInputMissing: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			for i, v := range []string{"i0", "i1", "i2"} {
				b.sent("src", v, 1, int64(i))
			}
			tc.build(b)
			b.committedPoll("c", r(0, 0, "o1"), r(0, 2, "o2"))
			res := b.check()
			got := txnCounts(res)
			delete(got, KindLostWrite) // the input records are not read back here
			if len(got) != len(tc.want) {
				t.Fatalf("anomalies %v; want %v\n%v", got, tc.want, res)
			}
			for k, n := range tc.want {
				if got[k] != n {
					t.Fatalf("anomalies %v; want %v\n%v", got, tc.want, res)
				}
			}
		})
	}
}
