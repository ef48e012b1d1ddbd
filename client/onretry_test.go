package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// retryLog collects the events OnRetry reports, from any goroutine.
type retryLog struct {
	mu     sync.Mutex
	events []RetryEvent
}

func (l *retryLog) add(ev RetryEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

func (l *retryLog) all() []RetryEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// waitFor waits until an event with the reason has been reported and
// returns the first one.
func (l *retryLog) waitFor(t *testing.T, reason RetryReason) RetryEvent {
	t.Helper()
	var found RetryEvent
	testwait.Until(t, 20*time.Second, "a retry for "+reason.String(), func() error {
		evs := l.all()
		for _, ev := range evs {
			if ev.Reason == reason {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("events %v", evs)
	})
	return found
}

// noLeader takes a partition's leader away (the metadata says -1), as
// while an offline leader's replacement is not elected yet.
func noLeader(fc *fakecluster.Cluster, topic string, part int32) {
	fc.UpdatePartition(topic, part, func(p *commonv1.PartitionMetadata) { p.LeaderId = -1 })
}

// giveLeader makes node the partition's leader again under a new epoch.
func giveLeader(fc *fakecluster.Cluster, topic string, part, node int32) {
	fc.UpdatePartition(topic, part, func(p *commonv1.PartitionMetadata) { p.LeaderId, p.LeaderEpoch = node, p.LeaderEpoch+1 })
}

// TestOnRetryNotEnoughReplicas: a leader that refuses acks=all for lack
// of in-sync replicas is retried, and each retry is reported with the
// partition, the attempt, the wait and the ISR numbers the leader sent.
func TestOnRetryNotEnoughReplicas(t *testing.T) {
	fc := newFake(t, 3, "t", 2)
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 1, Count: 3,
		Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS,
		NotEnoughReplicas: &commonv1.NotEnoughReplicasHint{IsrSize: 1, MinInsyncReplicas: 2}})
	var log retryLog
	p := newProducer(t, fc, Linger(0), ManualPartitioning(), OnRetry(log.add))
	r := &Record{Topic: "t", Partition: 1, Value: []byte("v")}
	if err := p.ProduceSync(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	evs := log.all()
	if len(evs) != 3 {
		t.Fatalf("%d retries reported, want 3: %+v", len(evs), evs)
	}
	for i, ev := range evs {
		if ev.Topic != "t" || ev.Partition != 1 || ev.Attempt != i+1 || ev.Wait <= 0 ||
			ev.Reason != RetryNotEnoughReplicas || ev.ISRSize != 1 || ev.MinInsyncReplicas != 2 {
			t.Errorf("retry %d = %+v", i, ev)
		}
		if ReasonOf(ev.Err) != commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS {
			t.Errorf("retry %d carries %v, want the leader's error", i, ev.Err)
		}
	}
}

// TestOnRetryLeaderNotAvailable: a partition without a leader is waited
// for by the producer and the consumer alike, and reported as such, from
// the metadata (leader -1) and from a node's NOT_LEADER that names no
// leader.
func TestOnRetryLeaderNotAvailable(t *testing.T) {
	t.Run("producer, metadata", func(t *testing.T) {
		fc := newFake(t, 3, "t", 1)
		noLeader(fc, "t", 0)
		var log retryLog
		p := newProducer(t, fc, Linger(0), OnRetry(log.add))
		done := make(chan error, 1)
		p.Produce(ctxT(t), &Record{Topic: "t", Value: []byte("v")}, func(_ *Record, err error) { done <- err })
		ev := log.waitFor(t, RetryLeaderNotAvailable)
		if ev.Topic != "t" || ev.Partition != 0 || ev.Attempt != 1 || !errors.Is(ev.Err, ErrNoLeader) {
			t.Fatalf("first retry %+v", ev)
		}
		giveLeader(fc, "t", 0, 2)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("producer, not leader without a leader", func(t *testing.T) {
		fc := newFake(t, 3, "t", 1)
		var log retryLog
		p := newProducer(t, fc, Linger(0), OnRetry(log.add))
		if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("a")}); err != nil {
			t.Fatal(err) // the producer's metadata now names node 1
		}
		// The leader goes away and the gateway's metadata has not said so.
		f := fc.AddFault(&fakecluster.Fault{Method: "Metadata", Partition: -1, Code: connect.CodeUnavailable})
		noLeader(fc, "t", 0)
		done := make(chan error, 1)
		p.Produce(ctxT(t), &Record{Topic: "t", Value: []byte("b")}, func(_ *Record, err error) { done <- err })
		ev := log.waitFor(t, RetryLeaderNotAvailable)
		if ev.Topic != "t" || ev.Partition != 0 || ReasonOf(ev.Err) != commonv1.Reason_REASON_NOT_LEADER {
			t.Fatalf("first retry %+v, want the node's NOT_LEADER", ev)
		}
		giveLeader(fc, "t", 0, 1)
		fc.RemoveFault(f)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("consumer", func(t *testing.T) {
		fc := newFake(t, 3, "t", 1)
		noLeader(fc, "t", 0)
		var log retryLog
		c := newConsumer(t, fc, OnRetry(log.add))
		c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0)}})
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		polled := make(chan error, 1)
		go func() {
			_, err := c.Poll(ctx)
			polled <- err
		}()
		ev := log.waitFor(t, RetryLeaderNotAvailable)
		if ev.Topic != "t" || ev.Partition != 0 || ev.Attempt != 1 || ev.Wait <= 0 {
			t.Fatalf("first retry %+v", ev)
		}
		cancel()
		if err := <-polled; !errors.Is(err, context.Canceled) {
			t.Fatalf("Poll without DeliveryTimeout = %v, want it to retry until its context ends", err)
		}
	})
}

