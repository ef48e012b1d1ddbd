package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// Batches that may already be in the log are never written under another
// producer id or epoch (issue 36).

// Five batches of a partition in flight and all appended; the first one's
// answer is lost and the four after it are acknowledged. While the first
// waits out its backoff, a batch of another topic fails for good
// (RECORD_TOO_LARGE). That failure has nothing to do with the partition:
// the first batch goes again under its own id and sequence and is
// recognized as the duplicate it is, so every record is in the log once.
func TestUnrelatedFailureDoesNotRebuildALandedBatch(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	if err := fc.CreateTopic("big", 1, 1); err != nil {
		t.Fatal(err)
	}
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "big", Partition: -1, Code: connect.CodeResourceExhausted,
		Reason: commonv1.Reason_REASON_RECORD_TOO_LARGE})
	g := newCallGate()
	ctx := ctxT(t)
	var (
		p       *Producer
		once    sync.Once
		bigErr  error
		bigDone = make(chan struct{})
	)
	// At the first retry of the partition's batch, the other topic's
	// record fails before the retry goes.
	onRetry := func(ev RetryEvent) {
		if ev.Topic != "t" {
			return
		}
		once.Do(func() {
			bigErr = p.ProduceSync(ctx, &Record{Topic: "big", Value: []byte("too large")})
			close(bigDone)
		})
	}
	p = newProducer(t, fc, Linger(0), g.opt(), RequestTimeout(time.Second), OnRetry(onRetry))
	log := newCallbackLog(6)
	want := pipelined(t, ctx, p, g, log, 5)
	lost := &fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Code: connect.CodeUnavailable, AfterAppend: true, Count: 1}
	g.mu.Lock()
	g.before = firstAfterTheRest(fc, func() { fc.AddFault(lost) })
	g.mu.Unlock()
	g.release()
	log.wait(t, ctx, want)
	orderedLog(t, fc, want)
	<-bigDone
	if ReasonOf(bigErr) != commonv1.Reason_REASON_RECORD_TOO_LARGE {
		t.Fatalf("the other topic's record: %v, want RECORD_TOO_LARGE", bigErr)
	}
	if fc.Fired(lost) != 1 {
		t.Fatalf("fault fired %d times, want 1", fc.Fired(lost))
	}
}

// Five batches of a partition are appended and the leader's answers are
// black-holed. The first batch's delivery timeout fails it (its outcome
// unknown, which its error says) and cancels its call; the four after it,
// still within their own timeouts, are answered once the network heals
// and go again under their own id: each is recognized as a duplicate, so
// nothing is in the log twice.
func TestDeliveryTimeoutDoesNotRebuildLandedBatches(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	const timeout = 6 * time.Second
	p := newProducer(t, fc, Linger(0), DeliveryTimeout(timeout), RequestTimeout(time.Minute))
	ctx := ctxT(t)
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v0")}); err != nil {
		t.Fatal(err)
	}
	blackhole := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, AfterAppend: true, Hang: true})
	errs := make([]error, 6)
	done := make([]chan struct{}, 6)
	produce := func(i int) {
		done[i] = make(chan struct{})
		p.Produce(ctx, &Record{Topic: "t", Value: []byte(fmt.Sprint("v", i))}, func(_ *Record, err error) {
			errs[i] = err
			close(done[i])
		})
		testwait.Until(t, 10*time.Second, fmt.Sprintf("batch %d appended and its answer held", i), func() error {
			return testwait.True(fc.Fired(blackhole) == i)
		})
	}
	start := time.Now()
	produce(1)
	// The later batches' timeouts end well after the first one's.
	testwait.Until(t, timeout, "half the first batch's delivery timeout gone", func() error {
		return testwait.True(time.Since(start) > timeout/2)
	})
	for i := 2; i <= 5; i++ {
		produce(i)
	}
	<-done[1]
	if !errors.Is(errs[1], ErrDeliveryTimeout) || !errors.Is(errs[1], ErrOutcomeUnknown) {
		t.Fatalf("first batch: %v, want a delivery timeout with outcome unknown", errs[1])
	}
	testwait.Until(t, 10*time.Second, "the first batch's call canceled", func() error {
		for _, c := range fc.Produced() {
			if connect.CodeOf(c.Err) == connect.CodeCanceled {
				return nil
			}
		}
		return errors.New("no produce call ended canceled")
	})
	fc.RemoveFault(blackhole)
	for i := 2; i <= 5; i++ {
		<-done[i]
		if errs[i] != nil {
			t.Fatalf("v%d: %v", i, errs[i])
		}
	}
	orderedLog(t, fc, []string{"v0", "v1", "v2", "v3", "v4", "v5"})
}

