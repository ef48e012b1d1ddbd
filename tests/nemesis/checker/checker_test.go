package checker

import (
	"maps"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// anomalyCase is a history and the anomalies it must show: want holds the
// non-zero counts, every other kind must be zero; check looks at details.
type anomalyCase struct {
	name  string
	build func(b *builder)
	want  map[string]int
	check func(t *testing.T, res Result)
}

func runCases(t *testing.T, cases []anomalyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b)
			res := b.check()
			want := map[string]int{}
			for k := range res.Counts() {
				want[k] = 0
			}
			maps.Copy(want, tc.want)
			if got := res.Counts(); !maps.Equal(got, want) {
				t.Fatalf("counts %v, want %v\n%v", got, want, res)
			}
			if res.Ok() != (len(tc.want) == 0) {
				t.Fatalf("Ok() = %v with counts %v", res.Ok(), res.Counts())
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

func TestCleanHistory(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "sent and read",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c1", r(0, 2, "c"))
		},
		check: func(t *testing.T, res Result) {
			if res.Records != 3 || res.Ops[history.FSend].Ok != 3 || res.Ops[history.FPoll].Ok != 2 {
				t.Fatalf("totals: %d records, ops %v", res.Records, res.Ops)
			}
			if res.Unread.Count != 0 || res.RebalanceSkips != 0 {
				t.Fatalf("unread %d, rebalance skips %d", res.Unread.Count, res.RebalanceSkips)
			}
		},
	}, {
		name:  "empty history",
		build: func(b *builder) {},
	}})
}

func TestLostWrites(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "acked, read past, never read",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 2, "c"))
		},
		want: map[string]int{KindLostWrite: 1},
		check: func(t *testing.T, res Result) {
			got := res.LostWrites.First[0]
			want := LostWrite{Key: "b", Value: "b", Position: Position{Topic: topic, Offset: 1}, Send: 4, ReadUpTo: 2}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("lost write %+v, want %+v", got, want)
			}
		},
	}, {
		name: "acked offset read holding another value",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.info("p", "x")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "x"))
		},
		want: map[string]int{KindLostWrite: 1, KindInconsistentOffset: 1},
		check: func(t *testing.T, res Result) {
			if l := res.LostWrites.First[0]; l.Value != "b" || !reflect.DeepEqual(l.SeenThere, []string{"x"}) {
				t.Fatalf("lost write %+v", l)
			}
			io := res.InconsistentOffsets.First[0]
			if io.Position.Offset != 1 || !reflect.DeepEqual(io.Values, []string{"b", "x"}) || !reflect.DeepEqual(io.Acked, []string{"b"}) {
				t.Fatalf("inconsistent offset %+v", io)
			}
		},
	}, {
		name: "not read as far as its offset: unread, not lost",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.sent("p", "d", 1, 0) // a partition nobody read
			b.poll("c1", r(0, 0, "a"))
		},
		check: func(t *testing.T, res Result) {
			if res.Unread.Count != 3 {
				t.Fatalf("unread %d, want 3: %v", res.Unread.Count, res.Unread.First)
			}
			if u := res.Unread.First[2]; u.Value != "d" || u.ReadUpTo != -1 {
				t.Fatalf("unread in an unread partition: %+v", u)
			}
		},
	}, {
		name: "the final read judges what earlier reads left unread",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"))
			b.pollToEnd("final", []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 2, "c"))
		},
		want: map[string]int{KindLostWrite: 1},
		check: func(t *testing.T, res Result) {
			if res.Unread.Count != 0 || res.LostWrites.First[0].Value != "b" {
				t.Fatalf("lost %v, unread %v", res.LostWrites.First, res.Unread.First)
			}
		},
	}, {
		name: "failed and indeterminate sends are never lost",
		build: func(b *builder) {
			b.sentAll("a")
			b.failed("p", "b")
			b.info("p", "c")
			b.send("p", "d", "d") // pending
			b.sent("p", "e", 0, 1)
			b.poll("c1", r(0, 0, "a"), r(0, 1, "e"))
		},
	}})
}

