package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// The workload: idempotent acks=all producers write unique values, a
// plain consumer follows every partition from the start, and a consumer
// group reads and commits. Every operation goes into the run's history;
// the checker judges it afterwards.

const (
	producers    = 3
	groupMembers = 3
	groupName    = "nemesis"
	keysPerTopic = 24
	// sendInterval paces each producer (pacing: how many operations a run
	// records, not what is judged).
	sendInterval = 15 * time.Millisecond
	// inFlight bounds each producer's unacknowledged records.
	inFlight = 16
	// quietTopic gets one send in quietEvery, so its partitions stay idle
	// for seconds at a time.
	quietTopic = "quiet"
	quietEvery = 150
)

// topicFor picks the topic of the next send: the quiet topic once in
// quietEvery, else one of the busy ones. The pipelined and compacted
// topics are not among them: their own producers write them alone
// (pipeline.go, compacted.go).
func (r *run) topicFor(rng *rand.Rand) string {
	if rng.IntN(quietEvery) == 0 {
		return quietTopic
	}
	var busy []string
	for _, t := range r.topics {
		if t != quietTopic && t != pipelineTopic && t != compactedTopic && t != txnInTopic && !isTxnTopic(t) {
			busy = append(busy, t)
		}
	}
	return pick(rng, busy)
}

// produce runs one producer until ctx ends, then waits for its records'
// outcomes (up to the delivery timeout) and closes it.
func (r *run) produce(ctx context.Context, id int, rng *rand.Rand) {
	name := fmt.Sprintf("producer-%d", id)
	p, err := client.NewProducer(r.bed.group.Gateway.URL, client.DeliveryTimeout(30*time.Second), client.Linger(2*time.Millisecond))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer p.Close()
	s := r.newSender(ctx, p, name, inFlight)
	for n := 0; sleep(ctx, sendInterval); n++ {
		s.send(ctx, r.topicFor(rng), n, rng)
	}
	s.wait()
}

// sender is one producer of the workload whose records go into the
// history: a send's invoke when the record is handed to the producer, its
// outcome when the producer answers. send runs on one goroutine; the
// producer's callbacks on others.
type sender struct {
	r    *run
	p    *client.Producer
	name string
	// ctx is the records' own: stopping the workload must not cancel
	// records in flight, whose outcome the history needs.
	ctx context.Context
	sem chan struct{}  // a slot per unacknowledged record
	wg  sync.WaitGroup // records not yet answered
}

// newSender is the sender called name over p, with at most inFlight
// records unacknowledged.
func (r *run) newSender(ctx context.Context, p *client.Producer, name string, inFlight int) *sender {
	return &sender{r: r, p: p, name: name, ctx: context.WithoutCancel(ctx), sem: make(chan struct{}, inFlight)}
}

// send sends record n of the sender to topic under a random key, once a
// slot is free; nothing is sent if ctx ends first.
func (s *sender) send(ctx context.Context, topic string, n int, rng *rand.Rand) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	s.produce(topic, fmt.Sprintf("k%d", rng.IntN(keysPerTopic)), n, false)
}

// sendKey sends record n of the sender to topic under key, a tombstone
// when tombstone is set, once a slot is free. It reports whether it sent:
// nothing is sent if ctx ends first.
func (s *sender) sendKey(ctx context.Context, topic, key string, n int, tombstone bool) bool {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	s.produce(topic, key, n, tombstone)
	return true
}

// valueHeader carries a tombstone's value, which names its send in the
// history, since the record itself has none.
const valueHeader = "nemesis-value"

// produce hands record n to the producer, its slot taken, and records its
// send and outcome in the history.
func (s *sender) produce(topic, key string, n int, tombstone bool) {
	value := fmt.Sprintf("%s-%d", s.name, n)
	rec := &client.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}
	op := history.SendOp(topic, key, value)
	if tombstone {
		rec.Value, rec.Headers = nil, []client.Header{{Key: valueHeader, Value: []byte(value)}}
		op = history.TombstoneOp(topic, key, value)
	}
	h := s.r.rec.Invoke(s.name, op)
	s.wg.Add(1)
	s.p.Produce(s.ctx, rec, func(rec *client.Record, err error) {
		defer s.wg.Done()
		defer func() { <-s.sem }()
		if err != nil {
			// Not acknowledged: it may or may not be in the log.
			h.Info(err)
			return
		}
		h.SendOk(rec.Partition, rec.Offset)
	})
}

