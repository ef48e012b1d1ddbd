package history

import (
	"fmt"
	"maps"
	"time"
)

// Type is what an event says about its operation: that it was invoked, or
// how it ended. The values are part of the format.
type Type string

// The four event types, as in Jepsen's histories.
const (
	// Invoke starts an operation; its completion, if any, comes later
	// with Invoke set to this event's Index.
	Invoke Type = "invoke"
	// Ok: the operation happened, and the event carries its result.
	Ok Type = "ok"
	// Fail: the operation is known not to have happened (a send the
	// broker refused before appending, for instance).
	Fail Type = "fail"
	// Info: indeterminate; the operation may or may not have happened (a
	// timeout, a lost connection).
	Info Type = "info"
)

// Func names an operation. The values are part of the format.
type Func string

// The operations of a history.
const (
	// FSend appends one record; Event.Send is set.
	FSend Func = "send"
	// FPoll is one poll of a consumer; Event.Poll is set.
	FPoll Func = "poll"
	// FCommit commits a group's offsets; Event.Commit is set.
	FCommit Func = "commit"
	// FAssign is a change of a consumer's assignment or position (a
	// rebalance, or a seek); Event.Assign is set. Usually a note.
	FAssign Func = "assign"
	// FReset is an explicit change of a group's committed offsets (an
	// administrator's reset), after which a lower commit is no anomaly;
	// Event.Reset is set.
	FReset Func = "reset"
	// FEffects is what a sink wrote to its database: a note, recorded
	// once the sink has stopped; Event.Effects is set.
	FEffects Func = "effects"
	// FTopic is a topic the run created, with its configs: a note,
	// recorded before any operation on the topic; Event.Topic is set.
	FTopic Func = "topic"
	// FFault is the nemesis starting or stopping a fault; Event.Fault is
	// set. Always a note.
	FFault Func = "fault"
	// FTxn is the end of a transaction (commit or abort): invoked when the
	// producer asks for it, completed when the answer comes; Event.Txn is
	// set. Its sends are FSend operations naming it (Send.Txn).
	FTxn Func = "txn"
)

// Fault kinds the suite injects. Kind is free text, so a new fault needs no
// change here; these are the names the checker's report groups by.
const (
	FaultKill              = "kill"
	FaultPause             = "pause"
	FaultPartition         = "partition"
	FaultDiskFull          = "disk-full"
	FaultEIO               = "eio"
	FaultPowerCut          = "power-cut"
	FaultMove              = "move"
	FaultCancelMove        = "cancel-move"
	FaultDrain             = "drain"
	FaultPreferredElection = "preferred-election"
	FaultPostgresRestart   = "postgres-restart"
	FaultS3Errors          = "s3-errors"
	FaultS3Slow            = "s3-slow"
	FaultAnswersLost       = "answers-lost"
	FaultAnswersLate       = "answers-late"
	FaultOversize          = "oversize-record"
)

// Fault phases.
const (
	// FaultStart: the fault is being injected from now on.
	FaultStart = "start"
	// FaultStop: the fault is healed (Fault.Start names the start event).
	FaultStop = "stop"
)

// NemesisProcess is the process of every fault event.
const NemesisProcess = "nemesis"

// Event is one line of a history. Field names in the JSON tags are part of
// the format (see the package doc).
type Event struct {
	// Index numbers events 1, 2, 3, … in the order they happened; in a
	// recorder's history it is a real-time order. Never 0.
	Index int64 `json:"index"`
	// Time is the wall-clock time the event was recorded.
	Time time.Time `json:"time"`
	// Process is the client that did the operation: one per producer or
	// consumer ("producer-1", "group-a/member-2"), or NemesisProcess.
	Process string `json:"process"`
	// Type is invoke, ok, fail or info.
	Type Type `json:"type"`
	// Invoke is, on a completion, the Index of the invoke event it
	// completes; 0 on an invoke and on a note (an event that stands
	// alone, like a fault or an assignment change).
	Invoke int64 `json:"invoke,omitempty"`
	// Op is the operation: F and the one payload F names.
	Op
	// Error is why an operation failed or is indeterminate; empty on
	// invoke and ok.
	Error string `json:"error,omitempty"`
}