func TestDuplicatesAndOffsets(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "indeterminate send written twice",
		build: func(b *builder) {
			b.sentAll("a")
			b.info("p", "x")
			b.sent("p", "b", 0, 2)
			b.poll("c1", r(0, 0, "a"), r(0, 1, "x"), r(0, 2, "b"), r(0, 3, "x"))
		},
		want: map[string]int{KindDuplicate: 1},
		check: func(t *testing.T, res Result) {
			d := res.Duplicates.First[0]
			want := []Position{{Topic: topic, Offset: 1}, {Topic: topic, Offset: 3}}
			if d.Value != "x" || !reflect.DeepEqual(d.Positions, want) || d.Send != 4 {
				t.Fatalf("duplicate %+v", d)
			}
		},
	}, {
		name: "indeterminate send written once",
		build: func(b *builder) {
			b.info("p", "x")
			b.send("p", "y", "y") // pending, written
			b.poll("c1", r(0, 0, "x"), r(0, 1, "y"))
		},
		check: func(t *testing.T, res Result) {
			if res.Ops[history.FSend].Info != 1 || res.Ops[history.FSend].Pending != 1 {
				t.Fatalf("send outcomes %+v", res.Ops[history.FSend])
			}
		},
	}, {
		name: "acked at one offset, read at another",
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			b.poll("c1", r(0, 1, "a"))
		},
		want: map[string]int{KindDuplicate: 1},
		check: func(t *testing.T, res Result) {
			d := res.Duplicates.First[0]
			if len(d.Positions) != 2 || d.Positions[0].Offset != 0 || d.Events[0] != 2 || d.Events[1] != 4 {
				t.Fatalf("duplicate %+v: want the ack's position first, by event", d)
			}
		},
	}, {
		name: "one value in two partitions",
		build: func(b *builder) {
			b.info("p", "a")
			b.poll("c1", r(0, 0, "a"), r(1, 0, "a"))
		},
		want: map[string]int{KindDuplicate: 1},
	}, {
		name: "re-reading a record is no duplicate",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c2", r(0, 0, "a"), r(0, 1, "b"))
		},
	}, {
		name: "concurrent reads of one offset disagree",
		build: func(b *builder) {
			b.info("p", "a")
			b.info("p", "b")
			h1 := b.startPoll("c1")
			h2 := b.startPoll("c2")
			h1.PollOk(history.Poll{Records: []history.Record{r(0, 0, "a")}})
			h2.PollOk(history.Poll{Records: []history.Record{r(0, 0, "b")}})
		},
		want: map[string]int{KindInconsistentOffset: 1},
		check: func(t *testing.T, res Result) {
			io := res.InconsistentOffsets.First[0]
			if !reflect.DeepEqual(io.Values, []string{"a", "b"}) || !reflect.DeepEqual(io.Events, []int64{7, 8}) || len(io.Acked) != 0 {
				t.Fatalf("inconsistent offset %+v", io)
			}
		},
	}})
}

func TestReadsOfFailedAndGoneWrites(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "failed send read",
		build: func(b *builder) {
			b.failed("p", "a")
			b.poll("c1", r(0, 0, "a"))
		},
		want: map[string]int{KindAbortedRead: 1},
		check: func(t *testing.T, res Result) {
			want := AbortedRead{Value: "a", Position: Position{Topic: topic}, Send: 2, Read: 4, Process: "c1"}
			if got := res.AbortedReads.First[0]; got != want {
				t.Fatalf("aborted read %+v, want %+v", got, want)
			}
		},
	}, {
		name: "value no send wrote",
		build: func(b *builder) {
			b.poll("c1", r(0, 0, "z"))
		},
		want: map[string]int{KindPhantomRead: 1},
	}, {
		name: "served, then a later read of its offset holds another value",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.info("p", "x")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c2", r(0, 0, "a"), r(0, 1, "x"))
		},
		want: map[string]int{KindVanishedRead: 1, KindInconsistentOffset: 1},
		check: func(t *testing.T, res Result) {
			want := VanishedRead{Value: "b", Position: Position{Topic: topic, Offset: 1}, Served: 8,
				Later: 10, LaterProcess: "c2", SeenThere: "x"}
			if got := res.VanishedReads.First[0]; got != want {
				t.Fatalf("vanished read %+v, want %+v", got, want)
			}
		},
	}, {
		name: "served, then a complete read ends before it",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.pollToEnd("final", []history.TopicPartition{tp0}, r(0, 0, "a"))
		},
		want: map[string]int{KindVanishedRead: 1},
		check: func(t *testing.T, res Result) {
			v := res.VanishedReads.First[0]
			if v.Value != "b" || v.SeenThere != "" || v.LaterProcess != "final" {
				t.Fatalf("vanished read %+v", v)
			}
		},
	}, {
		name: "served, then a later read jumps over it: a skip, not a record gone",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"))
			b.pollToEnd("final", []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 2, "c"))
		},
		want: map[string]int{KindPollSkip: 1},
	}, {
		name: "a read starting after the offset does not judge it (retention)",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.pollToEnd("final", []history.TopicPartition{tp0}, r(0, 1, "b"))
		},
	}, {
		name: "a read that stops short without reaching the end does not judge it",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c2", r(0, 0, "a"))
		},
	}, {
		name: "a read concurrent with the serving one does not judge it",
		build: func(b *builder) {
			b.sentAll("a", "b")
			h := b.startPoll("late")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			h.PollOk(history.Poll{Records: []history.Record{r(0, 0, "a")}, AtEnd: []history.TopicPartition{tp0}})
		},
	}})
}

