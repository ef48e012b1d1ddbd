// Package pgsink delivers a consumer group's records into PostgreSQL
// exactly once: the application's writes for a batch of records and the
// offsets after them commit in one database transaction, each partition
// starts at the offsets the database holds, and a member that lost a
// partition cannot commit a transaction for it.
//
// A Consumer is a client.GroupConsumer wired to a Sink:
//
//	c, err := pgsink.NewConsumer(ctx, pool, "http://127.0.0.1:9092", "billing", []string{"orders"})
//	for {
//		recs, err := c.Poll(ctx)
//		...
//		_, err = c.Apply(ctx, recs, func(ctx context.Context, tx pgx.Tx, recs []*client.Record) error {
//			// the application's writes, in tx
//		})
//	}
//
// # How it works
//
// Offsets live in the sink's table (strata_sink_offsets unless Table says
// otherwise), one row per group and partition: the offset of the first
// record not yet applied, a generation, the topic id, and the gaps.
//
//   - Seek on assignment. When the group coordinator assigns the member a
//     partition, Assign (the consumer's client.StartOffsets hook, run once
//     a heartbeat has confirmed the member still belongs to the group)
//     bumps the partition's generation and reads its offset; the consumer
//     starts reading there, not at the group's committed offset. The
//     generation it got is the member's fencing token for the partition.
//   - Pending assignment. A row another session holds (the previous
//     owner's transaction in flight, or a paused member's) is not waited
//     for, so it cannot hold up the member's other partitions: Assign
//     starts the partition at its last committed offset and leaves it
//     pending. Apply bumps the generation once the row is free (waiting up
//     to LockTimeout when it has nothing else to apply) and leaves the
//     partition's records out until then (Result.Pending); the Consumer
//     reads them again.
//   - One transaction per batch. Apply locks the rows of the batch's
//     partitions still at the member's generation (SELECT ... FOR UPDATE),
//     leaves out every partition whose generation is no longer the
//     member's token (a newer assignment bumped it: this member is a
//     zombie there) and every record before the row's offset (already
//     applied, by an earlier transaction whose outcome the application did
//     not learn, or twice in the batch), runs the application's function
//     on the rest in the same transaction, then moves the rows' offsets
//     past them, checking the generation again, and commits.
//   - Fencing. An assignment's generation bump waits for the row lock, so
//     it comes after any transaction of the previous owner that holds it,
//     and reads that transaction's offset; any transaction of the previous
//     owner that comes after it finds a newer generation and leaves the
//     partition out. Records the member read under an earlier assignment of
//     a partition it was given again (Record.MemberEpoch below the epoch of
//     the new assignment) are left out too: the new assignment started at
//     the database's offset.
//   - Taking a partition back. A member cut off from the coordinator may
//     run Assign for a partition the coordinator has since given to
//     another member, fencing the rightful owner. When an Apply of the
//     Consumer is fenced on a partition, it asks the coordinator
//     (client.GroupConsumer.ConfirmMembership) and, when the coordinator's
//     answer still assigns it the partition, assigns it again through the
//     sink and reads it from the sink's offset. A member that cannot reach the coordinator
//     never does.
//   - Timeouts. Every transaction of the sink runs with lock_timeout
//     (LockTimeout, default 10s) and idle_in_transaction_session_timeout
//     (IdleInTransactionTimeout, default 1 minute) set locally, so a member
//     paused inside its transaction loses its session, and its row locks,
//     after a minute instead of holding its partitions for good.
//   - Recreated topics. A topic deleted and created again under the same
//     name is a new log from offset 0; its rows would skip every record
//     below the old topic's offset. The row keeps the topic id of the
//     records applied (client.Record.TopicID), and Apply refuses records of
//     another id with ErrTopicRecreated, applying nothing, and says how to
//     start the new topic afresh (delete its rows, reset the group's
//     offsets).
//   - Gaps. When retention or a deletion of records moved a partition's
//     log start past the row's offset before the records were applied, the
//     consumer can only read on after the gap. Under FailOnGap (the
//     default, as a Kafka consumer with auto.offset.reset=none) Apply
//     fails with a *GapError (ErrGap) naming the offsets lost, and applies
//     nothing; under RecordGapAndContinue it adds the gap to the row
//     (gap_offsets, last_gap_from, last_gap_to, last_gap_at) in the
//     transaction that applies the records after it, logs it, tells OnGap
//     and goes on. A jump over offsets the log still starts before
//     (compaction, control batches) is no gap.
//   - Visibility. After the transaction commits, the Consumer commits the
//     same offsets to the group coordinator, best effort, so `strata group
//     describe` shows the group's lag. Those offsets are only a view: a
//     member that dies between the two commits leaves the coordinator
//     behind, and the next owner starts from the database anyway. The
//     Consumer's Group() is read-only (Member): a commit through it could
//     move the coordinator's offsets past records Apply has not applied.
//
// The generation is the sink's own rather than the coordinator's member
// epoch: member epochs do grow across the members of a group (they are
// values of one group epoch), but they start again from 1 when the group
// is deleted and live in another database, so offsets rows written under
// old epochs could refuse every new member. A generation bumped in the
// database that holds the effects is ordered by that database's row locks
// and needs nothing else to be right.
//
// # The table
//
// New creates the table when it does not exist (the role then needs CREATE
// on its schema), and adds the columns after updated_at to a table made
// before them (the role then needs to own it). Its layout is part of the
// format; do not change it:
//
//	CREATE TABLE strata_sink_offsets (
//	    group_id        text        NOT NULL,
//	    topic           text        NOT NULL,
//	    partition_index integer     NOT NULL,
//	    next_offset     bigint      NOT NULL, -- first offset not applied; -1: none applied yet
//	    generation      bigint      NOT NULL, -- bumped by every assignment; the fencing token
//	    updated_at      timestamptz NOT NULL DEFAULT now(),
//	    topic_id        text        NOT NULL DEFAULT '', -- of the records applied; '' until then
//	    gap_offsets     bigint      NOT NULL DEFAULT 0,  -- offsets passed over in recorded gaps
//	    last_gap_from   bigint,                          -- the last recorded gap: [from, to)
//	    last_gap_to     bigint,
//	    last_gap_at     timestamptz,
//	    PRIMARY KEY (group_id, topic, partition_index)
//	)
//
// A partition whose row says -1 starts at the group's committed offset, or
// at client.StartWhenNoCommit when there is none, so a group that
// committed to the coordinator before it used the sink goes on from there.
// A row without a topic id (made before topic ids were kept) takes the id
// of the first records applied to it.
//
// # When to use it
//
// Use it when the effects of a record are not idempotent: a running total,
// a counter, an append, a state machine that must see each event once and
// in order. When each record's effect can be written so that applying it
// twice changes nothing (an upsert keyed by the record's own id that sets
// columns from the record alone, an insert that ignores a conflict on the
// record's topic, partition and offset), idempotent writes with the
// group's ordinary at-least-once commits are simpler: no offsets table, no
// transaction spanning the batch, and any store works.
package pgsink
