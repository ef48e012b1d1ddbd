package checker

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

func TestCompactedKeys(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "newest values read, older ones compacted away",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("k", "a2", 1)
			b.wrote("j", "b1", 2)
			b.wrote("k", "a3", 3)
			// A consumer served everything; a later one found 0 and 1
			// gone: neither a poll skip, a vanished read nor a lost write
			// in a compacted topic.
			b.poll("c1", cr(0, "k", "a1"), cr(1, "k", "a2"), cr(2, "j", "b1"))
			b.poll("c2", cr(1, "k", "a2"))
			b.poll("c2", cr(3, "k", "a3"))
			b.readWhole(0, cr(2, "j", "b1"), cr(3, "k", "a3"))
		},
		check: func(t *testing.T, res Result) {
			want := Compaction{Partitions: 1, Keys: 2, Acked: 4, Read: 2, Removed: 2}
			if res.Compaction != want {
				t.Fatalf("compaction %+v, want %+v", res.Compaction, want)
			}
			if res.Unread.Count != 0 || res.RebalanceSkips != 0 {
				t.Fatalf("unread %d, rebalance skips %d", res.Unread.Count, res.RebalanceSkips)
			}
			if s := res.String(); !strings.Contains(s, "\ncompacted topics: 1 partitions read whole (0 unread), 2 records read, 2 keys judged (0 sent by several processes, not judged); 4 acked records covered, 2 removed by the cleaner;") {
				t.Fatalf("summary lacks the compaction figures:\n%s", s)
			}
		},
	}, {
		name: "a deleted key with its tombstone gone",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.del("k", "t1", 1)
			b.wrote("j", "b1", 2)
			b.readWhole(0, cr(2, "j", "b1"))
		},
		check: func(t *testing.T, res Result) {
			c := res.Compaction
			if c.Deleted != 1 || c.DeletedGone != 1 || c.Tombstones != 1 || c.TombstonesRemoved != 1 || c.Removed != 2 {
				t.Fatalf("compaction %+v", c)
			}
		},
	}, {
		name: "a deleted key with its tombstone still there",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.del("k", "t1", 1)
			b.readWhole(0, ct(1, "k", "t1"))
		},
		check: func(t *testing.T, res Result) {
			if c := res.Compaction; c.Deleted != 1 || c.DeletedGone != 0 || c.TombstonesRemoved != 0 {
				t.Fatalf("compaction %+v", c)
			}
		},
	}, {
		name: "a later send of unknown outcome shown",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.put("k", "a2", false).Info(errTimeout)
			b.put("k", "t3", true) // pending
			b.readWhole(0, cr(1, "k", "a2"))
		},
	}, {
		name: "a later tombstone of unknown outcome shown, or its removal",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.put("k", "t2", true).Info(errTimeout)
			b.wrote("j", "b1", 2)
			b.readWhole(0, cr(2, "j", "b1"))
		},
		want: map[string]int{KindStaleKey: 1},
		check: func(t *testing.T, res Result) {
			// A tombstone of unknown outcome may have deleted the key,
			// but the read cannot tell its removal from a1 lost: the
			// newest acknowledged write is a value, so its absence is
			// stale.
			if a := res.StaleKeys.First[0]; a.Key != "k" || a.Shown != nil {
				t.Fatalf("stale key %+v", a)
			}
		},
	}, {
		name: "a later failed send shown is an aborted read, not a stale key",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.put("k", "a2", false).Fail(errTimeout)
			b.readWhole(0, cr(1, "k", "a2"))
		},
		want: map[string]int{KindAbortedRead: 1},
	}, {
		name: "a key with no acknowledged write is not judged",
		build: func(b *builder) {
			b.compactedTopic()
			b.put("k", "a1", false).Info(errTimeout)
			b.put("j", "b1", false).Info(errTimeout)
			b.readWhole(0, cr(0, "k", "a1"))
		},
		check: func(t *testing.T, res Result) {
			if res.Compaction.Keys != 0 {
				t.Fatalf("compaction %+v", res.Compaction)
			}
		},
	}, {
		name: "a send acknowledged after the read began is not the newest",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			h := b.put("k", "a2", false)
			b.startWhole("final", 0)
			h.SendOk(0, 1)
			b.pollToEnd("final", []history.TopicPartition{ctp0}, cr(0, "k", "a1"))
		},
		check: func(t *testing.T, res Result) {
			if c := res.Compaction; c.Keys != 1 || c.Acked != 1 {
				t.Fatalf("compaction %+v", c)
			}
		},
	}, {
		name: "partitions without a whole read are not judged",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("k", "a2", 1)
			b.poll("c1", cr(1, "k", "a2"))
			// Set to read from 0, but it never reached the end.
			b.startWhole("final", 0)
			b.poll("final", cr(1, "k", "a2"))
			// Reached the end, but the position was the client's.
			b.pollToEnd("c2", []history.TopicPartition{ctp0}, cr(0, "k", "a1"))
		},
		check: func(t *testing.T, res Result) {
			if c := res.Compaction; c.Partitions != 0 || c.Unread != 1 || c.Keys != 0 {
				t.Fatalf("compaction %+v", c)
			}
			if res.Unread.Count != 0 {
				t.Fatalf("unread %v: compacted topics are not lost-write's", res.Unread.First)
			}
		},
	}, {
		name: "a key sent by two processes is not judged",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.rec.Invoke("q", history.SendOp(compacted, "k", "a2")).SendOk(0, 1)
			b.readWhole(0, cr(0, "k", "a1"))
		},
		check: func(t *testing.T, res Result) {
			if c := res.Compaction; c.Shared != 1 || c.Keys != 0 {
				t.Fatalf("compaction %+v", c)
			}
		},
	}, {
		name: "topics without compact in their cleanup.policy are judged record by record",
		build: func(b *builder) {
			b.rec.Note("admin", history.TopicOp(history.Topic{Name: topic, Partitions: 1,
				Configs: map[string]string{"cleanup.policy": "delete"}}))
			b.sentAll("a", "b")
			b.pollToEnd("c1", []history.TopicPartition{tp0}, r(0, 1, "b"))
		},
		want: map[string]int{KindLostWrite: 1},
	}, {
		name: "an older value shown",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("k", "a2", 1)
			b.readWhole(0, cr(0, "k", "a1"))
		},
		want: map[string]int{KindStaleKey: 1},
		check: func(t *testing.T, res Result) {
			got := res.StaleKeys.First[0]
			// Events: 1 topic note, 2-3 a1, 4-5 a2, 6 assign, 7-8 poll.
			want := CompactedKey{Topic: compacted, Key: "k", Newest: KeyWrite{Value: "a2", Offset: 1, Event: 5},
				Shown: &KeyRecord{Value: "a1", Offset: 0, Poll: 8, Send: 3}, From: 0, End: 8, Reader: "final"}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("stale key %+v %+v, want %+v %+v", got, got.Shown, want, want.Shown)
			}
			if s := got.String(); s != `key "k" in c-0: newest acked write "a2" at 1 (event 5); final read from 0 to the end (event 8) shows "a1" at 0 (poll event 8, send event 3)` {
				t.Fatalf("detail: %s", s)
			}
		},
	}, {
		name: "the newest value missing",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("j", "b1", 1)
			b.readWhole(0, cr(1, "j", "b1"))
		},
		want: map[string]int{KindStaleKey: 1},
		check: func(t *testing.T, res Result) {
			if a := res.StaleKeys.First[0]; a.Key != "k" || a.Shown != nil || !strings.HasSuffix(a.String(), "shows no record of the key") {
				t.Fatalf("stale key %v", a)
			}
		},
	}, {
		name: "the log start moved past the newest value",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("j", "b1", 1)
			b.readWhole(1, cr(1, "j", "b1"))
		},
		want: map[string]int{KindStaleKey: 1},
	}, {
		name: "an earlier send of unknown outcome shown over the newest acknowledged one",
		build: func(b *builder) {
			b.compactedTopic()
			b.put("k", "a1", false).Info(errTimeout)
			b.wrote("k", "a2", 1)
			b.readWhole(0, cr(2, "k", "a1"))
		},
		want: map[string]int{KindStaleKey: 1},
	}, {
		name: "a later send shown below the newest acknowledged offset",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 5)
			b.put("k", "a2", false).Info(errTimeout)
			b.readWhole(0, cr(3, "k", "a2"))
		},
		want: map[string]int{KindStaleKey: 1},
	}, {
		name: "an older tombstone shown over the newest one",
		build: func(b *builder) {
			b.compactedTopic()
			b.del("k", "t1", 0)
			b.wrote("k", "a2", 1)
			b.del("k", "t3", 2)
			b.readWhole(0, ct(0, "k", "t1"))
		},
		want: map[string]int{KindStaleKey: 1},
	}, {
		name: "a deleted key come back",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.wrote("k", "a2", 1)
			b.del("k", "t3", 2)
			b.wrote("j", "b1", 3)
			b.readWhole(0, cr(1, "k", "a2"), cr(3, "j", "b1"))
		},
		want: map[string]int{KindResurrectedKey: 1},
		check: func(t *testing.T, res Result) {
			a := res.ResurrectedKeys.First[0]
			if a.Newest.Value != "t3" || !a.Newest.Tombstone || a.Shown == nil || a.Shown.Value != "a2" {
				t.Fatalf("resurrected key %+v %+v", a, a.Shown)
			}
			if !strings.Contains(a.String(), `newest acked write tombstone "t3" at 2`) {
				t.Fatalf("detail: %s", a)
			}
			if c := res.Compaction; c.Deleted != 1 || c.DeletedGone != 0 {
				t.Fatalf("compaction %+v", c)
			}
		},
	}, {
		name: "the last whole read judges",
		build: func(b *builder) {
			b.compactedTopic()
			b.wrote("k", "a1", 0)
			b.readWhole(0, cr(0, "k", "a1"))
			b.wrote("k", "a2", 1)
			b.readWhole(0, cr(0, "k", "a1"))
		},
		want: map[string]int{KindStaleKey: 1},
	}})
}