func TestNonmonotonicSends(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "one key's offsets go backwards",
		build: func(b *builder) {
			b.sent("p", "k1", 0, 5)
			b.sent("p", "k2", 0, 3)
			b.poll("c", r(0, 3, "k2"), r(0, 5, "k1"))
		},
		want: map[string]int{KindNonmonotonicSend: 1},
		check: func(t *testing.T, res Result) {
			want := NonmonotonicSend{Process: "p", Topic: topic, Key: "k",
				Prev: SendAt{Value: "k1", Offset: 5, Event: 2}, Next: SendAt{Value: "k2", Offset: 3, Event: 4}}
			if got := res.NonmonotonicSends.First[0]; got != want {
				t.Fatalf("nonmonotonic send %+v, want %+v", got, want)
			}
		},
	}, {
		name: "backwards in invocation order, whatever the completion order",
		build: func(b *builder) {
			h1 := b.send("p", "k", "k1")
			h2 := b.send("p", "k", "k2")
			h2.SendOk(0, 0)
			h1.SendOk(0, 1)
			b.poll("c", r(0, 0, "k2"), r(0, 1, "k1"))
		},
		want: map[string]int{KindNonmonotonicSend: 1},
	}, {
		name: "other partitions, processes and keys are not compared",
		build: func(b *builder) {
			b.sent("p", "k1", 0, 5)
			b.sent("p", "k2", 1, 0)
			b.sent("q", "k3", 0, 4)
			b.sent("p", "j1", 0, 3)
			b.poll("c", r(0, 3, "j1"), r(0, 4, "k3"), r(0, 5, "k1"), r(1, 0, "k2"))
		},
	}})
}

