package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	connect "connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// e2eConsumer reads a rate run's topic while it is produced and records,
// for each stamped record, the time from its intended send to its
// delivery by Poll.
type e2eConsumer struct {
	c      reader
	got    atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// startE2EConsumer assigns every partition from the start and returns once
// the consumer has read the warm-up records, so it is connected to every
// leader before the first stamped record is sent.
func (r *runner) startE2EConsumer(ctx context.Context, w workload, topic string, lat *latency) (*e2eConsumer, error) {
	c, err := r.newReader(topic, w.Partitions)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	e := &e2eConsumer{c: c, cancel: cancel, done: make(chan struct{})}
	warm := make(chan struct{})
	go func() {
		defer close(e.done)
		warmLeft := int(w.Partitions) * warmUpRecords
		for {
			recs, err := c.Poll(cctx)
			now := time.Now()
			if err != nil {
				if cctx.Err() == nil {
					e.err = err
				}
				if warmLeft > 0 {
					close(warm)
				}
				return
			}
			for _, rec := range recs {
				if at, ok := unstamp(rec.Value, r.origin); ok {
					lat.Record(now.Sub(at))
					e.got.Add(1)
				} else if warmLeft--; warmLeft == 0 {
					close(warm)
				}
			}
		}
	}()
	select {
	case <-warm:
		if e.err != nil {
			e.stop()
			return nil, fmt.Errorf("end-to-end consumer: %w", e.err)
		}
		return e, nil
	case <-ctx.Done():
		e.stop()
		return nil, ctx.Err()
	}
}

// wait returns once n stamped records were received, or an error after
// timeout or when the consumer failed.
func (e *e2eConsumer) wait(ctx context.Context, n int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for e.got.Load() < n {
		select {
		case <-e.done:
			if e.got.Load() >= n {
				return nil
			}
			return fmt.Errorf("end-to-end consumer stopped after %d of %d records: %w", e.got.Load(), n, e.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("end-to-end consumer received %d of %d acknowledged records within %s", e.got.Load(), n, timeout)
			}
		}
	}
	return nil
}

func (e *e2eConsumer) stop() {
	e.cancel()
	<-e.done
	e.c.Close()
}

// progress tracks how far the consumers of a consume run have read each
// partition. Records below a partition's mark were delivered before: a
// group hands a partition to a new owner from its last commit, and these
// runs do not commit, so a partition that moves is read again.
type progress struct {
	mu         sync.Mutex
	end        map[int32]int64 // log end offset when the run started
	next       map[int32]int64
	left       int // partitions not read to their end yet
	records    int64
	bytes      int64
	duplicates int64
	first      time.Time
	last       time.Time
	finished   chan struct{}
}

func newProgress(end map[int32]int64) *progress {
	pr := &progress{end: end, next: map[int32]int64{}, finished: make(chan struct{})}
	for _, e := range end {
		if e > 0 {
			pr.left++
		}
	}
	if pr.left == 0 {
		close(pr.finished)
	}
	return pr
}

func (pr *progress) add(recs []*client.Record, now time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, rec := range recs {
		end, ok := pr.end[rec.Partition]
		if !ok || rec.Offset >= end {
			continue // written after the run started
		}
		if rec.Offset < pr.next[rec.Partition] {
			pr.duplicates++
			continue
		}
		if pr.first.IsZero() {
			pr.first = now
		}
		pr.records++
		pr.bytes += int64(len(rec.Value))
		pr.next[rec.Partition] = rec.Offset + 1
		if pr.next[rec.Partition] == end {
			pr.last = now
			if pr.left--; pr.left == 0 {
				close(pr.finished)
			}
		}
	}
}

// group is a consumer group formed on a topic before the topic is filled,
// then left idle (members heartbeat in the background but do not read)
// until a consume run resumes it: the shape of a backlog drain. Formed
// on a filled topic instead, the first member would be handed every
// partition and read much of the backlog alone before the others got
// theirs, and the run would measure joining rather than reading.
type group struct {
	name    string
	members []*client.GroupConsumer
	kafka   *kafkaGroup // instead of members, with --protocol kafka
}

// reader is a consumer of every partition of a topic from its start.
type reader interface {
	poller
	Close()
}

// newReader returns a reader of partitions 0..n-1 of topic: Strata's Go
// consumer, or franz-go with --protocol kafka.
func (r *runner) newReader(topic string, n int32) (reader, error) {
	parts := make([]int32, n)
	for p := range n {
		parts[p] = p
	}
	if r.kafka != nil {
		return r.newKafkaReader(topic, parts)
	}
	c, err := client.NewConsumer(r.gateway, r.consumerOpts()...)
	if err != nil {
		return nil, err
	}
	all := map[int32]client.Offset{}
	for _, p := range parts {
		all[p] = client.StartOffset()
	}
	c.Assign(map[string]map[int32]client.Offset{topic: all})
	return c, nil
}

// formGroup joins members consumers to a new group on topic and returns
// once the coordinator reports the group stable with every partition
// owned by exactly one member (each with some when there are at least as
// many partitions as members).
func (r *runner) formGroup(ctx context.Context, w workload, topic string, members int) (*group, error) {
	g := &group{name: fmt.Sprintf("%s-g%d", topic, members)}
	if r.kafka != nil {
		kg, err := r.newKafkaGroup(g.name, topic, members)
		if err != nil {
			return nil, err
		}
		g.kafka = kg
		if err := waitFor(ctx, time.Minute, func() bool { return kg.spread(int(w.Partitions)) }); err != nil {
			g.close(ctx)
			return nil, fmt.Errorf("group %s did not share %d partitions among %d members: %w", g.name, w.Partitions, members, err)
		}
		return g, nil
	}
	for range members {
		m, err := client.NewGroupConsumer(r.gateway, g.name, []string{topic}, client.GroupConsumerOptions(r.consumerOpts()...))
		if err != nil {
			g.close(ctx)
			return nil, err
		}
		g.members = append(g.members, m)
	}
	// Members take their partitions inside Poll, so they poll (reading
	// nothing: the topic is empty) until the group is stable.
	pctx, stopPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, m := range g.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				_, _ = m.Poll(pctx) // records (none expected) are read again after the pause
			}
		}()
	}
	err := r.waitStable(ctx, g.name, members, int(w.Partitions))
	stopPolls()
	wg.Wait()
	if err != nil {
		g.close(ctx)
		return nil, err
	}
	return g, nil
}

