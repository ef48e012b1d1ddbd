package nemesis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// The transactional workload: transactional producers that commit most of
// their transactions and abort some, members of a group that consume,
// transform and produce in transactions that carry the group's offsets,
// and a consumer that reads committed records only. Each send names its
// transaction (Send.Txn) and each transaction's end is a txn operation,
// so that the checker (checker/txn.go) can judge what committed reads
// returned: every committed transaction whole, nothing of an aborted one,
// and every input transformed exactly once.

const (
	txnProducers = 2
	// txnTopic is written by the transactional producers alone, 1 to
	// txnMaxRecords records a transaction over random partitions, one
	// transaction every txnInterval or so (pacing), one in txnAbortEvery
	// aborted on purpose.
	txnTopic      = "txn"
	txnMaxRecords = 5
	txnInterval   = 50 * time.Millisecond
	txnAbortEvery = 5

	// txnInTopic is the transformers' input, written by a plain producer
	// every txnInInterval (pacing); txnOutTopic their output, one record
	// per input record in the transaction that commits the input's
	// offset for txnGroup. One transformation in transformAbortEvery is
	// aborted on purpose, after which the transformer reads its input
	// again.
	txnInTopic          = "txn-in"
	txnOutTopic         = "txn-out"
	txnGroup            = "nemesis-txn"
	transformers        = 2
	txnInInterval       = 30 * time.Millisecond
	transformAbortEvery = 10

	// txnTimeout is the transactional producers' TransactionTimeout: a
	// transaction a producer left open (its end unknown, the producer
	// replaced before it could say) is aborted by the coordinator after
	// it, so that committed reads get past it.
	txnTimeout = 20 * time.Second
	// txnCallTimeout bounds each commit, abort, offsets and init call;
	// one that runs out leaves the transaction's end unknown.
	txnCallTimeout = 30 * time.Second
)

// txnTopics are the topics written in transactions, read committed only
// (consumeCommitted, and the final read's second pass).
var txnTopics = []string{txnTopic, txnOutTopic}

// isTxnTopic reports whether topic is one of txnTopics.
func isTxnTopic(topic string) bool { return slices.Contains(txnTopics, topic) }

// plainTopics are r.topics but the transactional ones: what the plain
// consumer, the group members and the final read's first pass read.
func (r *run) plainTopics() []string {
	var out []string
	for _, t := range r.topics {
		if !isTxnTopic(t) {
			out = append(out, t)
		}
	}
	return out
}

// txnCounts tallies the transactions' outcomes for the report.
type txnCounts struct {
	committed, aborted, unknown int
}

// countTxns counts the transactions of events by how they ended: a
// commit answered ok; an abort answered ok, or a failure known to have
// aborted; anything else (info, or never answered) unknown.
func countTxns(events []history.Event) txnCounts {
	invoked := map[int64]bool{}
	var c txnCounts
	for _, ev := range events {
		if ev.F != history.FTxn {
			continue
		}
		switch {
		case ev.Type == history.Invoke:
			invoked[ev.Index] = true
			continue
		case ev.Type == history.Ok && ev.Txn.Commit:
			c.committed++
		case ev.Type == history.Ok, ev.Type == history.Fail:
			c.aborted++
		default:
			c.unknown++
		}
		delete(invoked, ev.Invoke)
	}
	c.unknown += len(invoked)
	return c
}

// txnEnd is how a transaction ended, as far as its producer knows.
type txnEnd int

const (
	txnUnknown txnEnd = iota
	txnCommitted
	txnAborted
)

// txnClient is a transactional producer of the workload that is replaced
// by a new one with the same transactional id when it is fenced or a
// transaction's end is unknown: InitTransactions then settles whatever
// the old one left open before the next transaction begins.
type txnClient struct {
	r    *run
	name string // the transactional id, and the process in the history
	p    *client.Producer
}

// producer returns the current producer, making and initializing a new
// one when there is none.
func (c *txnClient) producer(ctx context.Context) (*client.Producer, error) {
	if c.p != nil {
		return c.p, nil
	}
	p, err := client.NewProducer(c.r.bed.group.Gateway.URL, client.TransactionalID(c.name),
		client.TransactionTimeout(txnTimeout), client.ManualPartitioning(),
		client.DeliveryTimeout(20*time.Second), client.Linger(2*time.Millisecond))
	if err != nil {
		c.r.t.Errorf("nemesis: %s: %v", c.name, err)
		return nil, err
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnCallTimeout)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		c.r.t.Logf("nemesis: %s: %v", c.name, err)
		return nil, err
	}
	c.p = p
	return p, nil
}