func TestNonmonotonicPollsAndSkips(t *testing.T) {
	// every writes and reads a log of partition 0, offsets 0 to 5, so
	// that every offset is known to exist.
	every := func(b *builder) {
		b.sentAll("a", "b", "c", "d", "e", "f")
		b.poll("all", r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"), r(0, 3, "d"), r(0, 4, "e"), r(0, 5, "f"))
	}
	runCases(t, []anomalyCase{{
		name: "a poll returns an offset already returned",
		build: func(b *builder) {
			every(b)
			b.poll("c", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c", r(0, 1, "b"), r(0, 2, "c"))
		},
		want: map[string]int{KindNonmonotonicPoll: 1},
		check: func(t *testing.T, res Result) {
			want := NonmonotonicPoll{Process: "c", TP: tp0, Prev: 1, Offset: 1, PrevPoll: 16, Poll: 18}
			if got := res.NonmonotonicPolls.First[0]; got != want {
				t.Fatalf("nonmonotonic poll %+v, want %+v", got, want)
			}
		},
	}, {
		name: "backwards inside one poll",
		build: func(b *builder) {
			every(b)
			b.poll("c", r(0, 0, "a"), r(0, 2, "c"), r(0, 1, "b"))
		},
		want: map[string]int{KindNonmonotonicPoll: 1, KindPollSkip: 1},
		check: func(t *testing.T, res Result) {
			if n := res.NonmonotonicPolls.First[0]; !n.WithinPoll || n.Prev != 2 || n.Offset != 1 {
				t.Fatalf("nonmonotonic poll %+v", n)
			}
		},
	}, {
		name: "a seek between polls allows going back",
		build: func(b *builder) {
			every(b)
			b.poll("c", r(0, 0, "a"), r(0, 1, "b"))
			b.assign("c", nil, []history.TopicPartition{tp0})
			b.poll("c", r(0, 0, "a"))
		},
	}, {
		name: "a seek of another partition does not",
		build: func(b *builder) {
			every(b)
			b.poll("c", r(0, 0, "a"), r(0, 1, "b"))
			b.assign("c", nil, []history.TopicPartition{tp1})
			b.poll("c", r(0, 0, "a"))
		},
		want: map[string]int{KindNonmonotonicPoll: 1},
	}, {
		name: "a poll jumps over existing offsets",
		build: func(b *builder) {
			every(b)
			b.poll("c", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c", r(0, 4, "e"))
		},
		want: map[string]int{KindPollSkip: 1},
		check: func(t *testing.T, res Result) {
			want := PollSkip{Process: "c", TP: tp0, From: 1, To: 4, Skipped: 2, FirstSkipped: 2, PrevPoll: 16, Poll: 18}
			if got := res.PollSkips.First[0]; got != want {
				t.Fatalf("poll skip %+v, want %+v", got, want)
			}
		},
	}, {
		name: "a gap no read shows records in is no skip",
		build: func(b *builder) {
			b.sentAll("a")
			b.sent("p", "e", 0, 4) // offsets 1 to 3 compacted away
			b.poll("c", r(0, 0, "a"))
			b.poll("c", r(0, 4, "e"))
		},
	}, {
		name: "a skip across a rebalance is allowed",
		build: func(b *builder) {
			every(b)
			b.memberPoll("m1", "m1", 3, []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 1, "b"))
			b.assign("m1", []history.TopicPartition{tp0}, nil)
			b.assign("m1", nil, []history.TopicPartition{tp0})
			b.memberPoll("m1", "m1", 5, []history.TopicPartition{tp0}, r(0, 4, "e"))
		},
		check: func(t *testing.T, res Result) {
			if res.RebalanceSkips != 1 {
				t.Fatalf("rebalance skips %d, want 1", res.RebalanceSkips)
			}
		},
	}, {
		name: "a rebalance learned of during the poll counts",
		build: func(b *builder) {
			every(b)
			b.memberPoll("m1", "m1", 3, []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 1, "b"))
			h := b.rec.Invoke("m1", history.PollOp("g", "m1"))
			b.assign("m1", nil, []history.TopicPartition{tp0})
			h.PollOk(history.Poll{Epoch: 4, Assigned: []history.TopicPartition{tp0}, Records: []history.Record{r(0, 0, "a")}})
		},
	}, {
		name: "a member fenced and back with a lower epoch starts afresh",
		build: func(b *builder) {
			every(b)
			b.memberPoll("m1", "m1", 7, []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 1, "b"))
			b.memberPoll("m1", "m1", 1, []history.TopicPartition{tp0}, r(0, 4, "e"))
		},
		check: func(t *testing.T, res Result) {
			if res.RebalanceSkips != 1 {
				t.Fatalf("rebalance skips %d, want 1", res.RebalanceSkips)
			}
		},
	}, {
		name: "a partition missing from the poll's assignment starts afresh",
		build: func(b *builder) {
			every(b)
			b.memberPoll("m1", "m1", 3, []history.TopicPartition{tp0, tp1}, r(0, 0, "a"), r(0, 1, "b"))
			b.memberPoll("m1", "m1", 4, []history.TopicPartition{tp1})
			b.memberPoll("m1", "m1", 5, []history.TopicPartition{tp0}, r(0, 0, "a"))
		},
	}, {
		name: "a higher epoch that kept the partition does not",
		build: func(b *builder) {
			every(b)
			b.memberPoll("m1", "m1", 3, []history.TopicPartition{tp0}, r(0, 0, "a"), r(0, 1, "b"))
			b.memberPoll("m1", "m1", 4, []history.TopicPartition{tp0, tp1}, r(0, 4, "e"))
		},
		want: map[string]int{KindPollSkip: 1},
	}, {
		name: "each consumer is followed on its own",
		build: func(b *builder) {
			every(b)
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.poll("c2", r(0, 0, "a"))
			b.poll("c1", r(0, 2, "c"))
			b.poll("c2", r(0, 1, "b"))
		},
	}})
}

