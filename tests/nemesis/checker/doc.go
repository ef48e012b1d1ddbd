// Package checker judges a fault run's history (package history) the way
// Jepsen's Kafka workload does: from what clients were promised and what
// they read, with no access to the cluster. Check is pure and
// deterministic; its Result counts every anomaly, lists the first ones with
// the values, offsets and event indexes involved, and prints as a summary
// table.
//
// # Anomalies
//
// Each rule lives in the file named after its job:
//
//	lost.go       lost-write: an ok send never read anywhere, although polls
//	              returned its partition's offsets as far as its own or
//	              beyond. Not read that far: unread (informational; the
//	              suite's final full read leaves none).
//	offsets.go    duplicate: one value at two or more positions (reads and
//	              the send's acknowledgement together); inconsistent-offset:
//	              one position holding two or more values.
//	reads.go      aborted-read: a value read whose send failed; phantom-read:
//	              a value read that no send wrote; vanished-read: a record
//	              served, then gone: after the last poll that served it, a
//	              poll returned another value at its offset, or a read from
//	              before it reached the partition's end (Poll.AtEnd) short
//	              of it.
//	sends.go      nonmonotonic-send: per producer process, key and
//	              partition, an ok send invoked after another acknowledged at
//	              an offset at or below the other's.
//	polls.go      nonmonotonic-poll and poll-skip: per consumer process and
//	              partition, an offset at or below the previous one returned,
//	              or a jump over offsets some poll returned records at, with
//	              no assign of the partition (or a group rejoin, or the
//	              partition missing from a poll's assignment) in between. A
//	              skip across such a change is counted as a rebalance skip
//	              (informational).
//	commits.go    commit-backwards: per group and partition, an ok commit
//	              lower than an ok commit that completed before it was
//	              invoked, with no reset in between.
//	effects.go    effect-duplicate: a record a sink (client/pgsink) wrote two
//	              or more effect rows for; effect-missing: a record of a
//	              sink's topics, below the offset the sink reached, with
//	              no row; effect-wrong: a row whose position holds another
//	              value in the log, or was never read.
//	compacted.go  per key of a compacted topic, against the last complete
//	              read of its partition (a consumer set to an offset by an
//	              assign note's offsets, read on until Poll.AtEnd):
//	              stale-key: the read's last record of the key is neither
//	              the key's newest write acknowledged before the read began
//	              nor a send after it (at or above the acknowledged
//	              offset), or the read has no record of a key whose newest
//	              acknowledged write is a value; resurrected-key: the newest
//	              acknowledged write is a tombstone and the read shows an
//	              older value, a deleted key come back. A key with no
//	              acknowledged write, or sent by more than one process, is
//	              not judged. Result.Compaction counts what the reads
//	              cover and what the cleaner removed (informational).
//	txn.go        transactions (sends naming one, ended by a txn op), against
//	              the polls that read committed records only:
//	              txn-aborted-read (G1a), a record of an aborted
//	              transaction; txn-intermediate-read (G1b), a record of a
//	              transaction read before its producer asked to end it;
//	              txn-partly-visible, a committed transaction some of
//	              whose records such reads returned and others they read
//	              past; txn-lost-commit, one all of whose records they
//	              read past; txn-input-duplicate and txn-input-missing,
//	              an input record of consume-transform-produce
//	              transformed by two committed transactions, or by none
//	              though the group committed past it.
//	availability.go
//	              windows longer than Options.UnavailableAfter with no
//	              successful send (and, apart, poll) while some were
//	              attempted, with the faults active then and the longest
//	              window per fault kind (informational).
//
// # What the rules assume
//
//   - Values are unique per send: records are told apart by value.
//   - Index order is real-time order, as a Recorder gives it: "after"
//     means a higher event index, never a later wall-clock time (wall
//     clocks only measure the availability windows).
//   - Failed sends did not happen; info and pending sends may have: they are
//     never lost, and reading them once is no anomaly.
//   - Topics are not compacted unless a topic note (f topic) gives them a
//     cleanup.policy holding compact. Elsewhere a gap in offsets that some
//     poll returned records in is a skip, a record gone is vanished and an
//     acknowledged record never read is lost. In a compacted topic the
//     cleaner removes records and leaves gaps legitimately: lost-write,
//     poll-skip and vanished-read pass over it, and compacted.go judges
//     it by key. The rules about values and positions (duplicate,
//     inconsistent-offset, aborted-read, phantom-read) and about order
//     (nonmonotonic-send, nonmonotonic-poll) hold there as anywhere.
//   - Each key of a compacted topic is written by one producer, whose
//     records of a key land in the order it sent them: a key's order is
//     its sends' invoke order. A tombstone is a send with tombstone set;
//     its value names it, and reads report that name.
//   - Retention is not judged: a read that starts after an offset says
//     nothing about the record there.
//   - A topic written in transactions is judged by them: a committed read
//     legitimately passes over aborted records and markers, so
//     lost-write, poll-skip and vanished-read pass over it too, and
//     txn.go judges its records by their transaction. A transaction whose
//     end is unknown may have gone either way: it is judged only for a
//     committed read of it before its end was asked for.
//
// The judgement of a run is the history only: a run's history file read
// with history.ReadFile, or a Recorder's Events, given to Check.
package checker
