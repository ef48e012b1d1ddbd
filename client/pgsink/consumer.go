package pgsink

import (
	"context"
	"fmt"
	"slices"

	"github.com/strata-mq/strata/client"
)

// Consumer is a member of a consumer group whose records are applied to
// PostgreSQL exactly once through a Sink: partitions it gains start at the
// sink's offsets, Apply commits a batch's writes and offsets in one
// transaction, then commits the same offsets to the group coordinator so
// the group's lag stays visible.
//
// Group() is a read-only view of the membership: committing through the
// group consumer is not possible, so the coordinator's offsets never pass
// records Apply has not applied.
//
// Poll must not be called concurrently, and Apply is meant to be called
// between Polls, from the goroutine that polls (a failed Apply moves the
// partitions back for the next Poll). Every batch Poll returns should be
// passed to Apply, in order, before the next one of the same partitions:
// the sink's offset moves past the last record applied, so a batch left
// out and a later one applied would skip the first.
type Consumer struct {
	sink *Sink
	gc   *client.GroupConsumer
	cfg  config
}

// NewConsumer makes the sink of a new member of group (New) and joins the
// group through the gateway at the given base URL, subscribed to topics.
func NewConsumer(ctx context.Context, db DB, gateway, group string, topics []string, opts ...Opt) (*Consumer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	c := &Consumer{cfg: cfg}
	cfg.logStart = func(tp client.TopicPartition) (int64, bool) { return c.gc.LogStartOffset(tp.Topic, tp.Partition) }
	s, err := newSink(ctx, db, group, cfg)
	if err != nil {
		return nil, err
	}
	c.sink = s
	// AutoCommit forced off: it would commit what Poll returned, applied
	// or not.
	gopts := append(slices.Clone(cfg.groupOpts), client.AutoCommit(0), client.StartOffsets(c.assign))
	gc, err := client.NewGroupConsumer(gateway, group, topics, gopts...)
	if err != nil {
		return nil, err
	}
	c.gc = gc
	return c, nil
}

// assign is the group consumer's StartOffsets hook: the sink's Assign,
// once the coordinator has confirmed this member still belongs to the
// group. A member cut off from the coordinator may still hold an
// assignment the coordinator has since given to another member; its
// Assign would bump the generation under the rightful owner and fence it.
func (c *Consumer) assign(ctx context.Context, memberEpoch int32, tps []client.TopicPartition) (map[client.TopicPartition]int64, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.groupCommitTimeout)
	_, err := c.gc.ConfirmMembership(cctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("pgsink: confirm membership before taking %d partitions: %w", len(tps), err)
	}
	return c.sink.Assign(ctx, memberEpoch, tps)
}

// Poll returns records of the partitions this member owns (see
// client.GroupConsumer.Poll); rebalances, and the sink's Assign for the
// partitions gained, run inside it.
func (c *Consumer) Poll(ctx context.Context) ([]*client.Record, error) { return c.gc.Poll(ctx) }

// Apply applies recs exactly once (Sink.Apply, whose Result it returns):
// fn makes the application's writes in the transaction that moves the
// sink's offsets. Once the transaction has committed, the AfterCommit
// hook runs and the offsets are committed to the group coordinator, best
// effort (OnGroupCommitError hears of a failure; Apply still returns nil).
// Records of partitions whose assignment is pending (Result.Pending) are
// left out and read again by the next Poll, without an error.
//
// An error matching client.ErrFenced means the records of partitions this
// member no longer holds were left out (their new owner applies them) and
// the rest were applied; a fenced partition the coordinator confirms this
// member still owns is assigned again through the sink and read again
// from its offset. Any other error means nothing was applied: the
// partitions of recs are moved back to their first record, so Poll
// returns them again. With ErrGap (under FailOnGap) and ErrTopicRecreated
// that repeats until an operator acts on the error.
func (c *Consumer) Apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (Result, error) {
	res, fenced, err := c.sink.apply(ctx, recs, fn)
	if err != nil {
		c.rewind(recs, nil)
		return Result{}, err
	}
	c.sink.told(res)
	if len(res.Pending) > 0 {
		c.rewind(recs, setOf(res.Pending))
	}
	if len(res.Applied) > 0 {
		if c.cfg.afterCommit != nil {
			c.cfg.afterCommit(ctx, res.Next)
		}
		c.commitGroup(ctx, res.Applied)
	}
	if fenced != nil {
		c.reclaim(ctx, res.Fenced, recs)
	}
	return res, fenced
}

