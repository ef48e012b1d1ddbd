package checker

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// simLog is a correct in-memory log: the clean history a real cluster owes
// its clients.
type simLog struct {
	mu    sync.Mutex
	parts [][]history.Record
}

func (l *simLog) append(topic, key, value string) (int32, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := int32(len(key)+int(key[len(key)-1])) % int32(len(l.parts))
	off := int64(len(l.parts[p]))
	l.parts[p] = append(l.parts[p], history.Record{Topic: topic, Partition: p, Offset: off, Key: key, Value: value})
	return p, off
}

// read returns up to n records of p from offset from, and whether the
// read reached the log's end.
func (l *simLog) read(p int32, from int64, n int) ([]history.Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs := l.parts[p][min(from, int64(len(l.parts[p]))):]
	recs = recs[:min(n, len(recs))]
	return slices.Clone(recs), from+int64(len(recs)) == int64(len(l.parts[p]))
}

// simGroup is a correct group coordinator with eager rebalances: at each
// generation every member gives up all its partitions and takes its new
// ones from the committed offsets; only an owner at the current generation
// may commit.
type simGroup struct {
	mu        sync.Mutex
	gen       int32
	owner     map[int32]int
	committed map[int32]int64
	rng       *rand.Rand
}

func (g *simGroup) rebalance(members, partitions int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	for p := range int32(partitions) {
		g.owner[p] = g.rng.IntN(members)
	}
}

const (
	simTopic      = "t"
	simPartitions = 4
	simProducers  = 4
	simSends      = 250
	simMembers    = 2
	simRounds     = 150
	simPolls      = 200
)

var errSim = errors.New("sim: injected")

// simulate runs producers, a plain consumer, a group of two members and a
// nemesis against a correct log, concurrently, then a final read. The plain
// consumer reads every partition to its end once the producers are done,
// so every record is served before the final read.
func simulate(rec *history.Recorder) (okSends int) {
	log := &simLog{parts: make([][]history.Record, simPartitions)}
	group := &simGroup{owner: map[int32]int{}, committed: map[int32]int64{}, rng: rand.New(rand.NewPCG(1, 2))}
	group.rebalance(simMembers, simPartitions)
	progress := make(chan struct{}, simProducers*simSends)
	var oks sync.Map
	var wg sync.WaitGroup

	var producers sync.WaitGroup
	for g := range simProducers {
		producers.Go(func() {
			proc := fmt.Sprintf("producer-%d", g)
			for i := range simSends {
				key := fmt.Sprintf("k%d", i%7)
				h := rec.Invoke(proc, history.SendOp(simTopic, key, fmt.Sprintf("%d-%d", g, i)))
				switch i % 10 {
				case 0: // refused before appending
					h.Fail(errSim)
				case 1: // appended, the answer lost
					log.append(simTopic, key, h.Op().Send.Value)
					h.Info(errSim)
				case 2: // lost before appending
					h.Info(errSim)
				default:
					h.SendOk(log.append(simTopic, key, h.Op().Send.Value))
					oks.Store(h.Index(), true)
				}
				progress <- struct{}{}
			}
		})
	}

	producersDone := make(chan struct{})
	go func() {
		producers.Wait()
		close(producersDone)
	}()

	wg.Go(func() { // nemesis: a fault per 100 sends, for the next 50
		kinds := []string{history.FaultKill, history.FaultPause, history.FaultPartition, history.FaultS3Slow}
		for i := range simProducers * simSends / 100 {
			for range 50 {
				<-progress
			}
			f := rec.StartFault(kinds[i%len(kinds)], fmt.Sprintf("round %d", i))
			for range 50 {
				<-progress
			}
			f.Stop("healed")
		}
	})

	wg.Go(func() { // a plain consumer that seeks back now and then, and reads to the end
		pos := make([]int64, simPartitions)
		all := make([]history.TopicPartition, simPartitions)
		for p := range all {
			all[p] = history.TopicPartition{Topic: simTopic, Partition: int32(p)}
		}
		for i := 0; ; i++ {
			if i%50 == 49 {
				pos[0] = max(0, pos[0]-10)
				rec.Note("reader", history.AssignOp(history.Assign{Assigned: all[:1]}))
			}
			if i == simPolls {
				<-producersDone
			}
			h := rec.Invoke("reader", history.PollOp("", ""))
			var res history.Poll
			atEnd := true
			for p := range int32(simPartitions) {
				recs, end := log.read(p, pos[p], 5)
				pos[p] += int64(len(recs))
				res.Records = append(res.Records, recs...)
				atEnd = atEnd && end
			}
			h.PollOk(res)
			if i >= simPolls && atEnd {
				return
			}
		}
	})

	for m := range simMembers {
		wg.Go(func() { simMember(rec, log, group, m) })
	}
	wg.Wait()
	producers.Wait()

	// The final read: every partition from the start to its end.
	for p := range int32(simPartitions) {
		tp := history.TopicPartition{Topic: simTopic, Partition: p}
		rec.Note("final", history.AssignOp(history.Assign{Assigned: []history.TopicPartition{tp}}))
		for pos := int64(0); ; {
			h := rec.Invoke("final", history.PollOp("", ""))
			recs, end := log.read(p, pos, 50)
			pos += int64(len(recs))
			res := history.Poll{Records: recs}
			if end {
				res.AtEnd = []history.TopicPartition{tp}
			}
			h.PollOk(res)
			if end {
				break
			}
		}
	}
	oks.Range(func(any, any) bool { okSends++; return true })
	return okSends
}