// simCompactedLog is a correct compacted log of one partition: a cleaner
// removes every record a newer one of its key shadows, and a tombstone
// once it has been the newest of its key for horizon appends, and never
// touches the last active records (the active segment).
type simCompactedLog struct {
	mu   sync.Mutex
	recs []history.Record // present, by offset
	next int64
}

const (
	simActive  = 8  // records at the end the cleaner leaves alone
	simHorizon = 30 // appends after which a newest tombstone goes
)

func (l *simCompactedLog) append(key, value string, tombstone bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	off := l.next
	l.next++
	l.recs = append(l.recs, history.Record{Topic: compacted, Offset: off, Key: key, Value: value, Tombstone: tombstone})
	return off
}

func (l *simCompactedLog) clean() {
	l.mu.Lock()
	defer l.mu.Unlock()
	newest := map[string]int64{}
	for _, r := range l.recs {
		newest[r.Key] = r.Offset
	}
	limit := l.next - simActive
	l.recs = slices.DeleteFunc(l.recs, func(r history.Record) bool {
		if r.Offset >= limit {
			return false
		}
		return newest[r.Key] > r.Offset || r.Tombstone && l.next-r.Offset > simHorizon
	})
}

// read returns up to n records at or after from, the position after them
// and whether it reached the end.
func (l *simCompactedLog) read(from int64, n int) ([]history.Record, int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.recs, from, func(r history.Record, o int64) int { return cmp.Compare(r.Offset, o) })
	recs := slices.Clone(l.recs[i:min(i+n, len(l.recs))])
	pos := from
	if len(recs) > 0 {
		pos = recs[len(recs)-1].Offset + 1
	}
	return recs, pos, pos >= l.next
}