// reclaim assigns again, through the sink, the fenced partitions this
// member still owns according to the coordinator, and moves them to the
// sink's offsets. A member cut off from the coordinator may have run the
// sink's Assign after its partition went to this member (see assign);
// without this, this member would keep the partition in the group while
// every Apply left its records out, and nobody would apply them.
// Partitions whose records were only read before their current assignment
// (Record.MemberEpoch) are still held and left alone.
func (c *Consumer) reclaim(ctx context.Context, fenced []client.TopicPartition, recs []*client.Record) {
	epoch := c.gc.Epoch()
	var lost []client.TopicPartition
	for _, tp := range fenced {
		if !c.sink.holds(tp, epoch) {
			lost = append(lost, tp)
		}
	}
	if len(lost) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.groupCommitTimeout)
	target, err := c.gc.ConfirmMembership(cctx)
	cancel()
	if err != nil {
		return // not confirmed: this member may be the one cut off
	}
	// Owned, and not being revoked: a partition the coordinator has moved
	// to another member is that member's to assign.
	owned, assigned := setOf(c.gc.Assignment()), setOf(target)
	epoch = c.gc.Epoch()
	var again []client.TopicPartition
	for _, tp := range lost {
		if owned[tp] && assigned[tp] {
			again = append(again, tp)
		}
	}
	if len(again) == 0 {
		return
	}
	start, err := c.sink.Assign(ctx, epoch, again)
	if err != nil {
		return // the next Apply of their records is fenced again and retries
	}
	first := firstOffsets(recs)
	for _, tp := range again {
		o, ok := start[tp]
		if !ok {
			// Never applied: read again from where this batch started.
			if o, ok = first[tp]; !ok {
				continue
			}
		}
		_ = c.gc.Seek(tp, o) // not owned any more: its next owner reads it
	}
}

// firstOffsets returns the offset of the first record of each partition
// in recs.
func firstOffsets(recs []*client.Record) map[client.TopicPartition]int64 {
	first := map[client.TopicPartition]int64{}
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if o, ok := first[tp]; !ok || r.Offset < o {
			first[tp] = r.Offset
		}
	}
	return first
}

// rewind seeks each partition of recs (of only, when not nil) that this
// member still holds back to its first record in recs.
func (c *Consumer) rewind(recs []*client.Record, only map[client.TopicPartition]bool) {
	first := map[client.TopicPartition]int64{}
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if only != nil && !only[tp] || !c.sink.holds(tp, r.MemberEpoch) {
			continue
		}
		if o, ok := first[tp]; !ok || r.Offset < o {
			first[tp] = r.Offset
		}
	}
	for tp, o := range first {
		_ = c.gc.Seek(tp, o) // not owned any more: its next owner reads it
	}
}

// commitGroup commits the position after the last applied record of each
// partition to the group coordinator.
func (c *Consumer) commitGroup(ctx context.Context, applied []*client.Record) {
	last := map[client.TopicPartition]*client.Record{}
	for _, r := range applied {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if l := last[tp]; l == nil || r.Offset > l.Offset {
			last[tp] = r
		}
	}
	recs := make([]*client.Record, 0, len(last))
	for _, tp := range sortedKeys(last) {
		recs = append(recs, last[tp])
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.groupCommitTimeout)
	defer cancel()
	if err := c.gc.CommitRecords(cctx, recs...); err != nil && c.cfg.onGroupCommitError != nil {
		c.cfg.onGroupCommitError(err)
	}
}

// Group is the membership of the group consumer underneath, read only:
// its member id, epoch, assignment and positions. It cannot commit or
// seek: a commit to the coordinator of records Poll returned and Apply did
// not apply would move the group's offsets past them, and a tool that
// reads them (strata group describe, a consumer of the group that does
// not use the sink) would take them as done.
func (c *Consumer) Group() Member { return Member{gc: c.gc} }

// Member is the read-only view of a Consumer's group membership. Safe for
// concurrent use.
type Member struct{ gc *client.GroupConsumer }

// MemberID is the member id the consumer joined with.
func (m Member) MemberID() string { return m.gc.MemberID() }

// Epoch is the member epoch last granted (0 before joining).
func (m Member) Epoch() int32 { return m.gc.Epoch() }

// Assignment returns the partitions the member owns now, sorted.
func (m Member) Assignment() []client.TopicPartition { return m.gc.Assignment() }

// Position returns the next offset Poll returns from an owned partition.
func (m Member) Position(topic string, partition int32) (int64, bool) {
	return m.gc.Position(topic, partition)
}

// HighWatermark returns the last high watermark seen for a partition.
func (m Member) HighWatermark(topic string, partition int32) (int64, bool) {
	return m.gc.HighWatermark(topic, partition)
}

// LogStartOffset returns the last log start offset seen for an owned
// partition.
func (m Member) LogStartOffset(topic string, partition int32) (int64, bool) {
	return m.gc.LogStartOffset(topic, partition)
}

// Sink is the sink underneath.
func (c *Consumer) Sink() *Sink { return c.sink }

// Close leaves the group; the sink's offsets stay in the database for the
// partitions' next owners. Safe to call twice.
func (c *Consumer) Close(ctx context.Context) error { return c.gc.Close(ctx) }