// simMember is one group member: it notices new generations, polls its
// partitions, commits, and now and then asks for a rebalance.
func simMember(rec *history.Recorder, log *simLog, g *simGroup, m int) {
	proc := fmt.Sprintf("g/member-%d", m)
	member := fmt.Sprintf("member-%d", m)
	var gen int32
	pos := map[int32]int64{}
	tps := func(ps map[int32]int64) []history.TopicPartition {
		var out []history.TopicPartition
		for _, p := range slices.Sorted(maps.Keys(ps)) {
			out = append(out, history.TopicPartition{Topic: simTopic, Partition: p})
		}
		return out
	}
	for round := range simRounds {
		g.mu.Lock()
		if g.gen != gen {
			revoked := tps(pos)
			gen, pos = g.gen, map[int32]int64{}
			for p, owner := range g.owner {
				if owner == m {
					pos[p] = g.committed[p]
				}
			}
			g.mu.Unlock()
			rec.Note(proc, history.AssignOp(history.Assign{Group: "g", Member: member, Epoch: gen,
				Revoked: revoked, Assigned: tps(pos)}))
		} else {
			g.mu.Unlock()
		}

		h := rec.Invoke(proc, history.PollOp("g", member))
		res := history.Poll{Epoch: gen, Assigned: tps(pos)}
		for _, p := range slices.Sorted(maps.Keys(pos)) {
			recs, _ := log.read(p, pos[p], 5)
			pos[p] += int64(len(recs))
			res.Records = append(res.Records, recs...)
		}
		h.PollOk(res)

		var offsets []history.PartitionOffset
		for _, p := range slices.Sorted(maps.Keys(pos)) {
			offsets = append(offsets, history.PartitionOffset{Topic: simTopic, Partition: p, Offset: pos[p]})
		}
		c := rec.Invoke(proc, history.CommitOp("g", member, gen, offsets...))
		g.mu.Lock()
		fenced := g.gen != gen
		if !fenced {
			for p, off := range pos {
				g.committed[p] = off
			}
		}
		g.mu.Unlock()
		if fenced {
			c.Fail(errSim)
		} else {
			c.Ok(history.Op{})
		}

		if round%20 == 19 {
			g.rebalance(simMembers, simPartitions)
		}
	}
}

