package history

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// stepClock returns a clock that moves one millisecond per reading.
func stepClock() func() time.Time {
	t := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

// everyKind records one operation of each kind, with each outcome, so that
// a round trip covers every field of the format.
func everyKind(rec *Recorder) {
	tp := TopicPartition{Topic: "t", Partition: 1}
	s := rec.Invoke("producer-1", SendOp("t", "k1", "v1"))
	s.SendOk(1, 41)
	rec.Invoke("producer-1", SendOp("t", "k2", "v2")).Fail(errors.New("not leader"))
	rec.Invoke("producer-2", SendOp("t", "k2", "v3")).Info(errors.New("deadline exceeded"))
	rec.Invoke("producer-2", SendOp("t", "k3", "v4")) // pending: the run ended first

	f := rec.StartFault(FaultPartition, "node 1 | nodes 2, 3")
	rec.Note("consumer-1", AssignOp(Assign{Group: "g", Member: "m1", Epoch: 3,
		Revoked: []TopicPartition{{Topic: "t", Partition: 0}}, Assigned: []TopicPartition{tp},
		Offsets: []PartitionOffset{{Topic: "t", Partition: 1, Offset: 40}}}))
	p := rec.Invoke("consumer-1", PollOp("g", "m1"))
	p.PollOk(Poll{Epoch: 3, Assigned: []TopicPartition{tp}, AtEnd: []TopicPartition{tp},
		Records: []Record{{Topic: "t", Partition: 1, Offset: 41, Key: "k1", Value: "v1"}}})
	c := rec.Invoke("consumer-1", CommitOp("g", "m1", 3, PartitionOffset{Topic: "t", Partition: 1, Offset: 42}))
	c.Ok(Op{})
	rec.Note("admin", ResetOp("g", PartitionOffset{Topic: "t", Partition: 1, Offset: 0}))
	rec.Note("sink", EffectsOp(Effects{Group: "s", Topics: []string{"t"},
		Next: []PartitionOffset{{Topic: "t", Partition: 1, Offset: 42}},
		Rows: []Record{{Topic: "t", Partition: 1, Offset: 41, Value: "v1"}}}))
	f.Stop("healed")

	rec.Note("admin", TopicOp(Topic{Name: "c", Partitions: 3, Configs: map[string]string{"cleanup.policy": "compact"}}))
	rec.Invoke("producer-1", TombstoneOp("c", "k1", "v5")).SendOk(2, 7)
	rec.Invoke("consumer-1", PollOp("", "")).PollOk(Poll{
		Records: []Record{{Topic: "c", Partition: 2, Offset: 7, Key: "k1", Value: "v5", Tombstone: true}}})
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := NewRecorder(&buf, WithClock(stepClock()))
	everyKind(rec)
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	want := rec.Events()
	if len(want) != 21 {
		t.Fatalf("recorded %d events, want 21", len(want))
	}
	if n := strings.Count(buf.String(), "\n"); n != len(want) {
		t.Fatalf("file has %d lines for %d events", n, len(want))
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// Times lose their monotonic reading in JSON; compare them apart.
	for i := range got {
		if !got[i].Time.Equal(want[i].Time) {
			t.Fatalf("event %d: time %v, want %v", i+1, got[i].Time, want[i].Time)
		}
		got[i].Time, want[i].Time = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back:\n%+v\nwant:\n%+v", got, want)
	}
}

func TestRecordedFields(t *testing.T) {
	rec := NewRecorder(nil, WithClock(stepClock()))
	everyKind(rec)
	evs := rec.Events()
	for i, ev := range evs {
		if ev.Index != int64(i+1) {
			t.Fatalf("event %d has index %d", i+1, ev.Index)
		}
	}
	ok := evs[1]
	if ok.Type != Ok || ok.Invoke != 1 || ok.Send.Partition != 1 || ok.Send.Offset != 41 || ok.Send.Value != "v1" {
		t.Fatalf("send ok: %+v %+v", ok, ok.Send)
	}
	if inv := evs[0]; inv.Send.Partition != -1 || inv.Send.Offset != -1 {
		t.Fatalf("send invoke: %+v", inv.Send)
	}
	if fail := evs[3]; fail.Type != Fail || fail.Error != "not leader" || fail.Send.Value != "v2" {
		t.Fatalf("send fail: %+v", fail)
	}
	poll := evs[10]
	if poll.Poll.Group != "g" || poll.Poll.Member != "m1" || len(poll.Poll.Records) != 1 {
		t.Fatalf("poll ok takes group and member from its invoke: %+v", poll.Poll)
	}
	if e := evs[14].Effects; e == nil || e.Group != "s" || len(e.Rows) != 1 || e.Next[0].Offset != 42 {
		t.Fatalf("effects note: %+v", evs[14])
	}
	stop := evs[15]
	if stop.Fault.Phase != FaultStop || stop.Fault.Start != evs[7].Index || stop.Process != NemesisProcess {
		t.Fatalf("fault stop: %+v %+v", stop, stop.Fault)
	}
	if a := evs[8].Assign; a == nil || len(a.Offsets) != 1 || a.Offsets[0].Offset != 40 {
		t.Fatalf("assign note with offsets: %+v", evs[8])
	}
	if tn := evs[16]; tn.Type != Ok || tn.Invoke != 0 || tn.Topic == nil || tn.Topic.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("topic note: %+v %+v", tn, tn.Topic)
	}
	if ts := evs[18]; !ts.Send.Tombstone || ts.Send.Value != "v5" || ts.Send.Offset != 7 {
		t.Fatalf("tombstone send ok: %+v", ts.Send)
	}
	if r := evs[20].Poll.Records[0]; !r.Tombstone || r.Value != "v5" {
		t.Fatalf("tombstone read: %+v", r)
	}
}

func TestRecorderKeepsCopies(t *testing.T) {
	rec := NewRecorder(nil)
	recs := []Record{{Topic: "t", Value: "a"}}
	h := rec.Invoke("c", PollOp("", ""))
	h.PollOk(Poll{Records: recs})
	recs[0].Value = "changed by the caller"
	evs := rec.Events()
	evs[1].Poll.Records[0].Value = "changed by a reader"
	if got := rec.Events()[1].Poll.Records[0].Value; got != "a" {
		t.Fatalf("kept record value %q, want a", got)
	}
}

func TestCompletingTwicePanics(t *testing.T) {
	rec := NewRecorder(nil)
	h := rec.Invoke("p", SendOp("t", "k", "v"))
	h.SendOk(0, 0)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "completed twice") {
			t.Fatalf("second completion: recovered %v", r)
		}
	}()
	h.Fail(nil)
}

