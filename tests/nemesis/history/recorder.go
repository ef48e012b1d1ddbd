package history

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Recorder records a history: each event is numbered, stamped, kept in
// memory and written at once as one JSON line to the recorder's writer, so
// that a run that crashes keeps every event recorded before the crash.
//
// All methods are safe for concurrent use. Events are numbered and written
// under one lock, so the file's order, the Index order and the order of the
// calls that recorded them agree: if one call returns before another
// starts, its event has the lower index.
type Recorder struct {
	now func() time.Time

	mu     sync.Mutex
	w      io.Writer // nil: memory only
	next   int64     // index of the next event
	events []Event
	err    error // first write error; nothing is written after it
}

// RecorderOpt configures a Recorder.
type RecorderOpt func(*Recorder)

// WithClock makes the recorder stamp events with now instead of
// time.Now. now is called under the recorder's lock. A nil now is a no-op.
func WithClock(now func() time.Time) RecorderOpt {
	return func(r *Recorder) {
		if now != nil {
			r.now = now
		}
	}
}

// NewRecorder returns a recorder that writes each event to w as it
// happens. A nil w keeps the history in memory only. The recorder does not
// buffer: give it a buffered writer only if losing the buffer in a crash is
// acceptable, and flush it yourself.
func NewRecorder(w io.Writer, opts ...RecorderOpt) *Recorder {
	r := &Recorder{now: time.Now, w: w, next: 1}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Invoke records the start of an operation by process and returns the
// handle that completes it. op must carry the payload its F names (it
// panics otherwise: the file would not read back). The recorder keeps a
// copy of op; the caller may reuse it.
func (r *Recorder) Invoke(process string, op Op) *Handle {
	if op.F == FFault {
		panic("history: a fault is recorded with StartFault, not Invoke")
	}
	ev := r.record(Event{Process: process, Type: Invoke, Op: op})
	return &Handle{r: r, invoke: ev}
}

// Note records an event that stands alone, with no invoke: an assignment
// change or seek a consumer learned of, a reset done outside the workload.
// It is recorded as ok. It returns the event recorded.
func (r *Recorder) Note(process string, op Op) Event {
	if op.F == FFault {
		panic("history: a fault is recorded with StartFault, not Note")
	}
	return r.record(Event{Process: process, Type: Ok, Op: op})
}

// StartFault records that the nemesis starts injecting a fault of kind
// (one of the Fault* constants, or any other name) and returns the handle
// that records its end. Record the start before injecting and the stop
// after healing, so that the fault's window covers all of its effects.
func (r *Recorder) StartFault(kind, description string) *ActiveFault {
	ev := r.record(Event{Process: NemesisProcess, Type: Ok, Op: Op{F: FFault, Fault: &Fault{
		Kind: kind, Phase: FaultStart, Description: description,
	}}})
	return &ActiveFault{r: r, kind: kind, start: ev.Index}
}

// Events returns a copy of the events recorded so far, in index order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, len(r.events))
	for i, ev := range r.events {
		ev.Op = ev.Op.clone()
		out[i] = ev
	}
	return out
}

// Err returns the first error writing to the recorder's writer, or nil.
// After a write error the recorder writes nothing more, so that the file
// holds whole lines only, and keeps recording in memory.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// record numbers, stamps, keeps and writes ev, and returns it as kept.
func (r *Recorder) record(ev Event) Event {
	if !ev.Op.payloadOK() {
		panic(fmt.Sprintf("history: op %q must carry exactly its own payload", ev.F))
	}
	ev.Op = ev.Op.clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Index = r.next
	r.next++
	ev.Time = r.now()
	r.events = append(r.events, ev)
	if r.w != nil && r.err == nil {
		line, err := json.Marshal(ev)
		if err == nil {
			_, err = r.w.Write(append(line, '\n'))
		}
		if err != nil {
			r.err = fmt.Errorf("history: writing event %d: %w", ev.Index, err)
		}
	}
	return ev
}

// Handle completes one invoked operation. Exactly one of its completing
// methods (Ok, SendOk, PollOk, Fail, Info) may be called, once, from any
// goroutine; a second completion panics. An operation never completed
// stays pending in the history, which the checker reads as indeterminate.
type Handle struct {
	r      *Recorder
	invoke Event
	done   atomic.Bool
}

// Index is the index of the invoke event.
func (h *Handle) Index() int64 { return h.invoke.Index }

// Op returns a copy of the operation as invoked.
func (h *Handle) Op() Op { return h.invoke.Op.clone() }

// Ok records that the operation happened, with result: the operation as
// invoked with its result filled in. A zero result (F empty) records the
// operation as invoked. result's F must be the invoked one.
func (h *Handle) Ok(result Op) {
	if result.F == "" {
		result = h.invoke.Op
	}
	if result.F != h.invoke.F {
		panic(fmt.Sprintf("history: operation %d invoked as %q completed as %q", h.invoke.Index, h.invoke.F, result.F))
	}
	h.complete(Ok, result, nil)
}

// SendOk records that a send was acknowledged at partition and offset.
func (h *Handle) SendOk(partition int32, offset int64) {
	op := h.invoke.Op.clone()
	if op.Send == nil {
		panic(fmt.Sprintf("history: SendOk on operation %d, a %q", h.invoke.Index, h.invoke.F))
	}
	op.Send.Partition, op.Send.Offset = partition, offset
	h.complete(Ok, op, nil)
}

// PollOk records a poll's result. Group and Member left empty are taken
// from the invoke.
func (h *Handle) PollOk(result Poll) {
	if h.invoke.Poll == nil {
		panic(fmt.Sprintf("history: PollOk on operation %d, a %q", h.invoke.Index, h.invoke.F))
	}
	if result.Group == "" {
		result.Group = h.invoke.Poll.Group
	}
	if result.Member == "" {
		result.Member = h.invoke.Poll.Member
	}
	h.complete(Ok, Op{F: FPoll, Poll: &result}, nil)
}

// Fail records that the operation is known not to have happened. err says
// why; it may be nil.
func (h *Handle) Fail(err error) { h.complete(Fail, h.invoke.Op, err) }

// Info records that the operation's outcome is unknown (a timeout, a lost
// connection). err says why; it may be nil.
func (h *Handle) Info(err error) { h.complete(Info, h.invoke.Op, err) }

func (h *Handle) complete(t Type, op Op, err error) {
	if h.done.Swap(true) {
		panic(fmt.Sprintf("history: operation %d completed twice", h.invoke.Index))
	}
	ev := Event{Process: h.invoke.Process, Type: t, Invoke: h.invoke.Index, Op: op}
	if err != nil {
		ev.Error = err.Error()
	}
	h.r.record(ev)
}

// ActiveFault is a fault started with StartFault. Its methods are safe for
// concurrent use.
type ActiveFault struct {
	r       *Recorder
	kind    string
	start   int64
	stopped atomic.Bool
}

// Index is the index of the fault's start event.
func (f *ActiveFault) Index() int64 { return f.start }

// Stop records that the fault is healed. Only the first call records; a
// fault never stopped lasts, for the checker, to the end of the history.
func (f *ActiveFault) Stop(description string) {
	if f.stopped.Swap(true) {
		return
	}
	f.r.record(Event{Process: NemesisProcess, Type: Ok, Op: Op{F: FFault, Fault: &Fault{
		Kind: f.kind, Phase: FaultStop, Start: f.start, Description: description,
	}}})
}