// TestOnRetryNotCalledWithoutRetries: requests that succeed at once
// report nothing.
func TestOnRetryNotCalledWithoutRetries(t *testing.T) {
	fc := newFake(t, 3, "t", 3)
	var log retryLog
	p := newProducer(t, fc, OnRetry(log.add))
	ctx := ctxT(t)
	for i := range 20 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	c := newConsumer(t, fc, OnRetry(log.add), DeliveryTimeout(time.Minute))
	if _, err := c.ListOffsets(ctx, "t", []int32{0, 1, 2}, EndOffset()); err != nil {
		t.Fatal(err)
	}
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset(), 1: StartOffset(), 2: StartOffset()}})
	for got := 0; got < 20; {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(recs)
	}
	if evs := log.all(); len(evs) != 0 {
		t.Fatalf("retries reported without a failure: %+v", evs)
	}
}

// TestConsumerDeliveryTimeout: with DeliveryTimeout a consumer's Poll and
// ListOffsets give up on a partition that stays without a leader, with
// ErrDeliveryTimeout wrapping the last failure; the next Poll gets a new
// period and, once the leader is back, reads.
func TestConsumerDeliveryTimeout(t *testing.T) {
	fc := newFake(t, 3, "t", 1)
	ctx := ctxT(t)
	if err := newProducer(t, fc).ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	noLeader(fc, "t", 0)
	var log retryLog
	c := newConsumer(t, fc, OnRetry(log.add), DeliveryTimeout(200*time.Millisecond))
	if _, err := c.ListOffsets(ctx, "t", []int32{0}, StartOffset()); !errors.Is(err, ErrDeliveryTimeout) || !errors.Is(err, ErrNoLeader) {
		t.Fatalf("ListOffsets = %v, want ErrDeliveryTimeout wrapping ErrNoLeader", err)
	}
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0)}})
	_, err := c.Poll(ctx)
	if !errors.Is(err, ErrDeliveryTimeout) || !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Poll = %v, want ErrDeliveryTimeout wrapping ErrNoLeader", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Poll ended with the test's context, not the delivery timeout")
	}
	if evs := log.all(); len(evs) == 0 || evs[len(evs)-1].Reason != RetryLeaderNotAvailable {
		t.Fatalf("retries reported: %+v", evs)
	}
	giveLeader(fc, "t", 0, 1)
	recs, err := c.Poll(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("Poll after the leader came back: %d records, %v", len(recs), err)
	}
	if _, err := NewConsumer(fc.GatewayURL(), DeliveryTimeout(0)); err == nil {
		t.Fatal("a zero DeliveryTimeout was accepted")
	}
}

// TestGroupConsumerOnRetryAndDeliveryTimeout: a group consumer whose
// coordinator cannot be found reports the retries of its heartbeats as
// the coordinator being unavailable, and with DeliveryTimeout its Poll
// gives up.
func TestGroupConsumerOnRetryAndDeliveryTimeout(t *testing.T) {
	fc := newFake(t, 1, "t", 1) // no coordinator: FindCoordinator answers UNAVAILABLE
	var log retryLog
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"}, GroupConsumerOptions(
		RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond), OnRetry(log.add), DeliveryTimeout(300*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())
	ctx := ctxT(t)
	_, err = gc.Poll(ctx)
	if !errors.Is(err, ErrDeliveryTimeout) || ctx.Err() != nil {
		t.Fatalf("Poll = %v, want ErrDeliveryTimeout", err)
	}
	ev := log.waitFor(t, RetryCoordinatorUnavailable)
	if ev.Topic != "" || ev.Partition != -1 || ev.Attempt != 1 || connect.CodeOf(ev.Err) != connect.CodeUnavailable {
		t.Fatalf("first retry %+v", ev)
	}
}