func TestCommitsBackwards(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "a commit lower than one completed before it",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.committed("m2", 5)
		},
		want: map[string]int{KindCommitBackwards: 1},
		check: func(t *testing.T, res Result) {
			c := res.CommitsBackwards.First[0]
			if c.Group != "g" || c.TP != tp0 || c.Earlier.Offset != 10 || c.Earlier.Event != 2 ||
				c.Later.Offset != 5 || c.Later.Process != "m2" || c.Later.Invoke != 3 || c.Later.Event != 4 {
				t.Fatalf("commit backwards %+v", c)
			}
		},
	}, {
		name: "compared with the highest so far",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.committed("m1", 12)
			b.committed("m2", 11)
		},
		want: map[string]int{KindCommitBackwards: 1},
		check: func(t *testing.T, res Result) {
			if c := res.CommitsBackwards.First[0]; c.Earlier.Offset != 12 {
				t.Fatalf("compared with %d, want 12", c.Earlier.Offset)
			}
		},
	}, {
		name: "concurrent commits are not ordered",
		build: func(b *builder) {
			h1 := b.commit("m1", 10)
			h2 := b.commit("m2", 5)
			h1.Ok(history.Op{})
			h2.Ok(history.Op{})
		},
	}, {
		name: "failed and indeterminate commits are not judged",
		build: func(b *builder) {
			b.commit("m1", 20).Info(errTimeout)
			b.committed("m1", 10)
			b.commit("m2", 5).Fail(nil)
			b.commit("m2", 6) // pending
		},
	}, {
		name: "an explicit reset of the partition allows it",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.reset(false).Ok(history.Op{})
			b.committed("m2", 5)
		},
	}, {
		name: "an explicit reset of the whole group allows it",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.reset(true).Ok(history.Op{})
			b.committed("m2", 5)
			b.committed("m2", 3)
		},
		want: map[string]int{KindCommitBackwards: 1},
		check: func(t *testing.T, res Result) {
			if c := res.CommitsBackwards.First[0]; c.Earlier.Offset != 5 || c.Later.Offset != 3 {
				t.Fatalf("judged against %+v, want the commit after the reset", c.Earlier)
			}
		},
	}, {
		name: "a commit in flight across a reset is neither judged nor judged against",
		build: func(b *builder) {
			b.committed("m1", 10)
			h := b.commit("m1", 8)
			b.reset(false).Ok(history.Op{})
			h.Ok(history.Op{})
			b.committed("m2", 2)
		},
	}, {
		name: "a commit in flight across a reset of the whole group likewise",
		build: func(b *builder) {
			b.committed("m1", 10)
			h := b.commit("m1", 8)
			b.reset(true).Ok(history.Op{})
			h.Ok(history.Op{})
			b.committed("m2", 2)
		},
	}, {
		name: "a failed reset does not",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.reset(false).Fail(nil)
			b.committed("m2", 5)
		},
		want: map[string]int{KindCommitBackwards: 1},
	}, {
		name: "other groups and partitions are apart",
		build: func(b *builder) {
			b.committed("m1", 10)
			b.rec.Invoke("m2", history.CommitOp("g", "m2", 1, history.PartitionOffset{Topic: topic, Partition: 1, Offset: 5})).Ok(history.Op{})
			b.rec.Invoke("m3", history.CommitOp("other", "m3", 1, history.PartitionOffset{Topic: topic, Offset: 5})).Ok(history.Op{})
		},
	}})
}

func TestResultString(t *testing.T) {
	b := newBuilder()
	b.sentAll("a", "b", "c")
	b.rec.StartFault(history.FaultKill, "node 2")
	b.poll("c1", r(0, 0, "a"), r(0, 2, "c"))
	res := b.check()
	s := res.String()
	for _, want := range []string{
		`history: 9 events, 2 records polled\n`,
		`\nsend +3 +0 +0 +0\n`,
		`\nfaults: kill 1\n`,
		`\nlost-write +1\n`,
		`\npoll-skip +0\n`,
		`\nsend unavailable: 0 windows, 0s in all\n`,
		`\nlost-write \(1, first 1\):\n  value "b" \(key "b"\) acked at t-0@1 \(event 4\), never read; partition read up to 2\n`,
		`\nFAIL: 1 anomalies\n$`,
	} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("summary lacks %s:\n%s", want, s)
		}
	}
	if s := newBuilder().check().String(); !strings.Contains(s, "ok: no anomaly") {
		t.Errorf("clean summary:\n%s", s)
	}
}

func TestMaxListed(t *testing.T) {
	b := newBuilder()
	var recs []history.Record
	for i := range 30 {
		v := string(rune('A'+i)) + "v"
		b.failed("p", v)
		recs = append(recs, r(0, int64(i), v))
	}
	b.poll("c", recs...)
	for _, tc := range []struct {
		opts Options
		want int
	}{{Options{}, DefaultMaxListed}, {Options{MaxListed: 3}, 3}, {Options{MaxListed: 100}, 30}} {
		res := Check(b.rec.Events(), tc.opts)
		if res.AbortedReads.Count != 30 || len(res.AbortedReads.First) != tc.want {
			t.Fatalf("%+v: count %d, listed %d; want 30, %d", tc.opts, res.AbortedReads.Count, len(res.AbortedReads.First), tc.want)
		}
		if first := res.AbortedReads.First[0]; first.Value != "Av" {
			t.Fatalf("first listed %q, want the earliest", first.Value)
		}
	}
}
