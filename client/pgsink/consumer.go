package pgsink

import (
	"context"
	"slices"

	"github.com/strata-mq/strata/client"
)

// Consumer is a member of a consumer group whose records are applied to
// PostgreSQL exactly once through a Sink: partitions it gains start at the
// sink's offsets, Apply commits a batch's writes and offsets in one
// transaction, then commits the same offsets to the group coordinator so
// the group's lag stays visible.
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
	s, err := newSink(ctx, db, group, cfg)
	if err != nil {
		return nil, err
	}
	gopts := append(slices.Clone(cfg.groupOpts), client.StartOffsets(s.Assign))
	gc, err := client.NewGroupConsumer(gateway, group, topics, gopts...)
	if err != nil {
		return nil, err
	}
	return &Consumer{sink: s, gc: gc, cfg: cfg}, nil
}

// Poll returns records of the partitions this member owns (see
// client.GroupConsumer.Poll); rebalances, and the sink's Assign for the
// partitions gained, run inside it.
func (c *Consumer) Poll(ctx context.Context) ([]*client.Record, error) { return c.gc.Poll(ctx) }

// Apply applies recs exactly once (Sink.Apply, whose Result it returns):
// fn makes the application's writes in the transaction that moves the
// sink's offsets. Once the
// transaction has committed, the AfterCommit hook runs and the offsets
// are committed to the group coordinator, best effort
// (OnGroupCommitError hears of a failure; Apply still returns nil).
//
// An error matching client.ErrFenced means the records of partitions this
// member no longer holds were left out (their new owner applies them) and
// the rest were applied. Any other error means nothing was applied: the
// partitions of recs are moved back to their first record, so Poll
// returns them again.
func (c *Consumer) Apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (Result, error) {
	res, fenced, err := c.sink.apply(ctx, recs, fn)
	if err != nil {
		c.rewind(recs)
		return Result{}, err
	}
	if len(res.Applied) > 0 {
		if c.cfg.afterCommit != nil {
			c.cfg.afterCommit(ctx, res.Next)
		}
		c.commitGroup(ctx, res.Applied)
	}
	return res, fenced
}

// rewind seeks each partition of recs that this member still holds back
// to its first record in recs.
func (c *Consumer) rewind(recs []*client.Record) {
	first := map[client.TopicPartition]int64{}
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if !c.sink.holds(tp, r.MemberEpoch) {
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

// Group is the group consumer underneath, for its member id, epoch and
// assignment. Committing through it is not needed (Apply does) and not
// harmful: the coordinator's offsets are a view of the sink's.
func (c *Consumer) Group() *client.GroupConsumer { return c.gc }

// Sink is the sink underneath.
func (c *Consumer) Sink() *Sink { return c.sink }

// Close leaves the group; the sink's offsets stay in the database for the
// partitions' next owners. Safe to call twice.
func (c *Consumer) Close(ctx context.Context) error { return c.gc.Close(ctx) }