// Op is an operation: which one (F) and its payload. Exactly the field F
// names is set. On an invoke it holds the request; on a completion the
// request again, with the result filled in.
type Op struct {
	F       Func     `json:"f"`
	Send    *Send    `json:"send,omitempty"`
	Poll    *Poll    `json:"poll,omitempty"`
	Commit  *Commit  `json:"commit,omitempty"`
	Assign  *Assign  `json:"assign,omitempty"`
	Reset   *Reset   `json:"reset,omitempty"`
	Effects *Effects `json:"effects,omitempty"`
	Topic   *Topic   `json:"topic,omitempty"`
	Fault   *Fault   `json:"fault,omitempty"`
	Txn     *Txn     `json:"txn,omitempty"`
}

// Send is a record sent to a topic.
type Send struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	// Value is unique to this send in the workload: the checker tells
	// records apart by value.
	Value string `json:"value"`
	// Tombstone: the record sent has a null value (a delete, on a
	// compacted topic). Value still names the send; the workload carries
	// it in a record header so that reads can tell tombstones apart.
	Tombstone bool `json:"tombstone,omitempty"`
	// Partition is where the record went; -1 when not known (on an
	// invoke the producer may not have chosen yet, and on fail or info
	// it may never have).
	Partition int32 `json:"partition"`
	// Offset is the offset the broker acknowledged; -1 unless ok.
	Offset int64 `json:"offset"`
	// Txn names the transaction the record was sent in (Txn.ID); empty
	// for a send outside one. Its record counts once the transaction
	// commits, and never when it aborts.
	Txn string `json:"txn,omitempty"`
}

// Txn is the end of one transaction of a transactional producer.
type Txn struct {
	// ID names the transaction, unique in the history (the transactional
	// id and a sequence number: "producer-1/17").
	ID string `json:"id"`
	// Commit is what the producer asked: true to commit, false to abort.
	// An ok completion means that happened; fail means the transaction
	// is known aborted; info, unknown.
	Commit bool `json:"commit"`
	// Group, Offsets and Inputs describe a consume-transform-produce
	// transaction: the group whose offsets it committed (the next offset
	// to read, per input partition), and the positions of the input
	// records it transformed into its sends.
	Group   string            `json:"group,omitempty"`
	Offsets []PartitionOffset `json:"offsets,omitempty"`
	Inputs  []PartitionOffset `json:"inputs,omitempty"`
}

// Poll is one poll of a consumer.
type Poll struct {
	// Group and Member name a group consumer; both empty for a plain
	// consumer.
	Group  string `json:"group,omitempty"`
	Member string `json:"member,omitempty"`
	// Epoch is a group member's generation (member epoch) at the poll;
	// 0 for a plain consumer.
	Epoch int32 `json:"epoch,omitempty"`
	// Assigned is the consumer's assignment at the poll, if the client
	// knows it; nil when not recorded.
	Assigned []TopicPartition `json:"assigned,omitempty"`
	// Records are the records returned, in the order returned; on an
	// invoke, fail or info, none.
	Records []Record `json:"records,omitempty"`
	// AtEnd lists partitions whose position, after this poll, had
	// reached the high watermark the consumer last saw: a read that
	// started at or before an offset and got here has passed over it.
	// Optional: without it the checker judges a record gone only by a
	// later read of its offset or of offsets after it.
	AtEnd []TopicPartition `json:"at_end,omitempty"`
	// Committed: the consumer reads committed records only (Kafka's
	// read_committed); false, every record up to the high watermark.
	Committed bool `json:"committed,omitempty"`
}

