package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
)

func newFake(t *testing.T, nodes int, topic string, partitions int32) *fakecluster.Cluster {
	t.Helper()
	fc := fakecluster.New(nodes)
	t.Cleanup(fc.Close)
	if topic != "" {
		if err := fc.CreateTopic(topic, partitions, 1); err != nil {
			t.Fatal(err)
		}
	}
	return fc
}

func newProducer(t *testing.T, fc *fakecluster.Cluster, opts ...ProducerOpt) *Producer {
	t.Helper()
	base := []ProducerOpt{RetryBackoff(5 * time.Millisecond), MaxRetryBackoff(20 * time.Millisecond), DeliveryTimeout(10 * time.Second)}
	p, err := NewProducer(fc.GatewayURL(), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func newConsumer(t *testing.T, fc *fakecluster.Cluster, opts ...ConsumerOpt) *Consumer {
	t.Helper()
	base := []ConsumerOpt{RetryBackoff(5 * time.Millisecond), MaxRetryBackoff(20 * time.Millisecond), FetchMaxWait(50 * time.Millisecond)}
	c, err := NewConsumer(fc.GatewayURL(), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestValidateOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []ProducerOpt
		want string
	}{
		{"defaults", nil, ""},
		{"linger too long", []ProducerOpt{Linger(2 * time.Minute)}, "option Linger: 2m0s is outside [0s, 1m0s]"},
		{"tiny batch", []ProducerOpt{MaxBatchBytes(1)}, "option MaxBatchBytes"},
		{"bad codec", []ProducerOpt{WithCompression(9)}, "option Compression"},
		{"idempotent needs acks all", []ProducerOpt{WithAcks(AcksLeader), Idempotent(true)}, "needs Acks(AcksAll)"},
		{"two problems", []ProducerOpt{Linger(-1), DeliveryTimeout(0)}, "DeliveryTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProducer("http://127.0.0.1:1", tc.opts...)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Acks other than all turn default idempotence off rather than fail.
	p, err := NewProducer("http://127.0.0.1:1", WithAcks(AcksNone))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.cfg.idempotent {
		t.Fatal("idempotence stayed on with AcksNone")
	}
}

func TestLingerBatchesRecords(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(300*time.Millisecond))
	ctx := ctxT(t)
	start := time.Now()
	var rs []*Record
	for i := range 5 {
		rs = append(rs, &Record{Topic: "t", Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := p.ProduceSync(ctx, rs...); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("delivered after %v, before the linger", el)
	}
	if got := fc.Batches("t", 0); len(got) != 1 || got[0].RecordCount != 5 {
		t.Fatalf("batches = %+v, want one of 5 records", got)
	}
	for i, r := range rs {
		if r.Offset != int64(i) || r.Partition != 0 {
			t.Errorf("record %d at %d/%d", i, r.Partition, r.Offset)
		}
	}
}

func TestMaxBatchBytesSplits(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(time.Minute), MaxBatchBytes(1000))
	ctx := ctxT(t)
	var rs []*Record
	for range 10 {
		rs = append(rs, &Record{Topic: "t", Value: make([]byte, 200)})
	}
	// With a one-minute linger only the size limit (and the final Flush)
	// can send batches. Produce returns once the record is in its
	// partition's batch, so the Flush below covers all ten.
	var wg sync.WaitGroup
	errs := make(chan error, len(rs))
	for _, r := range rs {
		wg.Add(1)
		p.Produce(ctx, r, func(_ *Record, err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	hs := fc.Batches("t", 0)
	total := 0
	for _, h := range hs {
		total += int(h.RecordCount)
		if h.RecordCount > 4 {
			t.Errorf("batch of %d records is over 1000 bytes", h.RecordCount)
		}
	}
	if total != 10 || len(hs) < 3 {
		t.Fatalf("%d batches with %d records, want >= 3 with 10", len(hs), total)
	}
}

func TestKeyRoutingMatchesPartitionForKey(t *testing.T) {
	fc := newFake(t, 3, "t", 7)
	p := newProducer(t, fc)
	ctx := ctxT(t)
	for i := range 50 {
		key := fmt.Appendf(nil, "key-%d", i)
		r := &Record{Topic: "t", Key: key, Value: []byte("v")}
		if err := p.ProduceSync(ctx, r); err != nil {
			t.Fatal(err)
		}
		if want := PartitionForKey(key, 7); r.Partition != want {
			t.Fatalf("key %s went to %d, PartitionForKey says %d", key, r.Partition, want)
		}
	}
}

func TestUnkeyedRecordsSpread(t *testing.T) {
	fc := newFake(t, 3, "t", 3)
	p := newProducer(t, fc, Linger(0))
	ctx := ctxT(t)
	seen := map[int32]bool{}
	for range 30 {
		r := &Record{Topic: "t", Value: []byte("v")}
		if err := p.ProduceSync(ctx, r); err != nil {
			t.Fatal(err)
		}
		seen[r.Partition] = true
	}
	if len(seen) != 3 {
		t.Fatalf("unkeyed records used partitions %v, want all 3", seen)
	}
}

// TestRetryOnNotLeaderExactlyOnceInOrder moves the leader while records
// flow and injects a fault that fails a produce after appending it: every
// record must land exactly once, in produce order.
func TestRetryOnNotLeaderExactlyOnceInOrder(t *testing.T) {
	fc := newFake(t, 3, "t", 1)
	fault := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0,
		Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND, Count: 2, AfterAppend: true})
	notLeader := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0,
		Code: connect.CodeFailedPrecondition, Reason: commonv1.Reason_REASON_NOT_LEADER, Count: 3})
	p := newProducer(t, fc, Linger(time.Millisecond))
	ctx := ctxT(t)
	const n = 200
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		if i == 50 || i == 120 {
			leader, _ := fc.Leader("t", 0)
			fc.MoveLeader("t", 0, leader%3+1)
		}
		wg.Add(1)
		p.Produce(ctx, &Record{Topic: "t", Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i)}, func(_ *Record, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d records failed, first: %v", len(errs), errs[0])
	}
	if fc.Fired(notLeader) != 3 {
		t.Fatalf("not-leader fault fired %d times", fc.Fired(notLeader))
	}
	if fc.Fired(fault) != 2 {
		t.Fatalf("after-append fault fired %d times", fc.Fired(fault))
	}
	recs, err := fc.Records("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("log holds %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("offset %d holds %q, want %d", i, r.Value, i)
		}
	}
}

func TestIdempotentSequencesPerPartition(t *testing.T) {
	fc := newFake(t, 2, "t", 2)
	p := newProducer(t, fc, Linger(0), ManualPartitioning())
	ctx := ctxT(t)
	for i := range 6 {
		part := int32(i % 2)
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: part, Value: []byte("a")}, &Record{Topic: "t", Partition: part, Value: []byte("b")}); err != nil {
			t.Fatal(err)
		}
	}
	var pid int64 = -2
	for part := range int32(2) {
		next := int32(0)
		for _, h := range fc.Batches("t", part) {
			if pid == -2 {
				pid = h.ProducerID
			}
			if h.ProducerID != pid || h.ProducerID < 0 {
				t.Fatalf("partition %d batch with producer id %d, want %d", part, h.ProducerID, pid)
			}
			if h.BaseSequence != next {
				t.Fatalf("partition %d: base sequence %d, want %d", part, h.BaseSequence, next)
			}
			next += h.RecordCount
		}
		if next != 6 {
			t.Fatalf("partition %d: %d records sequenced, want 6", part, next)
		}
	}
}