// wait waits for the outcome of every record sent.
func (s *sender) wait() { s.wg.Wait() }

// records converts consumed records for the history. A tombstone's value
// is the one its header carries (valueHeader).
func records(recs []*client.Record) []history.Record {
	out := make([]history.Record, len(recs))
	for i, rec := range recs {
		out[i] = history.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: string(rec.Key), Value: string(rec.Value)}
		if rec.Value == nil {
			out[i].Tombstone = true
			for _, h := range rec.Headers {
				if h.Key == valueHeader {
					out[i].Value = string(h.Value)
				}
			}
		}
	}
	return out
}

func topicPartitions(tps []client.TopicPartition) []history.TopicPartition {
	out := make([]history.TopicPartition, len(tps))
	for i, tp := range tps {
		out[i] = history.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
	}
	return out
}

// pollOnce is one Poll bounded by wait; a wait that ends with nothing to
// read is an ok poll of no records.
func pollOnce(ctx context.Context, wait time.Duration, poll func(context.Context) ([]*client.Record, error)) ([]*client.Record, error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	recs, err := poll(pctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return recs, nil
	}
	return recs, err
}

// consume follows every partition of every topic but the transactional
// ones (consumeCommitted reads those) from the start with a plain
// consumer until ctx ends.
func (r *run) consume(ctx context.Context) {
	r.follow(ctx, "consumer", r.plainTopics(), false)
}