func TestWrongPayloadPanics(t *testing.T) {
	cases := map[string]func(*Recorder){
		"no payload":       func(r *Recorder) { r.Invoke("p", Op{F: FSend}) },
		"other payload":    func(r *Recorder) { r.Invoke("p", Op{F: FSend, Poll: &Poll{}}) },
		"two payloads":     func(r *Recorder) { r.Invoke("p", Op{F: FSend, Send: &Send{}, Poll: &Poll{}}) },
		"fault invoked":    func(r *Recorder) { r.Invoke("p", Op{F: FFault, Fault: &Fault{}}) },
		"ok as other func": func(r *Recorder) { r.Invoke("p", SendOp("t", "k", "v")).Ok(PollOp("", "")) },
	}
	for name, do := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			do(NewRecorder(nil))
		})
	}
}

func TestFaultStopTwiceRecordsOnce(t *testing.T) {
	rec := NewRecorder(nil)
	f := rec.StartFault(FaultKill, "node 1")
	f.Stop("a")
	f.Stop("b")
	if n := len(rec.Events()); n != 2 {
		t.Fatalf("%d events, want start and one stop", n)
	}
}

// failingWriter fails its second write.
type failingWriter struct {
	writes int
	buf    bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes == 2 {
		return 0, errors.New("disk full")
	}
	return w.buf.Write(p)
}

func TestWriteErrorStopsWriting(t *testing.T) {
	w := &failingWriter{}
	rec := NewRecorder(w)
	for i := range 4 {
		rec.Note("c", AssignOp(Assign{Epoch: int32(i)}))
	}
	if err := rec.Err(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Err() = %v, want the write error", err)
	}
	if w.writes != 2 {
		t.Fatalf("%d writes, want none after the failed one", w.writes)
	}
	if n := len(rec.Events()); n != 4 {
		t.Fatalf("%d events kept in memory, want 4", n)
	}
	evs, err := Read(&w.buf)
	if err != nil || len(evs) != 1 {
		t.Fatalf("file: %d events, %v; want the one written before the error", len(evs), err)
	}
}

// lockedBuffer is a bytes.Buffer that notices concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	if !b.mu.TryLock() {
		return 0, errors.New("concurrent write")
	}
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func TestConcurrentRecording(t *testing.T) {
	w := &lockedBuffer{}
	rec := NewRecorder(w)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				h := rec.Invoke(fmt.Sprintf("producer-%d", g), SendOp("t", "k", fmt.Sprintf("%d-%d", g, i)))
				h.SendOk(0, int64(i))
			}
		})
	}
	wg.Wait()
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	evs, err := Read(&w.buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2*workers*each {
		t.Fatalf("read %d events, want %d", len(evs), 2*workers*each)
	}
	for i, ev := range evs {
		if ev.Index != int64(i+1) {
			t.Fatalf("line %d holds index %d", i+1, ev.Index)
		}
		if ev.Type == Ok && evs[ev.Invoke-1].Send.Value != ev.Send.Value {
			t.Fatalf("event %d completes %d, another send", ev.Index, ev.Invoke)
		}
	}
}