func TestNonIdempotentHasNoProducerID(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Idempotent(false), WithAcks(AcksLeader))
	if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if h := fc.Batches("t", 0)[0]; h.ProducerID != -1 || h.BaseSequence != -1 {
		t.Fatalf("header %+v", h)
	}
	if fc.Calls("InitProducerId") != 0 {
		t.Fatal("asked for a producer id")
	}
}

func TestUnknownTopicFails(t *testing.T) {
	fc := newFake(t, 1, "", 0)
	p := newProducer(t, fc, UnknownTopicWait(50*time.Millisecond))
	err := p.ProduceSync(ctxT(t), &Record{Topic: "nope", Value: []byte("x")})
	if !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("err = %v, want ErrUnknownTopic", err)
	}
}

func TestFatalErrorIsNotRetried(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Partition: -1, Code: connect.CodeResourceExhausted, Reason: commonv1.Reason_REASON_RECORD_TOO_LARGE})
	p := newProducer(t, fc)
	err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("x")})
	if ReasonOf(err) != commonv1.Reason_REASON_RECORD_TOO_LARGE {
		t.Fatalf("err = %v", err)
	}
	if fc.Calls("Produce") != 1 {
		t.Fatalf("%d produce calls, want 1", fc.Calls("Produce"))
	}
}

func TestDeliveryTimeout(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Partition: -1, Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS})
	p := newProducer(t, fc, DeliveryTimeout(200*time.Millisecond))
	err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("x")})
	if !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("err = %v, want ErrDeliveryTimeout", err)
	}
}

