package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// TestMalformedHistories gives Check histories that history.Read would
// reject: Check must judge what it can and never panic.
func TestMalformedHistories(t *testing.T) {
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	send := func(v string, p int32, o int64) history.Op {
		return history.Op{F: history.FSend, Send: &history.Send{Topic: topic, Key: "k", Value: v, Partition: p, Offset: o}}
	}
	poll := func(recs ...history.Record) history.Op {
		return history.Op{F: history.FPoll, Poll: &history.Poll{Records: recs}}
	}
	cases := []struct {
		name   string
		events []history.Event
		check  func(t *testing.T, res Result)
	}{{
		name: "payloads missing",
		events: []history.Event{
			{Index: 1, Time: at(1), Process: "p", Type: history.Invoke, Op: history.Op{F: history.FSend}},
			{Index: 2, Time: at(2), Process: "p", Type: history.Ok, Invoke: 1, Op: history.Op{F: history.FSend}},
			{Index: 3, Time: at(3), Process: "c", Type: history.Ok, Op: history.Op{F: history.FPoll}},
			{Index: 4, Time: at(4), Process: "c", Type: history.Ok, Op: history.Op{F: history.FCommit}},
			{Index: 5, Time: at(5), Process: "nemesis", Type: history.Ok, Op: history.Op{F: history.FFault}},
			{Index: 6, Time: at(6), Process: "c", Type: history.Ok, Op: history.Op{F: history.FAssign}},
			{Index: 7, Time: at(7), Process: "c", Type: history.Ok, Op: history.Op{F: history.FReset}},
		},
		check: func(t *testing.T, res Result) {
			if res.Ops[history.FSend].Ok != 1 || !res.Ok() {
				t.Fatalf("ops %v, anomalies %v", res.Ops, res.Counts())
			}
		},
	}, {
		name: "completions of nothing, out of order, twice",
		events: []history.Event{
			{Index: 9, Time: at(9), Process: "c", Type: history.Ok, Invoke: 8, Op: poll(r(0, 0, "a"))},
			{Index: 3, Time: at(3), Process: "p", Type: history.Ok, Invoke: 1, Op: send("a", 0, 0)},
			{Index: 1, Time: at(1), Process: "p", Type: history.Invoke, Op: send("a", -1, -1)},
			{Index: 4, Time: at(4), Process: "p", Type: history.Fail, Invoke: 1, Op: send("a", -1, -1)},
			{Index: 5, Time: at(5), Process: "p", Type: "", Op: send("b", 0, 7)},
		},
		check: func(t *testing.T, res Result) {
			if res.Events != 5 || res.Ops[history.FSend].Ok != 1 {
				t.Fatalf("events %d, ops %v", res.Events, res.Ops)
			}
		},
	}, {
		name: "offsets and partitions out of range",
		events: []history.Event{
			{Index: 1, Time: at(1), Process: "p", Type: history.Ok, Op: send("a", -3, 5)},
			{Index: 2, Time: at(2), Process: "p", Type: history.Ok, Op: send("b", 0, -9)},
			{Index: 3, Time: at(3), Process: "c", Type: history.Ok, Op: poll(r(0, -1, "a"), r(-2, 1<<62, "b"), r(0, -1, "a"))},
			{Index: 4, Time: at(0), Process: "c", Type: history.Ok, Op: history.Op{F: history.FFault,
				Fault: &history.Fault{Kind: "kill", Phase: history.FaultStop, Start: 99}}},
		},
		check: func(t *testing.T, res Result) {
			if res.Records != 3 || res.NonmonotonicPolls.Count != 1 || len(res.Faults) != 0 {
				t.Fatalf("records %d, nonmonotonic polls %d, faults %v", res.Records, res.NonmonotonicPolls.Count, res.Faults)
			}
		},
	}, {
		name: "no times at all",
		events: []history.Event{
			{Index: 1, Process: "p", Type: history.Invoke, Op: send("a", -1, -1)},
			{Index: 2, Process: "p", Type: history.Info, Invoke: 1, Op: send("a", -1, -1)},
		},
		check: func(t *testing.T, res Result) {
			if res.Ops[history.FSend].Info != 1 || res.SendAvailability.Windows.Count != 0 {
				t.Fatalf("ops %v, windows %v", res.Ops, res.SendAvailability.Windows)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.events, Options{})
			if s := res.String(); !strings.HasPrefix(s, "history: ") {
				t.Fatalf("summary:\n%s", s)
			}
			tc.check(t, res)
		})
	}
}