// Record is one record returned by a poll.
type Record struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	// Tombstone: the record's value is null; Value is then the name of
	// the send it came from (Send.Tombstone), read from its header.
	Tombstone bool `json:"tombstone,omitempty"`
}

// Commit is a group's commit of the next offsets to read.
type Commit struct {
	Group  string `json:"group"`
	Member string `json:"member,omitempty"`
	// Epoch is the member epoch the commit was sent with.
	Epoch int32 `json:"epoch,omitempty"`
	// Offsets are the committed offsets: for each partition the next
	// offset to read.
	Offsets []PartitionOffset `json:"offsets"`
}

// Assign is a change of a consumer's assignment or position. A group
// member records one when partitions are revoked or assigned; a plain
// consumer records one when it assigns or seeks. The checker starts its
// judgement of a partition's reads afresh at an assign that names it, and
// of every partition of the process at one that names none.
type Assign struct {
	Group  string `json:"group,omitempty"`
	Member string `json:"member,omitempty"`
	// Epoch is the member epoch of the new assignment.
	Epoch    int32            `json:"epoch,omitempty"`
	Revoked  []TopicPartition `json:"revoked,omitempty"`
	Assigned []TopicPartition `json:"assigned,omitempty"`
	// Offsets are, for partitions of Assigned the consumer set itself,
	// the offset it reads each from (the log start offset, for a read of
	// the whole partition); absent when the client picks the position.
	Offsets []PartitionOffset `json:"offsets,omitempty"`
}

// Reset is an explicit change of a group's committed offsets, outside the
// group's own commits.
type Reset struct {
	Group string `json:"group"`
	// Offsets are the partitions reset and where to; empty means every
	// partition of the group.
	Offsets []PartitionOffset `json:"offsets,omitempty"`
}

// Effects are the rows a consumer group's sink (client/pgsink) wrote to
// its database, one for each record it applied, read back after it
// stopped. Applied exactly once, every record of Topics below Next has
// one row, and no record has two.
type Effects struct {
	Group  string   `json:"group"`
	Topics []string `json:"topics"`
	// Next is, per partition, the sink's offset when it stopped: the
	// first record it had not applied.
	Next []PartitionOffset `json:"next"`
	// Rows are the effect rows: the position and value of the record
	// each was written for (Key empty).
	Rows []Record `json:"rows"`
}