func TestCloseTwiceAndProduceAfterClose(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc)
	p.Close()
	p.Close()
	if err := p.ProduceSync(ctxT(t), &Record{Topic: "t"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
}

func TestCompressionRoundTrip(t *testing.T) {
	for _, codec := range []Compression{NoCompression, GzipCompression, SnappyCompression, LZ4Compression, ZstdCompression} {
		t.Run(codec.String(), func(t *testing.T) {
			fc := newFake(t, 1, "t", 1)
			p := newProducer(t, fc, WithCompression(codec), Linger(20*time.Millisecond))
			ctx := ctxT(t)
			var rs []*Record
			for i := range 20 {
				rs = append(rs, &Record{Topic: "t", Key: fmt.Appendf(nil, "k%d", i), Value: []byte(strings.Repeat("value ", i+1)),
					Headers: []Header{{Key: "h", Value: []byte("x")}}})
			}
			if err := p.ProduceSync(ctx, rs...); err != nil {
				t.Fatal(err)
			}
			if h := fc.Batches("t", 0)[0]; h.Codec() != codecOf(codec) {
				t.Fatalf("batch codec %v, want %v", h.Codec(), codec)
			}
			c := newConsumer(t, fc)
			c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
			got := pollN(t, c, 20)
			for i, r := range got {
				if string(r.Value) != string(rs[i].Value) || string(r.Key) != string(rs[i].Key) ||
					len(r.Headers) != 1 || string(r.Headers[0].Value) != "x" || r.Offset != int64(i) {
					t.Fatalf("record %d = %+v", i, r)
				}
			}
		})
	}
}

func pollN(t *testing.T, c *Consumer, n int) []*Record {
	t.Helper()
	ctx := ctxT(t)
	var out []*Record
	for len(out) < n {
		rs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", len(out), err)
		}
		out = append(out, rs...)
	}
	if len(out) != n {
		t.Fatalf("got %d records, want %d", len(out), n)
	}
	return out
}

func TestConsumerStartPositions(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(0))
	ctx := ctxT(t)
	before := time.Now()
	for i := range 10 {
		r := &Record{Topic: "t", Value: fmt.Appendf(nil, "%d", i), Timestamp: before.Add(time.Duration(i) * time.Second)}
		if err := p.ProduceSync(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		off   Offset
		first int64
	}{
		{StartOffset(), 0},
		{AtOffset(4), 4},
		{AtTimestamp(before.Add(7 * time.Second)), 7},
		{EndOffsetMinus(3), 7},
		{AtOffset(-5), 0},
	} {
		c := newConsumer(t, fc)
		c.Assign(map[string]map[int32]Offset{"t": {0: tc.off}})
		got := pollN(t, c, int(10-tc.first))
		if got[0].Offset != tc.first {
			t.Errorf("%v: first offset %d, want %d", tc.off, got[0].Offset, tc.first)
		}
	}
	// End: nothing until a new record arrives.
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: EndOffset()}})
	// Poll returns nothing there, and resolves the end (10) on the way;
	// the new record is produced only once it has, or the end would
	// resolve past it. A loaded machine may need more than one 200ms Poll.
	testwait.Until(t, 20*time.Second, "the consumer to resolve the log end 10", func() error {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		rs, err := c.Poll(short)
		cancel()
		if err == nil {
			t.Fatalf("got %d records at the end", len(rs))
		}
		if pos, ok := c.Position("t", 0); !ok || pos != 10 {
			return fmt.Errorf("position %d (resolved %v)", pos, ok)
		}
		return nil
	})
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if got := pollN(t, c, 1); got[0].Offset != 10 {
		t.Fatalf("offset %d", got[0].Offset)
	}
}

// TestConsumerFollowsLeaderChange consumes while the leader moves: every
// offset comes back exactly once and in order.
func TestConsumerFollowsLeaderChange(t *testing.T) {
	fc := newFake(t, 3, "t", 1)
	p := newProducer(t, fc, Linger(time.Millisecond))
	c := newConsumer(t, fc)
	ctx := ctxT(t)
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
	const n = 300
	go func() {
		for i := range n {
			p.Produce(ctx, &Record{Topic: "t", Value: fmt.Appendf(nil, "%d", i)}, nil)
			if i%100 == 50 {
				_ = p.Flush(ctx)
				leader, _ := fc.Leader("t", 0)
				fc.MoveLeader("t", 0, leader%3+1)
			}
		}
	}()
	next := int64(0)
	moved := false
	for next < n {
		rs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Offset != next || string(r.Value) != fmt.Sprint(next) {
				t.Fatalf("got offset %d (%q), want %d", r.Offset, r.Value, next)
			}
			next++
		}
		if !moved && next > 100 {
			// Move again while the consumer is mid-log.
			leader, _ := fc.Leader("t", 0)
			fc.MoveLeader("t", 0, leader%3+1)
			moved = true
		}
	}
	if pos, _ := c.Position("t", 0); pos != n {
		t.Fatalf("position %d, want %d", pos, n)
	}
}