// UNKNOWN_PRODUCER_ID on one partition starts that partition's sequences
// again under the next producer epoch; the other partition goes on under
// its own id, epoch and sequence, and every record is in the log once.
func TestUnknownProducerIDResetsOnlyItsPartition(t *testing.T) {
	fc := newFake(t, 1, "t", 2)
	p := newProducer(t, fc, Linger(0), ManualPartitioning())
	ctx := ctxT(t)
	produce := func(part int32, v string) {
		t.Helper()
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: part, Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, "a0")
	produce(1, "b0")
	unknown := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1,
		Code: connect.CodeFailedPrecondition, Reason: commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID})
	produce(0, "a1")
	produce(1, "b1")
	produce(0, "a2")
	if fc.Fired(unknown) != 1 {
		t.Fatalf("fault fired %d times, want 1", fc.Fired(unknown))
	}
	b0 := fc.Batches("t", 0)
	if len(b0) != 3 {
		t.Fatalf("partition 0 holds %d batches, want 3", len(b0))
	}
	if b0[1].ProducerID != b0[0].ProducerID || b0[1].ProducerEpoch != b0[0].ProducerEpoch+1 || b0[1].BaseSequence != 0 || b0[2].BaseSequence != 1 {
		t.Fatalf("partition 0 after UNKNOWN_PRODUCER_ID: %+v, want the next epoch of the same id from sequence 0", b0[1:])
	}
	b1 := fc.Batches("t", 1)
	if len(b1) != 2 || b1[1].ProducerID != b0[0].ProducerID || b1[1].ProducerEpoch != b0[0].ProducerEpoch || b1[1].BaseSequence != 1 {
		t.Fatalf("partition 1: %+v, want its sequence to go on under the first id and epoch", b1)
	}
	for part, want := range [][]string{{"a0", "a1", "a2"}, {"b0", "b1"}} {
		if got := logValues(t, fc, int32(part)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("partition %d holds %q, want %q", part, got, want)
		}
	}
}

// A batch whose first answer was lost after it was appended, and whose
// retry is answered UNKNOWN_PRODUCER_ID, may be in the log: it fails with
// ErrOutcomeUnknown instead of being written again under a new epoch.
func TestUnknownProducerIDAfterLostAnswerFailsOutcomeUnknown(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	var once sync.Once
	onRetry := func(RetryEvent) {
		once.Do(func() {
			fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1,
				Code: connect.CodeFailedPrecondition, Reason: commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID})
		})
	}
	p := newProducer(t, fc, Linger(0), OnRetry(onRetry))
	ctx := ctxT(t)
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v0")}); err != nil {
		t.Fatal(err)
	}
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1, AfterAppend: true, Code: connect.CodeUnavailable})
	err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v1")})
	if !errors.Is(err, ErrOutcomeUnknown) || ReasonOf(err) != commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID {
		t.Fatalf("err = %v, want outcome unknown after UNKNOWN_PRODUCER_ID", err)
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	orderedLog(t, fc, []string{"v0", "v1", "v2"})
}

// A batch abandoned at its delivery timeout cancels its call; another
// partition's batch in the same call, still within its own timeout, is
// not failed by that cancellation: it goes again and lands once.
func TestAbandonedBatchCancelsItsCallAndTheOthersRetry(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	const timeout = 6 * time.Second
	// One call in flight per node, so batches queue behind a held one.
	p := newProducer(t, fc, Linger(0), ManualPartitioning(), MaxInFlight(1), DeliveryTimeout(timeout), RequestTimeout(time.Minute))
	ctx := ctxT(t)
	for part := range int32(3) {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: part, Value: []byte("warm")}); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		err  error
		done chan struct{}
	}
	produce := func(part int32, v string) *result {
		r := &result{done: make(chan struct{})}
		p.Produce(ctx, &Record{Topic: "t", Partition: part, Value: []byte(v)}, func(_ *Record, err error) {
			r.err = err
			close(r.done)
		})
		return r
	}
	// Partition 2's call is held (not appended) while the other two
	// partitions' batches queue behind it.
	plug := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 2, Hang: true, Count: 1})
	produce(2, "c")
	testwait.Until(t, 10*time.Second, "partition 2's call held", func() error {
		return testwait.True(fc.Fired(plug) == 1)
	})
	blackhole := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Hang: true, AfterAppend: true, Count: 1})
	start := time.Now()
	a := produce(0, "a")
	testwait.Until(t, timeout, "half partition 0's delivery timeout gone", func() error {
		return testwait.True(time.Since(start) > timeout/2)
	})
	b := produce(1, "b")
	testwait.Until(t, 10*time.Second, "partitions 0 and 1 queued for the node", func() error {
		return testwait.True(p.queued() == 2)
	})
	// The next call carries partitions 0 and 1; 0 is appended and its
	// answer held, until its delivery timeout cancels the call.
	fc.RemoveFault(plug)
	<-a.done
	if !errors.Is(a.err, ErrOutcomeUnknown) {
		t.Fatalf("partition 0: %v, want outcome unknown", a.err)
	}
	<-b.done
	if b.err != nil {
		t.Fatalf("partition 1, in the canceled call: %v", b.err)
	}
	if fc.Fired(blackhole) != 1 {
		t.Fatalf("partition 0's answer held %d times, want 1", fc.Fired(blackhole))
	}
	recs, err := fc.Records("t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[1].Value) != "b" {
		t.Fatalf("partition 1 holds %d records, want warm and b once", len(recs))
	}
}