func TestRetryReason(t *testing.T) {
	withDetail := func(code connect.Code, r commonv1.Reason, hint func(*commonv1.ErrorDetail)) error {
		d := &commonv1.ErrorDetail{Code: commonv1.Code(code), Reason: r, Message: "m"}
		if hint != nil {
			hint(d)
		}
		return fromDetail(d)
	}
	leaderHint := func(id int32) func(*commonv1.ErrorDetail) {
		return func(d *commonv1.ErrorDetail) {
			d.Hint = &commonv1.ErrorDetail_Leader{Leader: &commonv1.LeaderHint{LeaderId: id, LeaderEpoch: 3}}
		}
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want RetryReason
	}{
		{withDetail(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS, nil), RetryNotEnoughReplicas},
		{withDetail(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND, nil), RetryNotEnoughReplicas},
		{fmt.Errorf("x: %w", ErrNoLeader), RetryLeaderNotAvailable},
		{withDetail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, leaderHint(-1)), RetryLeaderNotAvailable},
		{withDetail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, leaderHint(2)), RetryNotLeader},
		{withDetail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, nil), RetryNotLeader},
		{withDetail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, nil), RetryNotLeader},
		{withDetail(connect.CodeUnavailable, commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH, nil), RetryUnknownLeaderEpoch},
		{withDetail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, nil), RetryUnknownTopicOrPartition},
		{withDetail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_COORDINATOR, nil), RetryCoordinatorUnavailable},
		{withDetail(connect.CodeDeadlineExceeded, commonv1.Reason_REASON_REQUEST_TIMED_OUT, nil), RetryTimeout},
		{withDetail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID, nil), RetryUnknownProducerID},
		{withDetail(connect.CodeUnavailable, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS, nil), RetryConcurrentTransactions},
		{withDetail(connect.CodeUnavailable, commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT, nil), RetryUnstableOffsets},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), RetryTimeout},
		{fromConnect(connect.NewError(connect.CodeUnavailable, dial)), RetryNodeUnreachable},
		{fromConnect(connect.NewError(connect.CodeCanceled, errConnReset)), RetryNodeUnreachable},
		{fromConnect(connect.NewError(connect.CodeUnavailable, errors.New("draining"))), RetryUnavailable},
		{fromConnect(connect.NewError(connect.CodeAborted, errors.New("x"))), RetryOther},
	} {
		if got := retryReason(tc.err); got != tc.want {
			t.Errorf("retryReason(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	seen := map[string]RetryReason{}
	for r := RetryOther; r <= RetryUnstableOffsets; r++ {
		s := r.String()
		if prev, dup := seen[s]; dup || s == fmt.Sprintf("RetryReason(%d)", int(r)) {
			t.Errorf("reason %d says %q (as %d does)", int(r), s, int(prev))
		}
		seen[s] = r
	}
}

// TestRetryEventNamesThePartition: of a Poll round's joined failures, the
// event names the first that is about a partition; a node-wide failure of
// several partitions names their topic only.
func TestRetryEventNamesThePartition(t *testing.T) {
	ner := fromDetail(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS,
		Hint: &commonv1.ErrorDetail_NotEnoughReplicas{NotEnoughReplicas: &commonv1.NotEnoughReplicasHint{IsrSize: 1, MinInsyncReplicas: 3}}})
	g := &leaderGroup{curs: []*cursor{{tp: topicPartition{"a", 1}}, {tp: topicPartition{"a", 4}}}}
	mixed := &leaderGroup{curs: []*cursor{{tp: topicPartition{"a", 1}}, {tp: topicPartition{"b", 1}}}}
	for _, tc := range []struct {
		name      string
		err       error
		topic     string
		partition int32
		reason    RetryReason
	}{
		{"one partition", errors.Join(nil, scoped(topicPartition{"a", 3}, ner)), "a", 3, RetryNotEnoughReplicas},
		{"first of two", errors.Join(errors.New("plain"), scoped(topicPartition{"a", 2}, ner), scoped(topicPartition{"b", 0}, ErrNoLeader)), "a", 2, RetryNotEnoughReplicas},
		{"a node's partitions of one topic", scopedGroup(g, ner), "a", -1, RetryNotEnoughReplicas},
		{"of two topics", scopedGroup(mixed, ErrNoLeader), "", -1, RetryLeaderNotAvailable},
		{"none named", ErrNoLeader, "", -1, RetryLeaderNotAvailable},
	} {
		ev := retryEvent(tc.err, 2, time.Second)
		if ev.Topic != tc.topic || ev.Partition != tc.partition || ev.Reason != tc.reason || ev.Attempt != 2 || ev.Wait != time.Second || ev.Err != tc.err {
			t.Errorf("%s: %+v", tc.name, ev)
		}
		if tc.reason == RetryNotEnoughReplicas && (ev.ISRSize != 1 || ev.MinInsyncReplicas != 3) {
			t.Errorf("%s: ISR %d of %d, want 1 of 3", tc.name, ev.ISRSize, ev.MinInsyncReplicas)
		}
	}
}
