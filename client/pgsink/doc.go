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
// record not yet applied, and a generation.
//
//   - Seek on assignment. When the group coordinator assigns the member a
//     partition, Assign (the consumer's client.StartOffsets hook) bumps
//     the partition's generation in one statement and reads its offset;
//     the consumer starts reading there, not at the group's committed
//     offset. The generation it got is the member's fencing token for the
//     partition.
//   - One transaction per batch. Apply locks the rows of the batch's
//     partitions (SELECT ... FOR UPDATE), leaves out every partition whose
//     generation is no longer the member's token (a newer assignment
//     bumped it: this member is a zombie there) and every record before
//     the row's offset (already applied, by an earlier transaction whose
//     outcome the application did not learn, or twice in the batch), runs
//     the application's function on the rest in the same transaction, then
//     moves the rows' offsets past them, checking the generation again,
//     and commits.
//   - Fencing. An assignment's generation bump waits for the row lock, so
//     it comes after any transaction of the previous owner that holds it,
//     and reads that transaction's offset; any transaction of the previous
//     owner that comes after it finds a newer generation and leaves the
//     partition out. Records the member read under an earlier assignment of
//     a partition it was given again (Record.MemberEpoch below the epoch of
//     the new assignment) are left out too: the new assignment started at
//     the database's offset.
//   - Visibility. After the transaction commits, the Consumer commits the
//     same offsets to the group coordinator, best effort, so `strata group
//     describe` shows the group's lag. Those offsets are only a view: a
//     member that dies between the two commits leaves the coordinator
//     behind, and the next owner starts from the database anyway.
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
// on its schema). Its layout is part of the format; do not change it:
//
//	CREATE TABLE strata_sink_offsets (
//	    group_id        text        NOT NULL,
//	    topic           text        NOT NULL,
//	    partition_index integer     NOT NULL,
//	    next_offset     bigint      NOT NULL, -- first offset not applied; -1: none applied yet
//	    generation      bigint      NOT NULL, -- bumped by every assignment; the fencing token
//	    updated_at      timestamptz NOT NULL DEFAULT now(),
//	    PRIMARY KEY (group_id, topic, partition_index)
//	)
//
// A partition whose row says -1 starts at the group's committed offset, or
// at client.StartWhenNoCommit when there is none, so a group that
// committed to the coordinator before it used the sink goes on from there.
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
