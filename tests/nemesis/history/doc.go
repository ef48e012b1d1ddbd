// Package history records what the clients of a fault run did and saw, as
// Jepsen does: every operation is an invoke event, then at most one
// completion saying how it ended. The checker (package checker beside this
// one) reads a run's history and judges it; nothing else is needed to
// judge a run, so a history file is the whole record of what was promised
// to clients.
//
// # Recording
//
// A Recorder numbers events, keeps them in memory and writes each one as a
// JSON line the moment it happens:
//
//	rec := history.NewRecorder(f)
//	h := rec.Invoke("producer-1", history.SendOp("t", "k7", "p1-42"))
//	if err != nil { h.Info(err) } else { h.SendOk(r.Partition, r.Offset) }
//
//	fault := rec.StartFault(history.FaultKill, "SIGKILL storage node 2")
//	... // inject, wait, heal
//	fault.Stop("node 2 restarted")
//
// Assignment changes and seeks a consumer learns of, and explicit resets of
// a group's offsets, what a sink wrote, and the topics the run created are
// notes: single events with no invoke (Recorder.Note). Faults are notes of
// the nemesis process.
//
// # How to read a history
//
// A history file holds one JSON object per line, in index order. The field
// names and values below are part of the format: do not change them, only
// add fields (readers ignore unknown ones).
//
//	index    1, 2, 3, … in the order events happened (a real-time order)
//	time     wall-clock time, RFC 3339 with nanoseconds
//	process  the client: "producer-1", "group-a/member-2", "nemesis"
//	type     invoke | ok | fail | info
//	         ok: it happened, with its result; fail: it did not happen;
//	         info: unknown (a timeout). An invoke with no completion in the
//	         file is pending: unknown too.
//	invoke   on a completion, the index of the invoke it completes; absent
//	         on an invoke and on a note
//	f        send | poll | commit | assign | reset | effects | topic | fault
//	error    on fail and info, why
//
// and one payload object named like f. On an invoke it holds the request;
// on a completion the request again, with the result:
//
//	send    {topic, key, value, tombstone, partition, offset}: partition
//	        and offset are -1 until known; on ok, where the record was
//	        acknowledged. Values are unique per send. tombstone (absent
//	        when false): the record's value is null, a delete; value then
//	        names the send and travels in a record header.
//	poll    {group, member, epoch, assigned, records, at_end}: group,
//	        member and epoch for a group member (member epoch at the poll);
//	        assigned: the partitions ([{topic, partition}]) assigned at the
//	        poll; records: on ok, [{topic, partition, offset, key, value,
//	        tombstone}] in the order returned (a tombstone's value is the
//	        name from its header); at_end: partitions whose position
//	        reached the high watermark after this poll.
//	commit  {group, member, epoch, offsets}: offsets is
//	        [{topic, partition, offset}], offset the next to read.
//	assign  {group, member, epoch, revoked, assigned, offsets}: a
//	        rebalance or a seek; a note. Naming no partition restarts all
//	        of them. offsets, when present, [{topic, partition, offset}]:
//	        where the consumer set itself to read each partition from.
//	reset   {group, offsets}: an explicit reset of committed offsets (all
//	        of the group's when offsets is empty).
//	effects {group, topics, next, rows}: what a consumer group's sink wrote
//	        to its database, a note recorded once it stopped; next: its
//	        offsets then, [{topic, partition, offset}]; rows: one
//	        {topic, partition, offset, value} per effect row.
//	topic   {name, partitions, configs}: a topic the run created, with the
//	        configs it was given (Kafka's names); a note, recorded before
//	        any operation on it. A cleanup.policy holding compact makes
//	        its records judged by key.
//	fault   {kind, phase, start, description}: phase start or stop; a
//	        stop's start is the index of the start event it ends. A fault
//	        never stopped lasts to the end of the run.
//
// For example:
//
//	{"index":7,"time":"2026-12-01T10:00:00.1Z","process":"producer-1","type":"invoke","f":"send","send":{"topic":"t","key":"k7","value":"p1-42","partition":-1,"offset":-1}}
//	{"index":9,"time":"2026-12-01T10:00:00.3Z","process":"producer-1","type":"ok","invoke":7,"f":"send","send":{"topic":"t","key":"k7","value":"p1-42","partition":2,"offset":118}}
//	{"index":12,"time":"2026-12-01T10:00:01Z","process":"nemesis","type":"ok","f":"fault","fault":{"kind":"kill","phase":"start","description":"SIGKILL storage node 2"}}
//
// Read and ReadFile parse a file back and check it is well formed; a last
// line torn by a crash is reported as ErrTruncated with every event before
// it.
package history