// Topic is a topic the run created: its name, partition count and the
// configs it was created with (Kafka's names, as given to CreateTopic).
// The checker reads cleanup.policy from Configs: a compacted topic's
// records are judged by key, not one by one.
type Topic struct {
	Name       string            `json:"name"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

// Fault is a fault's start or stop.
type Fault struct {
	// Kind is what is injected: one of the Fault* constants or any
	// other name.
	Kind string `json:"kind"`
	// Phase is FaultStart or FaultStop.
	Phase string `json:"phase"`
	// Start is, on a stop, the Index of the start event it ends.
	Start int64 `json:"start,omitempty"`
	// Description says what exactly (which node, which link).
	Description string `json:"description,omitempty"`
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// PartitionOffset is an offset of a partition.
type PartitionOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// TP is the partition of po.
func (po PartitionOffset) TP() TopicPartition {
	return TopicPartition{Topic: po.Topic, Partition: po.Partition}
}

// TP is the partition of r.
func (r Record) TP() TopicPartition { return TopicPartition{Topic: r.Topic, Partition: r.Partition} }

// SendOp is a send of value under key to topic, partition not yet known.
func SendOp(topic, key, value string) Op {
	return Op{F: FSend, Send: &Send{Topic: topic, Key: key, Value: value, Partition: -1, Offset: -1}}
}

// TombstoneOp is a send of a tombstone (a null value) under key to topic,
// named value (Send.Tombstone).
func TombstoneOp(topic, key, value string) Op {
	op := SendOp(topic, key, value)
	op.Send.Tombstone = true
	return op
}

// PollOp is a poll by a plain consumer (group and member empty) or a
// group member.
func PollOp(group, member string) Op {
	return Op{F: FPoll, Poll: &Poll{Group: group, Member: member}}
}

// CommitOp is a commit of offsets by a member of group.
func CommitOp(group, member string, epoch int32, offsets ...PartitionOffset) Op {
	return Op{F: FCommit, Commit: &Commit{Group: group, Member: member, Epoch: epoch, Offsets: offsets}}
}

// AssignOp is an assignment change.
func AssignOp(a Assign) Op { return Op{F: FAssign, Assign: &a} }

// ResetOp is an explicit reset of group's offsets (all when none given).
func ResetOp(group string, offsets ...PartitionOffset) Op {
	return Op{F: FReset, Reset: &Reset{Group: group, Offsets: offsets}}
}

// EffectsOp is what group's sink wrote for topics.
func EffectsOp(e Effects) Op { return Op{F: FEffects, Effects: &e} }

// TxnOp is the end of transaction id: a commit, or an abort.
func TxnOp(t Txn) Op { return Op{F: FTxn, Txn: &t} }

// TopicOp is a topic the run created.
func TopicOp(t Topic) Op { return Op{F: FTopic, Topic: &t} }

// payloadOK reports whether exactly the payload F names is set.
func (o Op) payloadOK() bool {
	set := 0
	for _, p := range []bool{o.Send != nil, o.Poll != nil, o.Commit != nil, o.Assign != nil, o.Reset != nil, o.Effects != nil, o.Topic != nil, o.Fault != nil, o.Txn != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		return false
	}
	switch o.F {
	case FSend:
		return o.Send != nil
	case FPoll:
		return o.Poll != nil
	case FCommit:
		return o.Commit != nil
	case FAssign:
		return o.Assign != nil
	case FReset:
		return o.Reset != nil
	case FEffects:
		return o.Effects != nil
	case FTopic:
		return o.Topic != nil
	case FFault:
		return o.Fault != nil
	case FTxn:
		return o.Txn != nil
	}
	return false
}

// clone returns a deep copy of o, so that an event kept in memory never
// shares a slice with the caller.
func (o Op) clone() Op {
	c := Op{F: o.F}
	if o.Send != nil {
		s := *o.Send
		c.Send = &s
	}
	if o.Poll != nil {
		p := *o.Poll
		p.Assigned = cloneSlice(p.Assigned)
		p.Records = cloneSlice(p.Records)
		p.AtEnd = cloneSlice(p.AtEnd)
		c.Poll = &p
	}
	if o.Commit != nil {
		cm := *o.Commit
		cm.Offsets = cloneSlice(cm.Offsets)
		c.Commit = &cm
	}
	if o.Assign != nil {
		a := *o.Assign
		a.Revoked = cloneSlice(a.Revoked)
		a.Assigned = cloneSlice(a.Assigned)
		a.Offsets = cloneSlice(a.Offsets)
		c.Assign = &a
	}
	if o.Reset != nil {
		r := *o.Reset
		r.Offsets = cloneSlice(r.Offsets)
		c.Reset = &r
	}
	if o.Effects != nil {
		e := *o.Effects
		e.Topics = cloneSlice(e.Topics)
		e.Next = cloneSlice(e.Next)
		e.Rows = cloneSlice(e.Rows)
		c.Effects = &e
	}
	if o.Topic != nil {
		t := *o.Topic
		t.Configs = maps.Clone(t.Configs)
		c.Topic = &t
	}
	if o.Fault != nil {
		f := *o.Fault
		c.Fault = &f
	}
	if o.Txn != nil {
		t := *o.Txn
		t.Offsets = cloneSlice(t.Offsets)
		t.Inputs = cloneSlice(t.Inputs)
		c.Txn = &t
	}
	return c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}