func TestCleanConcurrentHistoryPasses(t *testing.T) {
	var file bytes.Buffer
	rec := history.NewRecorder(&file)
	okSends := simulate(rec)
	evs := rec.Events()
	if len(evs) < 3000 {
		t.Fatalf("only %d events: the simulation did not run", len(evs))
	}

	res := Check(evs, Options{})
	if !res.Ok() || res.Unread.Count != 0 {
		t.Fatalf("a correct log's history fails the check:\n%v", res)
	}
	sends := res.Ops[history.FSend]
	want := Outcomes{Ok: okSends, Fail: simProducers * simSends / 10, Info: simProducers * simSends / 5}
	if sends != want {
		t.Fatalf("send outcomes %+v, want %+v", sends, want)
	}
	if res.Ops[history.FCommit].Ok == 0 || res.Ops[history.FAssign].Ok < 2 || res.Records < okSends {
		t.Fatalf("the group did not run: %v", res)
	}
	if n := res.Faults[history.FaultKill] + res.Faults[history.FaultPause] + res.Faults[history.FaultPartition] + res.Faults[history.FaultS3Slow]; n != 10 {
		t.Fatalf("%d faults, want 10", n)
	}

	// The file the recorder wrote as it went judges the same.
	back, err := history.Read(&file)
	if err != nil {
		t.Fatal(err)
	}
	if got := Check(back, Options{}); got.String() != res.String() {
		t.Fatalf("history read back judges differently:\n%v\nwant:\n%v", got, res)
	}
}

// TestBrokenLogIsCaught runs the same simulation and then damages the
// final read as a broken cluster would have: each kind of damage must be
// found.
func TestBrokenLogIsCaught(t *testing.T) {
	rec := history.NewRecorder(nil)
	simulate(rec)
	clean := rec.Events()

	// finalPolls returns the positions in evs of the final read's polls
	// of partition 0, in order; the first returns 50 records.
	finalPolls := func(evs []history.Event) []int {
		var out []int
		for i, ev := range evs {
			if ev.Process == "final" && ev.Type == history.Ok && ev.F == history.FPoll &&
				len(ev.Poll.Records) > 0 && ev.Poll.Records[0].Partition == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	// served is a record of partition 0 the plain consumer was served.
	var served history.Record
	for _, ev := range clean {
		if ev.Process == "reader" && ev.Type == history.Ok && ev.F == history.FPoll {
			if i := slices.IndexFunc(ev.Poll.Records, func(r history.Record) bool { return r.Partition == 0 && r.Offset > 0 }); i >= 0 {
				served = ev.Poll.Records[i]
				break
			}
		}
	}
	var failedValue string
	for _, ev := range clean {
		if ev.Type == history.Fail && ev.F == history.FSend {
			failedValue = ev.Send.Value
			break
		}
	}
	if served.Value == "" || failedValue == "" || len(finalPolls(clean)) < 2 {
		t.Fatalf("the simulation left nothing to damage: served %+v, failed %q, %d final polls", served, failedValue, len(finalPolls(clean)))
	}

	cases := []struct {
		name   string
		damage func(evs []history.Event)
		kind   string
	}{{
		name: "the final read ends before a record served earlier",
		damage: func(evs []history.Event) {
			for _, i := range finalPolls(evs) {
				p := evs[i].Poll
				p.Records = slices.DeleteFunc(p.Records, func(r history.Record) bool { return r.Offset >= served.Offset })
				p.AtEnd = []history.TopicPartition{{Topic: simTopic, Partition: 0}}
			}
		},
		kind: KindVanishedRead,
	}, {
		name: "the final read returns a failed send's value",
		damage: func(evs []history.Event) {
			evs[finalPolls(evs)[0]].Poll.Records[3].Value = failedValue
		},
		kind: KindAbortedRead,
	}, {
		name: "the final read returns a value never sent",
		damage: func(evs []history.Event) {
			evs[finalPolls(evs)[0]].Poll.Records[3].Value = "never sent"
		},
		kind: KindPhantomRead,
	}, {
		name: "the final read skips a record",
		damage: func(evs []history.Event) {
			p := evs[finalPolls(evs)[0]].Poll
			p.Records = slices.Delete(p.Records, 1, 2)
		},
		kind: KindPollSkip,
	}, {
		name: "the final read returns a record twice",
		damage: func(evs []history.Event) {
			p := evs[finalPolls(evs)[1]].Poll
			p.Records = append(p.Records[:1:1], p.Records...)
		},
		kind: KindNonmonotonicPoll,
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
			if res.Counts()[tc.kind] == 0 {
				t.Fatalf("no %s found:\n%v", tc.kind, res)
			}
			if Check(clean, Options{}).Anomalies() != 0 {
				t.Fatal("the damage reached the clean history")
			}
		})
	}
}
