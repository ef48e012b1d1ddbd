// Package nemesis is Strata's Jepsen-style fault suite: a cluster of real
// processes (three controllers on embedded etcd, five storage nodes, a
// gateway, a coordinator on a PostgreSQL of its own, tiering on an object
// store behind a proxy), a workload that records every operation in a
// history, a nemesis that injects faults on a schedule, and a checker that
// judges the history afterwards.
//
// # Running it
//
//	make test                              TestNemesisShort: every fault once, fixed seed, a few minutes
//	make test-nemesis DURATION=30m         TestNemesisRandom: random faults for DURATION (build tag nemesis)
//	make test-nemesis DURATION=30m SEED=N  the same schedule again
//	go test -run TestNemesisShort ./nemesis/ -args -nemesis.faults a,b+c
//	                                       just faults a, then b with c alongside
//
// A run prints its seed, where its history file is (-nemesis.out, default
// $TMPDIR/strata-nemesis), the faults it injected by kind, and the
// checker's table: operations, anomalies by kind and the longest
// unavailability per fault kind. The test fails on any anomaly and on a
// cluster that does not recover. It needs root, nftables, cgroup v2 and
// PostgreSQL's server binaries (.ci/run installs what is missing) and
// fails, never skips, without them.
//
// # The workload (workload.go)
//
// Three idempotent acks=all producers write unique values to two topics of
// six partitions each, one of them tiered with little kept locally. A
// plain consumer follows every partition from the start; three members of
// a consumer group read and commit after every poll, recording their
// assignment changes. Once the faults are healed a fresh consumer reads
// every partition from its start to its end: the complete read the
// checker measures lost writes against.
//
// Two pipelined producers (pipeline.go) write every partition of a third
// topic with five batches in flight and short timeouts (a 1s request
// timeout, calls given up after 6s, a 14s delivery timeout), through
// proxies of their own in front of the storage nodes: they are where a
// lost or late answer meets batches that may already be in the log. Two
// members of another group (sink.go) apply that topic to PostgreSQL with
// client/pgsink, one effect row per record; after the final read they
// catch up to its end, and their rows go into the history for the
// checker, which wants exactly one per record.
//
// One more producer (compacted.go) overwrites the 64 keys of a compacted
// topic of three partitions (cleanup.policy=compact; segments that roll
// every second, a dirty ratio of 0.01, no compaction lag, tombstones kept
// a second), an eighth of its sends tombstones; the first eight keys it
// deletes after two values it never writes again. The storage nodes'
// cleaner, looking for dirty logs every second (--cleaner-backoff), removes
// what newer records shadow and the expired tombstones as the run goes.
// The consumers read this topic with the others. The final read sets
// every partition to its log start and notes so in the history; for the
// compacted topic it must show each key's newest acknowledged write (or a
// later send of unknown outcome), a deleted key at most as its tombstone,
// never an older value. The test fails too when the final read shows the
// cleaner removed no acknowledged record, or no deleted key's tombstone:
// then the compaction rules had nothing to judge.
//
// The transactional part (txn.go): two transactional producers (acks=all,
// TransactionalID txn-producer-N, a 20s transaction timeout) write
// transactions of one to five records over random partitions of a topic
// of their own (txn), committing four in five and aborting the rest; each
// send names its transaction (txn-producer-N/seq) and each end is a txn
// operation: ok when the commit or abort asked for happened, fail when a
// commit was refused (ErrAbortRequired) and the abort after it succeeded,
// info when the end is unknown (an answer lost, a call out of time, the
// producer fenced). After an unknown end the producer is replaced by a new
// one with the same transactional id, whose InitTransactions settles the
// old transaction first. Two transformers, members of the group
// nemesis-txn, consume a plain topic (txn-in, filled by one more plain
// producer) and, per poll, produce one record per input (its value names
// the transaction and the input's position) to txn-out in a transaction
// that also commits the group's offsets (SendOffsetsToTransaction with the
// member's GroupMetadata); one in ten is aborted on purpose, after which
// the transformer seeks back and reads those inputs again, and after an
// unknown end it starts over with a new producer and then a new member.
// Their txn operations carry the group, the offsets and the inputs; their
// polls are not recorded. A read_committed consumer follows txn and
// txn-out from the start (its polls marked committed), and the final read
// reads those two read_committed as well: the read the checker judges lost
// and partly visible commits against, as the plain consumer and the group
// members, which read the other topics, keep reading them as before. The
// test fails when a run has no committed and no aborted transaction, or no
// committed transformation: then the transactional rules judged nothing.
//
// # The faults (faults.go)
//
//   - processes: SIGKILL of any one process, or of two at once (two storage
//     nodes, or a storage node and a controller); SIGSTOP of any one.
//   - network (netcut, nftables rules per cgroup): a storage node cut off
//     from the controllers one way; a partition's leader cut off from the
//     other storage nodes both ways; one controller split from the other
//     two.
//   - disk: a full tmpfs under a storage node (real ENOSPC, diskfull); EIO
//     on the next write or fsync and a power cut that drops what was not
//     fsynced (strata-storage --fault-injection, /debug/faults).
//   - membership: a move; a move cancelled once its replicas copied and
//     started again at once; a drain; a preferred-leader election; a third
//     of the random steps run one of these under another fault.
//   - dependencies: PostgreSQL crashed (immediate shutdown) and restarted;
//     the object store unreachable, or slow.
//   - transactions: the coordinator killed, or its PostgreSQL crashed, the
//     moment a transactional producer's commit is answered: the decision
//     is durable then and the markers are still to write (the kinds kill
//     and postgres-restart).
//   - answers (the faults that find a producer appending a batch twice):
//     a leader's answers to the clients dropped, and nothing else it
//     sends, for longer than the pipelined producers' delivery timeout
//     (netcut.CutAnswers on the test process's own cgroup); its answers
//     to the pipelined producers delayed past their calls' timeout (their
//     proxy); and an unrelated fatal error on the same producer, a record
//     over another topic's max.message.bytes every 100ms. Random steps
//     that lose or delay answers have the oversize fault alongside half
//     the time; the short schedule runs it alongside answers-late.
//
// To add a fault, write a function with fault's inject signature in
// faults.go: it injects the fault, says what it did in words, and returns
// the heal, which must leave every process running and every link and
// dependency working; inject gets 90 seconds and heal two minutes, after
// which the fault is noted as not injected or not healed (a call that
// waits for a cluster the fault itself broke must not hold the schedule).
// Add it to faults with a name and a kind (the checker's report groups
// unavailability by kind); the short schedule runs every entry once, so
// make test covers it from then on.
//
// # Reading a history
//
// The history is one JSON object per line (package history has the
// format): index, time, process, type (invoke, ok, fail, info), f (send,
// poll, commit, assign, reset, txn, fault) and the operation. To follow one
// anomaly, take the event indexes and values the checker lists, then find
// them in the file: a value's send (its invoke and its completion), every
// poll that returned it, and the fault events around them (their
// descriptions say which process or link was hit). Process names are
// producer-N, pipelined-N, compacted-producer, consumer, member-N,
// txn-producer-N, txn-in-producer, transformer-N, committed-consumer,
// final-read, final-read-committed and nemesis, and setup for the topic
// notes; a transaction's sends and end are those naming its id (the
// process and a sequence number); the processes of
// the cluster log to the test output under their names (storage-2, ...).
// A compacted topic's anomaly names its key: its sends are those with that
// key and topic, tombstone set on the deletes.
package nemesis