// simulateCompacted runs a producer overwriting and deleting ten keys, a
// plain consumer following the partition, and the cleaner now and then;
// then the final read of the partition from offset 0. The consumer is
// served records the cleaner removes later, and skips records removed
// before it got to them; the final read skips what the consumer read.
func simulateCompacted(rec *history.Recorder) {
	log := &simCompactedLog{}
	rec.Note("admin", history.TopicOp(history.Topic{Name: compacted, Partitions: 1,
		Configs: map[string]string{"cleanup.policy": "compact"}}))
	var pos int64 // the reader's
	for i := range 600 {
		// Ten keys, each overwritten every ten sends, until k9 is
		// deleted at send 97 and never written again; k10 written once,
		// at send 4, so the final read starts there.
		k := i * 7 % 10
		if k == 9 && i > 97 {
			k = i % 9
		}
		if i == 4 {
			k = 10
		}
		key := fmt.Sprintf("k%d", k)
		tombstone := i%6 == 5 || i == 97
		value := fmt.Sprintf("v%d", i)
		op := history.SendOp(compacted, key, value)
		if tombstone {
			op = history.TombstoneOp(compacted, key, value)
		}
		h := rec.Invoke("producer", op)
		switch i % 11 {
		case 1: // appended, the answer lost
			log.append(key, value, tombstone)
			h.Info(errSim)
		case 2: // lost before appending
			h.Info(errSim)
		default:
			h.SendOk(0, log.append(key, value, tombstone))
		}
		// The reader keeps up, but for sends 200 to 299, whose records it
		// partly never gets to.
		if i%3 == 2 && (i < 200 || i >= 300) {
			h := rec.Invoke("reader", history.PollOp("", ""))
			recs, next, _ := log.read(pos, 3)
			pos = next
			h.PollOk(history.Poll{Records: recs})
		}
		if i%20 == 19 {
			log.clean()
		}
	}
	log.clean()
	rec.Note("final", history.AssignOp(history.Assign{Assigned: []history.TopicPartition{ctp0},
		Offsets: []history.PartitionOffset{{Topic: compacted}}}))
	for pos := int64(0); ; {
		h := rec.Invoke("final", history.PollOp("", ""))
		recs, next, end := log.read(pos, 5)
		pos = next
		p := history.Poll{Records: recs}
		if end {
			p.AtEnd = []history.TopicPartition{ctp0}
		}
		h.PollOk(p)
		if end {
			return
		}
	}
}