// replace drops the current producer; the next call to producer makes a
// new one.
func (c *txnClient) replace() {
	if c.p != nil {
		c.p.Close()
		c.p = nil
	}
}

// send hands rec to p in transaction txnID, recording its send and
// outcome; sends is done once the outcome is in.
func (c *txnClient) send(ctx context.Context, p *client.Producer, txnID string, rec *client.Record, sends *sync.WaitGroup) {
	op := history.SendOp(rec.Topic, string(rec.Key), string(rec.Value))
	op.Send.Txn = txnID
	h := c.r.rec.Invoke(c.name, op)
	sends.Add(1)
	p.Produce(context.WithoutCancel(ctx), rec, func(rec *client.Record, err error) {
		defer sends.Done()
		if err != nil {
			// Not acknowledged: it may be in the log, under a transaction
			// that is then aborted (CommitTransaction refuses to commit
			// after a failed record).
			h.Info(err)
			return
		}
		h.SendOk(rec.Partition, rec.Offset)
	})
}

// end commits (t.Commit) or aborts the open transaction and records the
// end: ok when what was asked happened; fail when a commit was refused
// (ErrAbortRequired) and the abort that followed succeeded; info
// otherwise. It returns once every send of the transaction has its
// outcome. When the end is unknown the producer is replaced.
func (c *txnClient) end(ctx context.Context, p *client.Producer, t history.Txn, sends *sync.WaitGroup) txnEnd {
	h := c.r.rec.Invoke(c.name, history.TxnOp(t))
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnCallTimeout)
	defer cancel()
	var err error
	if t.Commit {
		err = p.CommitTransaction(cctx)
	} else {
		err = p.AbortTransaction(cctx)
	}
	end := txnUnknown
	switch {
	case err == nil:
		h.Ok(h.Op())
		end = txnAborted
		if t.Commit {
			end = txnCommitted
			c.r.atCommitHook(c.name, t.ID)
		}
	case t.Commit && errors.Is(err, client.ErrAbortRequired):
		if aerr := p.AbortTransaction(cctx); aerr != nil {
			h.Info(fmt.Errorf("%w; then the abort: %w", err, aerr))
			break
		}
		h.Fail(err)
		end = txnAborted
	default:
		// The answer was lost, the call ran out of time, or the producer
		// was fenced: the transaction may have gone either way.
		h.Info(err)
	}
	sends.Wait()
	if end == txnUnknown {
		c.replace()
	}
	return end
}

