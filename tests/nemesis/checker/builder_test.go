package checker

import (
	"errors"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// builder writes histories for the tests through a real Recorder, on a
// clock that moves one millisecond per event unless told to wait.
type builder struct {
	rec *history.Recorder
	now time.Time
}

var base = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newBuilder() *builder {
	b := &builder{now: base}
	b.rec = history.NewRecorder(nil, history.WithClock(func() time.Time {
		b.now = b.now.Add(time.Millisecond)
		return b.now
	}))
	return b
}

// wait moves the clock on by d.
func (b *builder) wait(d time.Duration) { b.now = b.now.Add(d) }

// topic is the topic of every record the builder writes.
const topic = "t"

var (
	tp0 = history.TopicPartition{Topic: topic, Partition: 0}
	tp1 = history.TopicPartition{Topic: topic, Partition: 1}
)

// r is a record of topic at partition and offset; its key is its value's
// first letter.
func r(partition int32, offset int64, value string) history.Record {
	return history.Record{Topic: topic, Partition: partition, Offset: offset, Key: value[:1], Value: value}
}

// send invokes a send of value under key and leaves it open.
func (b *builder) send(proc, key, value string) *history.Handle {
	return b.rec.Invoke(proc, history.SendOp(topic, key, value))
}

// sent records a send of value acknowledged at partition and offset.
func (b *builder) sent(proc, value string, partition int32, offset int64) {
	b.send(proc, value[:1], value).SendOk(partition, offset)
}

// sentAll records producer "p" sending values to partition 0, one after
// the other, at offsets from 0.
func (b *builder) sentAll(values ...string) {
	for i, v := range values {
		b.sent("p", v, 0, int64(i))
	}
}

var errTimeout = errors.New("deadline exceeded")

// info records a send of value that timed out.
func (b *builder) info(proc, value string) { b.send(proc, value[:1], value).Info(errTimeout) }

// failed records a send of value refused.
func (b *builder) failed(proc, value string) {
	b.send(proc, value[:1], value).Fail(errors.New("not leader"))
}

// poll records a plain consumer's poll returning recs.
func (b *builder) poll(proc string, recs ...history.Record) {
	b.rec.Invoke(proc, history.PollOp("", "")).PollOk(history.Poll{Records: recs})
}

// pollToEnd records a poll returning recs that reached the end of tps.
func (b *builder) pollToEnd(proc string, tps []history.TopicPartition, recs ...history.Record) {
	b.rec.Invoke(proc, history.PollOp("", "")).PollOk(history.Poll{Records: recs, AtEnd: tps})
}

// startPoll invokes a poll and leaves it open.
func (b *builder) startPoll(proc string) *history.Handle {
	return b.rec.Invoke(proc, history.PollOp("", ""))
}

// memberPoll records a group member's poll.
func (b *builder) memberPoll(proc, member string, epoch int32, assigned []history.TopicPartition, recs ...history.Record) {
	b.rec.Invoke(proc, history.PollOp("g", member)).PollOk(history.Poll{Epoch: epoch, Assigned: assigned, Records: recs})
}

// assign records an assignment change (or seek) of proc.
func (b *builder) assign(proc string, revoked, assigned []history.TopicPartition) {
	b.rec.Note(proc, history.AssignOp(history.Assign{Revoked: revoked, Assigned: assigned}))
}

// commit invokes a commit of partition 0 of group "g" at offset.
func (b *builder) commit(proc string, offset int64) *history.Handle {
	return b.rec.Invoke(proc, history.CommitOp("g", proc, 1, history.PartitionOffset{Topic: topic, Offset: offset}))
}

// committed records an ok commit.
func (b *builder) committed(proc string, offset int64) { b.commit(proc, offset).Ok(history.Op{}) }

// reset invokes a reset of group "g", partition 0 (every partition when
// all).
func (b *builder) reset(all bool) *history.Handle {
	if all {
		return b.rec.Invoke("admin", history.ResetOp("g"))
	}
	return b.rec.Invoke("admin", history.ResetOp("g", history.PartitionOffset{Topic: topic}))
}

func (b *builder) check() Result { return Check(b.rec.Events(), Options{}) }

// compacted is the compacted topic of the builder's histories: a topic
// note names it, and its records are written and read by key.
const compacted = "c"

var ctp0 = history.TopicPartition{Topic: compacted, Partition: 0}

// compactedTopic records the topic note that makes compacted a compacted
// topic.
func (b *builder) compactedTopic() {
	b.rec.Note("admin", history.TopicOp(history.Topic{Name: compacted, Partitions: 2,
		Configs: map[string]string{"cleanup.policy": "compact"}}))
}

// put invokes a send of value under key to compacted, or a tombstone named
// value when tombstone is set, and leaves it open.
func (b *builder) put(key, value string, tombstone bool) *history.Handle {
	op := history.SendOp(compacted, key, value)
	if tombstone {
		op = history.TombstoneOp(compacted, key, value)
	}
	return b.rec.Invoke("p", op)
}

// wrote records a write of value under key to compacted, acknowledged at
// partition 0 and offset; del the same for a tombstone.
func (b *builder) wrote(key, value string, offset int64) { b.put(key, value, false).SendOk(0, offset) }
func (b *builder) del(key, value string, offset int64)   { b.put(key, value, true).SendOk(0, offset) }

// cr is a record of compacted's partition 0; ct a tombstone.
func cr(offset int64, key, value string) history.Record {
	return history.Record{Topic: compacted, Offset: offset, Key: key, Value: value}
}
func ct(offset int64, key, value string) history.Record {
	return history.Record{Topic: compacted, Offset: offset, Key: key, Value: value, Tombstone: true}
}

// startWhole records a consumer proc setting itself to read compacted's
// partition 0 from offset: the start of a whole read.
func (b *builder) startWhole(proc string, from int64) {
	b.rec.Note(proc, history.AssignOp(history.Assign{Assigned: []history.TopicPartition{ctp0},
		Offsets: []history.PartitionOffset{{Topic: compacted, Offset: from}}}))
}

// readWhole records a whole read of compacted's partition 0 by "final":
// from offset from, one poll returning recs that reaches the end.
func (b *builder) readWhole(from int64, recs ...history.Record) {
	b.startWhole("final", from)
	b.pollToEnd("final", []history.TopicPartition{ctp0}, recs...)
}