// TestCompactedSimulation checks the history of a correct compacted log,
// whose consumers see records removed under them, and then damages its
// final read as a broken cleaner would: each damage must be found.
func TestCompactedSimulation(t *testing.T) {
	rec := history.NewRecorder(nil)
	simulateCompacted(rec)
	clean := rec.Events()
	res := Check(clean, Options{})
	if !res.Ok() || res.Unread.Count != 0 {
		t.Fatalf("a correct compacted log's history fails the check:\n%v", res)
	}
	c := res.Compaction
	if c.Keys != 11 || c.Removed == 0 || c.TombstonesRemoved == 0 || c.DeletedGone == 0 || c.Read >= c.Acked {
		t.Fatalf("the simulation compacted too little to judge: %+v", c)
	}

	// The final read's last record of each key, and an older value of a
	// key it shows deleted for good.
	var finalPolls []int
	last := map[string][2]int{} // key -> final poll event position, record position
	for i, ev := range clean {
		if ev.Process == "final" && ev.Type == history.Ok && ev.F == history.FPoll {
			finalPolls = append(finalPolls, i)
			for j, r := range ev.Poll.Records {
				last[r.Key] = [2]int{i, j}
			}
		}
	}
	var gone history.Record
	for _, ev := range clean {
		if ev.Type == history.Ok && ev.F == history.FSend && !ev.Send.Tombstone {
			if _, shown := last[ev.Send.Key]; !shown {
				gone = history.Record{Topic: compacted, Offset: ev.Send.Offset, Key: ev.Send.Key, Value: ev.Send.Value}
			}
		}
	}
	acked := map[string]bool{}
	for _, ev := range clean {
		if ev.Type == history.Ok && ev.F == history.FSend {
			acked[ev.Send.Value] = true
		}
	}
	var value [2]int // a key's newest value, acknowledged
	for _, at := range last {
		if r := clean[at[0]].Poll.Records[at[1]]; !r.Tombstone && acked[r.Value] {
			value = at
			break
		}
	}
	if gone.Value == "" || value[0] == 0 {
		t.Fatalf("nothing to damage: %+v %v", gone, value)
	}

	cases := []struct {
		name   string
		damage func(evs []history.Event)
		kind   string
	}{{
		name: "a key's newest value removed",
		damage: func(evs []history.Event) {
			p := evs[value[0]].Poll
			p.Records = slices.Delete(p.Records, value[1], value[1]+1)
		},
		kind: KindStaleKey,
	}, {
		name: "an older value of a deleted key kept",
		damage: func(evs []history.Event) {
			p := evs[finalPolls[0]].Poll
			i, _ := slices.BinarySearchFunc(p.Records, gone.Offset, func(r history.Record, o int64) int { return cmp.Compare(r.Offset, o) })
			p.Records = slices.Insert(p.Records, i, gone)
		},
		kind: KindResurrectedKey,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs := slices.Clone(clean)
			for i := range evs {
				if evs[i].Poll != nil {
					p := *evs[i].Poll
					p.Records = slices.Clone(p.Records)
					evs[i].Poll = &p
				}
			}
			tc.damage(evs)
			res := Check(evs, Options{})
			if res.Counts()[tc.kind] != 1 || res.Anomalies() != 1 {
				t.Fatalf("want one %s:\n%v", tc.kind, res)
			}
		})
	}
}