// follow reads every partition of topics from the start with a plain
// consumer called name until ctx ends, recording each poll; committed
// reads committed records only (read_committed, Poll.Committed).
func (r *run) follow(ctx context.Context, name string, topics []string, committed bool) {
	var opts []client.ConsumerOpt
	if committed {
		opts = append(opts, client.ReadCommitted())
	}
	c, err := client.NewConsumer(r.bed.group.Gateway.URL, opts...)
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer c.Close()
	assign := map[string]map[int32]client.Offset{}
	for _, t := range topics {
		assign[t] = map[int32]client.Offset{}
		for p := range r.partitionsOf(t) {
			assign[t][p] = client.StartOffset()
		}
	}
	c.Assign(assign)
	for ctx.Err() == nil {
		h := r.rec.Invoke(name, history.PollOp("", ""))
		recs, err := pollOnce(ctx, 2*time.Second, c.Poll)
		if err != nil {
			h.Fail(err) // a failed poll returned nothing
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		h.PollOk(history.Poll{Records: records(recs), Committed: committed})
	}
}

// groupMember is one member of the consumer group: it polls, records what
// it read under which assignment, and commits after each poll, until ctx
// ends; then it leaves the group.
func (r *run) groupMember(ctx context.Context, id int) {
	name := fmt.Sprintf("member-%d", id)
	var g *client.GroupConsumer
	note := func(revoked, assigned []client.TopicPartition) {
		r.rec.Note(name, history.AssignOp(history.Assign{Group: groupName, Member: g.MemberID(), Epoch: g.Epoch(),
			Revoked: topicPartitions(revoked), Assigned: topicPartitions(assigned)}))
	}
	g, err := client.NewGroupConsumer(r.bed.group.Gateway.URL, groupName, r.plainTopics(),
		client.OnAssigned(func(_ context.Context, tps []client.TopicPartition) { note(nil, tps) }),
		client.OnRevoked(func(_ context.Context, tps []client.TopicPartition) { note(tps, nil) }),
		client.ClientID(name))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		g.Close(cctx)
	}()
	for ctx.Err() == nil {
		h := r.rec.Invoke(name, history.PollOp(groupName, g.MemberID()))
		recs, err := pollOnce(ctx, 2*time.Second, g.Poll)
		if err != nil {
			h.Fail(err)
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		h.PollOk(history.Poll{Group: groupName, Member: g.MemberID(), Epoch: g.Epoch(),
			Assigned: topicPartitions(g.Assignment()), Records: records(recs)})
		if len(recs) == 0 {
			continue
		}
		next := map[history.TopicPartition]int64{}
		var epoch int32
		for _, rec := range recs {
			next[history.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}] = rec.Offset + 1
			epoch = rec.MemberEpoch
		}
		var offsets []history.PartitionOffset
		for tp, off := range next {
			offsets = append(offsets, history.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
		}
		ch := r.rec.Invoke(name, history.CommitOp(groupName, g.MemberID(), epoch, offsets...))
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = g.CommitRecords(cctx, recs...)
		cancel()
		switch {
		case err == nil:
			ch.Ok(ch.Op())
		case errors.Is(err, client.ErrFenced):
			ch.Fail(err) // refused: the member lost the partitions
		default:
			ch.Info(err)
		}
	}
}

// finalRead reads every partition from the start to its end with fresh
// consumers, once the faults are healed, and marks the last poll of each
// partition as having reached its end: the checker's complete read. The
// transactional topics are read committed only (final-read-committed),
// the read the checker judges lost and partly visible commits by; the
// others as the plain consumer reads them (final-read). It returns the
// end offsets it read to.
func (r *run) finalRead(ctx context.Context) (map[history.TopicPartition]int64, error) {
	ends, err := r.readToEnd(ctx, "final-read", r.plainTopics(), false)
	if err != nil {
		return nil, err
	}
	committed, err := r.readToEnd(ctx, "final-read-committed", txnTopics, true)
	if err != nil {
		return nil, err
	}
	maps.Copy(ends, committed)
	return ends, nil
}

// readToEnd reads every partition of topics from its log start to its
// end with a fresh consumer, as process name, reading committed records
// only when committed is set. An assign note first says which offset
// each partition is read from, so that the checker knows the read is
// whole. It returns the end offsets it read to.
func (r *run) readToEnd(ctx context.Context, name string, topics []string, committed bool) (map[history.TopicPartition]int64, error) {
	var opts []client.ConsumerOpt
	if committed {
		opts = append(opts, client.ReadCommitted())
	}
	c, err := client.NewConsumer(r.bed.group.Gateway.URL, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ends := map[history.TopicPartition]int64{}
	assign := map[string]map[int32]client.Offset{}
	var from history.Assign
	for _, t := range topics {
		parts := make([]int32, r.partitionsOf(t))
		for i := range parts {
			parts[i] = int32(i)
		}
		latest, err := c.ListOffsets(ctx, t, parts, client.EndOffset())
		if err != nil {
			return nil, fmt.Errorf("end offsets of %s: %w", t, err)
		}
		earliest, err := c.ListOffsets(ctx, t, parts, client.StartOffset())
		if err != nil {
			return nil, fmt.Errorf("start offsets of %s: %w", t, err)
		}
		assign[t] = map[int32]client.Offset{}
		for p, end := range latest {
			tp := history.TopicPartition{Topic: t, Partition: p}
			ends[tp] = end
			if end > 0 {
				assign[t][p] = client.AtOffset(earliest[p])
				from.Assigned = append(from.Assigned, tp)
				from.Offsets = append(from.Offsets, history.PartitionOffset{Topic: t, Partition: p, Offset: earliest[p]})
			}
		}
	}
	if len(from.Assigned) > 0 {
		r.rec.Note(name, history.AssignOp(from))
	}
	c.Assign(assign)
	done := map[history.TopicPartition]bool{}
	var atEnd []history.TopicPartition
	for tp, end := range ends {
		if end == 0 {
			done[tp] = true
			atEnd = append(atEnd, tp)
		}
	}
	if len(atEnd) > 0 {
		h := r.rec.Invoke(name, history.PollOp("", ""))
		h.PollOk(history.Poll{AtEnd: atEnd, Committed: committed})
	}
	for len(done) < len(ends) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%d of %d partitions read to their end: %w", len(done), len(ends), err)
		}
		h := r.rec.Invoke(name, history.PollOp("", ""))
		recs, err := pollOnce(ctx, 2*time.Second, c.Poll)
		if err != nil {
			h.Fail(err)
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		var reached []history.TopicPartition
		for tp, end := range ends {
			if done[tp] {
				continue
			}
			if pos, ok := c.Position(tp.Topic, tp.Partition); ok && pos >= end {
				done[tp] = true
				reached = append(reached, tp)
				c.Unassign(tp.Topic, tp.Partition)
			}
		}
		h.PollOk(history.Poll{Records: records(recs), AtEnd: reached, Committed: committed})
	}
	return ends, nil
}
