package replica

import (
	"sort"
	"time"
)

// The stages of an acks=all produce, as the leader sees them: where the
// time between a request's arrival and its answer goes. Each is measured
// from a point every batch passes (its arrival, or its append to the
// leader's log), so the stages of one batch nest rather than add up:
//
//	arrival ─ Append ─┐
//	                  appended ─ FollowerFetch ─ FollowerAck ─ Commit ─┐
//	                                                                   Wakeup ─ answered
//	arrival ────────────────────────── Total ──────────────────────────────────┘
//
// A node reports them as the strata.storage.produce.stage.duration
// histogram (docs/operations.md) and `strata-load --breakdown` prints
// their quantiles for a run (docs/performance.md).

// Stage is one step of an acks=all produce at its leader.
type Stage uint8

const (
	// StageAppend: the request's arrival at the replica until its batches
	// are in the leader's log (validation, the append lock, the append,
	// and an fsync when the topic flushes every batch).
	StageAppend Stage = iota
	// StageFollowerFetch: the append until a follower's fetch carries the
	// batch away, once per follower: the wake-up of its long poll, or the
	// wait for its next fetch.
	StageFollowerFetch
	// StageFollowerAck: the append until that follower's next fetch asks
	// for the offset after it, which tells the leader the follower has it
	// (the batch's way there, the follower's append, the next fetch).
	StageFollowerAck
	// StageCommit: the append until the high watermark passes the batch:
	// the slowest in-sync follower's acknowledgement.
	StageCommit
	// StageWakeup: the high watermark passing the batch until the waiting
	// request resumes to answer (scheduling).
	StageWakeup
	// StageTotal: the request's arrival until its answer at the leader.
	StageTotal
	numStages
)

var stageNames = [numStages]string{"append", "follower_fetch", "follower_ack", "commit", "wakeup", "total"}

// String returns the stage's name in the metric's stage attribute.
func (s Stage) String() string {
	if s < numStages {
		return stageNames[s]
	}
	return "unknown"
}

// Stages lists every stage, in order.
func Stages() []Stage {
	out := make([]Stage, numStages)
	for i := range out {
		out[i] = Stage(i)
	}
	return out
}

// appendMark is when the leader appended the batch ending at last, on the
// clock's monotonic reading.
type appendMark struct {
	last int64
	at   time.Duration
}

// maxMarks bounds the marks a leader keeps: past it the oldest half is
// dropped (their later stages go unmeasured), so a follower that stopped
// fetching does not grow them.
const maxMarks = 8192

// stageMarks are a leader's recent appends, oldest first, until the high
// watermark passes them. Replica.mu guards them.
type stageMarks struct {
	marks []appendMark
	// hwAt is when the high watermark last advanced.
	hwAt time.Duration
}

// add records an append ending at last.
func (m *stageMarks) add(last int64, at time.Duration) {
	if len(m.marks) >= maxMarks {
		m.marks = append(m.marks[:0], m.marks[len(m.marks)/2:]...)
	}
	m.marks = append(m.marks, appendMark{last: last, at: at})
}

// each calls fn with each mark whose batch ends in [from, to).
func (m *stageMarks) each(from, to int64, fn func(appendMark)) {
	i := sort.Search(len(m.marks), func(i int) bool { return m.marks[i].last >= from })
	for ; i < len(m.marks) && m.marks[i].last < to; i++ {
		fn(m.marks[i])
	}
}

// dropBelow forgets the marks of batches ending below offset.
func (m *stageMarks) dropBelow(offset int64) {
	i := sort.Search(len(m.marks), func(i int) bool { return m.marks[i].last >= offset })
	if i > 0 {
		m.marks = append(m.marks[:0], m.marks[i:]...)
	}
}

// reset forgets every mark (a new term: offsets may be reused).
func (m *stageMarks) reset() { m.marks = m.marks[:0] }

// observe reports one stage's duration, when the replica has an observer.
func (r *Replica) observe(s Stage, d time.Duration) {
	if r.opts.ObserveStage != nil {
		r.opts.ObserveStage(s, d)
	}
}

// observeSince reports a stage that began at the monotonic reading from.
func (r *Replica) observeSince(s Stage, from time.Duration) {
	if r.opts.ObserveStage != nil {
		r.opts.ObserveStage(s, r.opts.Clock.Mono()-from)
	}
}