// produceTxn runs transactional producer id until ctx ends: a
// transaction of 1 to txnMaxRecords records to random partitions of
// txnTopic every txnInterval, most committed, one in txnAbortEvery
// aborted.
func (r *run) produceTxn(ctx context.Context, id int, rng *rand.Rand) {
	c := &txnClient{r: r, name: fmt.Sprintf("txn-producer-%d", id)}
	defer c.replace()
	for seq := 0; sleep(ctx, txnInterval); seq++ {
		p, err := c.producer(ctx)
		if err != nil {
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if err := p.BeginTransaction(); err != nil {
			c.replace()
			continue
		}
		txnID := fmt.Sprintf("%s/%d", c.name, seq)
		var sends sync.WaitGroup
		for i := range 1 + rng.IntN(txnMaxRecords) {
			c.send(ctx, p, txnID, &client.Record{Topic: txnTopic, Partition: rng.Int32N(r.partitions),
				Key: fmt.Appendf(nil, "k%d", rng.IntN(keysPerTopic)), Value: fmt.Appendf(nil, "%s/%d", txnID, i)}, &sends)
		}
		c.end(ctx, p, history.Txn{ID: txnID, Commit: rng.IntN(txnAbortEvery) != 0}, &sends)
	}
}

// produceTxnInput fills the transformers' input topic with a plain
// producer until ctx ends.
func (r *run) produceTxnInput(ctx context.Context, rng *rand.Rand) {
	const name = "txn-in-producer"
	p, err := client.NewProducer(r.bed.group.Gateway.URL, client.DeliveryTimeout(30*time.Second), client.Linger(2*time.Millisecond))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer p.Close()
	s := r.newSender(ctx, p, name, inFlight)
	for n := 0; sleep(ctx, txnInInterval); n++ {
		s.send(ctx, txnInTopic, n, rng)
	}
	s.wait()
}

// transform runs transformer id, a member of txnGroup over txnInTopic,
// until ctx ends: for every poll that returns records, a transaction
// that produces one record to txnOutTopic per input (the value names the
// transaction and the input's position) and commits the group's offsets
// past them (SendOffsetsToTransaction). After a known abort it reads the
// inputs again (Seek); after an unknown end it starts over with a new
// producer, which settles the old transaction, and then a new member,
// which starts from the group's committed offsets. Its polls are not in
// the history: each transaction's Inputs say what it read.
func (r *run) transform(ctx context.Context, id int, rng *rand.Rand) {
	c := &txnClient{r: r, name: fmt.Sprintf("transformer-%d", id)}
	defer c.replace()
	var g *client.GroupConsumer
	leave := func() {
		if g != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			g.Close(cctx)
			g = nil
		}
	}
	defer leave()
	for seq := 0; ctx.Err() == nil; {
		p, err := c.producer(ctx)
		if err != nil {
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if g == nil {
			if g, err = client.NewGroupConsumer(r.bed.group.Gateway.URL, txnGroup, []string{txnInTopic}, client.ClientID(c.name)); err != nil {
				r.t.Errorf("nemesis: %s: %v", c.name, err)
				return
			}
		}
		recs, err := pollOnce(ctx, 2*time.Second, g.Poll)
		if err != nil || len(recs) == 0 {
			if err != nil {
				sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		seq++
		if !r.transformOnce(ctx, c, p, g, fmt.Sprintf("%s/%d", c.name, seq), recs, rng) {
			// Unknown: a new producer (made at the top of the loop) settles
			// the transaction before a new member reads the offsets.
			leave()
		}
	}
}

// transformOnce transforms recs in transaction txnID and reports whether
// its end is known. After a known abort it seeks the partitions of recs
// back to their first record, so that the next poll reads them again.
func (r *run) transformOnce(ctx context.Context, c *txnClient, p *client.Producer, g *client.GroupConsumer, txnID string, recs []*client.Record, rng *rand.Rand) bool {
	if err := p.BeginTransaction(); err != nil {
		c.replace()
		return false
	}
	var sends sync.WaitGroup
	t := history.Txn{ID: txnID, Commit: rng.IntN(transformAbortEvery) != 0, Group: txnGroup}
	for _, in := range recs {
		t.Inputs = append(t.Inputs, history.PartitionOffset{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset})
		c.send(ctx, p, txnID, &client.Record{Topic: txnOutTopic, Partition: in.Partition, Key: in.Key,
			Value: fmt.Appendf(nil, "%s:%s-%d@%d", txnID, in.Topic, in.Partition, in.Offset)}, &sends)
	}
	next := client.NextOffsets(recs)
	for tp, off := range next {
		t.Offsets = append(t.Offsets, history.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	slices.SortFunc(t.Offsets, func(a, b history.PartitionOffset) int { return cmp.Compare(a.Partition, b.Partition) })
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnCallTimeout)
	err := p.SendOffsetsToTransaction(octx, g.GroupMetadata(), next)
	cancel()
	if err != nil {
		// The offsets may or may not be staged (a fenced member, a call
		// that ran out of time): abort rather than commit them unknown.
		t.Commit = false
	}
	switch c.end(ctx, p, t, &sends) {
	case txnUnknown:
		return false
	case txnAborted:
		first := map[client.TopicPartition]int64{}
		for _, in := range recs {
			tp := client.TopicPartition{Topic: in.Topic, Partition: in.Partition}
			if o, ok := first[tp]; !ok || in.Offset < o {
				first[tp] = in.Offset
			}
		}
		for tp, off := range first {
			_ = g.Seek(tp, off) // not owned any more: its next owner reads it from the committed offset
		}
	}
	return true
}

// consumeCommitted follows every partition of the transactional topics
// from the start, reading committed records only, until ctx ends.
func (r *run) consumeCommitted(ctx context.Context) {
	r.follow(ctx, "committed-consumer", txnTopics, true)
}

// transformsCommitted counts the committed consume-transform-produce
// transactions of the history so far.
func (r *run) transformsCommitted() int {
	n := 0
	for _, ev := range r.rec.Events() {
		if ev.F == history.FTxn && ev.Type == history.Ok && ev.Txn.Commit && ev.Txn.Group != "" {
			n++
		}
	}
	return n
}