func TestConsumerSkipsBelowRequestedOffsetInBatch(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(50*time.Millisecond))
	ctx := ctxT(t)
	var rs []*Record
	for i := range 10 {
		rs = append(rs, &Record{Topic: "t", Value: fmt.Appendf(nil, "%d", i)})
	}
	if err := p.ProduceSync(ctx, rs...); err != nil {
		t.Fatal(err)
	}
	if len(fc.Batches("t", 0)) != 1 {
		t.Skip("records did not share one batch")
	}
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(6)}})
	got := pollN(t, c, 4)
	if got[0].Offset != 6 {
		t.Fatalf("first offset %d, want 6", got[0].Offset)
	}
}

func TestConsumerUnknownTopic(t *testing.T) {
	fc := newFake(t, 1, "", 0)
	c := newConsumer(t, fc, UnknownTopicWait(0))
	c.Assign(map[string]map[int32]Offset{"gone": {0: StartOffset()}})
	_, err := c.Poll(ctxT(t))
	if !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("err = %v", err)
	}
}

func TestUnreachableGateway(t *testing.T) {
	p, err := NewProducer(fakecluster.ClosedGatewayURL(), DeliveryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	err = p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("x")})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err = %v", err)
	}
	// The delivery timeout (1s) bounds the failure; the limit leaves room
	// for a loaded machine and stays well below ctxT's 20s, which a
	// producer retrying past its delivery timeout would run into.
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v to report an unreachable gateway with a 1s delivery timeout", el)
	}
}

func codecOf(c Compression) recordbatch.Codec { return recordbatch.Codec(c) }

func TestConsumerOutOfRangeMovesToLogEnd(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(0))
	ctx := ctxT(t)
	for range 3 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(100)}})
	type polled struct {
		recs []*Record
		err  error
	}
	res := make(chan polled, 1)
	go func() {
		recs, err := c.Poll(ctx)
		res <- polled{recs, err}
	}()
	// Produce only once the consumer has moved to the log end: a record
	// produced before would move the end past it.
	testwait.Until(t, 10*time.Second, "the consumer to move from offset 100 to the log end 3", func() error {
		if pos, ok := c.Position("t", 0); !ok || pos != 3 {
			return fmt.Errorf("position %d (resolved %v)", pos, ok)
		}
		return nil
	})
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil || len(got.recs) != 1 || got.recs[0].Offset != 3 || string(got.recs[0].Value) != "new" {
		t.Fatalf("Poll = %v, %v; want the record \"new\" at offset 3", got.recs, got.err)
	}
}

func TestClassify(t *testing.T) {
	withReason := func(code connect.Code, r commonv1.Reason) error {
		return &Error{Code: code, Reason: r}
	}
	for _, tc := range []struct {
		err  error
		want action
	}{
		{withReason(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER), actRefresh},
		{withReason(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH), actRefresh},
		{withReason(connect.CodeUnavailable, commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH), actRefresh},
		{withReason(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS), actRetry},
		{withReason(connect.CodeDeadlineExceeded, commonv1.Reason_REASON_REQUEST_TIMED_OUT), actRetry},
		{withReason(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID), actNewPID},
		{withReason(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE), actFail},
		{withReason(connect.CodeResourceExhausted, commonv1.Reason_REASON_RECORD_TOO_LARGE), actFail},
		{withReason(connect.CodeInvalidArgument, commonv1.Reason_REASON_CORRUPT_RECORD), actFail},
		{connect.NewError(connect.CodeUnavailable, errors.New("dial tcp: connection refused")), actRefresh},
		{fromConnect(connect.NewError(connect.CodeUnavailable, errors.New("x"))), actRefresh},
		{connect.NewError(connect.CodePermissionDenied, errors.New("no")), actFail},
		{fmt.Errorf("wrapped: %w", ErrNoLeader), actRefresh},
		{context.DeadlineExceeded, actRefresh},
		{context.Canceled, actFail},
		{errors.New("local"), actFail},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