// size is the number of members.
func (g *group) size() int {
	if g.kafka != nil {
		return len(g.kafka.members)
	}
	return len(g.members)
}

func (g *group) close(ctx context.Context) {
	if g.kafka != nil {
		g.kafka.close()
	}
	for _, m := range g.members {
		_ = m.Close(context.WithoutCancel(ctx))
	}
}

// waitFor checks cond every 50ms until it holds, ctx ends or timeout
// passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// waitStable polls DescribeGroup until the group is stable with its
// members sharing every partition.
func (r *runner) waitStable(ctx context.Context, name string, members, partitions int) error {
	// Members learn of one another at their heartbeat interval (seconds),
	// and a partition moves in two heartbeats; a minute is generous.
	var lastErr error
	err := waitFor(ctx, time.Minute, func() bool {
		resp, err := r.gw.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: name}))
		lastErr = err
		return err == nil && spread(resp.Msg.GetGroup(), members, partitions)
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("group %s did not share %d partitions among %d members within a minute (last error: %v)",
			name, partitions, members, lastErr)
	}
	return err
}

// spread reports whether the group is stable with exactly members members
// that own every partition once, none of them empty-handed unless there
// are fewer partitions than members.
func spread(g *coordinatorv1.GroupDescription, members, partitions int) bool {
	if g.GetState() != coordinatorv1.GroupState_GROUP_STATE_STABLE || len(g.GetMembers()) != members {
		return false
	}
	seen := map[int32]bool{}
	for _, m := range g.GetMembers() {
		n := 0
		for _, tp := range m.GetAssignment().GetPartitions() {
			for _, p := range tp.GetPartitions() {
				if seen[p] {
					return false
				}
				seen[p] = true
				n++
			}
		}
		if n == 0 && partitions >= members {
			return false
		}
	}
	return len(seen) == partitions
}

// poller is what a consume-run reader is: a Consumer or a GroupConsumer.
type poller interface {
	Poll(ctx context.Context) ([]*client.Record, error)
}

// runConsume reads a filled topic from the start, with one consumer of
// every partition when g is nil, else with the group g formed before the
// topic was filled. Throughput is counted from the first Poll to the
// delivery of the last record; the time to the first record (connecting,
// resolving the start offsets, the first fetch) is also reported apart.
func (r *runner) runConsume(ctx context.Context, w workload, topic string, g *group) (Result, error) {
	res := newResult(w, modeConsume)
	var parts []int32
	for p := range w.Partitions {
		parts = append(parts, p)
	}
	probe, err := client.NewConsumer(r.gateway, r.consumerOpts()...)
	if err != nil {
		return res, err
	}
	end, err := probe.ListOffsets(ctx, topic, parts, client.EndOffset())
	probe.Close()
	if err != nil {
		return res, fmt.Errorf("list offsets: %w", err)
	}
	pr := newProgress(end)

	var readers []poller
	switch {
	case g == nil:
		c, err := r.newReader(topic, w.Partitions)
		if err != nil {
			return res, err
		}
		defer c.Close()
		readers = append(readers, c)
	case g.kafka != nil:
		for _, m := range g.kafka.members {
			readers = append(readers, m)
		}
		g.kafka.resume()
	default:
		for _, m := range g.members {
			readers = append(readers, m)
		}
	}
	res.Consumers = len(readers)

	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	before := r.cpu.sample()
	start := time.Now()
	errs := make(chan error, len(readers))
	for _, m := range readers {
		go func() {
			for {
				recs, err := m.Poll(cctx)
				if err != nil {
					if cctx.Err() != nil {
						err = nil
					}
					errs <- err
					return
				}
				pr.add(recs, time.Now())
			}
		}()
	}
	var runErr error
	select {
	case <-pr.finished:
	case <-cctx.Done():
		runErr = fmt.Errorf("consumers did not read the topic to its end: %w", cctx.Err())
	}
	cancel()
	for range readers {
		runErr = errors.Join(runErr, <-errs)
	}
	after := r.cpu.sample()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	res.finish(start, pr.last, pr.records, pr.bytes)
	res.Duplicates = pr.duplicates
	if !pr.first.IsZero() {
		res.FirstRecordMs = float64(pr.first.Sub(start).Microseconds()) / 1e3
	}
	res.CPU = r.cpu.between(before, after, res.Bytes)
	return res, runErr
}
