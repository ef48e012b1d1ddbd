package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/testwait"
)

// throttler stands in for a storage node's quota: it sets throttle_time_ms
// on the Produce and Fetch answers of one node, and records when each call
// to a node left the client (after any throttle wait).
type throttler struct {
	node string // host:port of the throttled node
	ms   int32

	mu    sync.Mutex
	sent  map[string][]time.Time // "Produce@host:port" -> send times
	answd map[string][]time.Time // same key -> answer times
}

func newThrottler(nodeURL string, ms int32) *throttler {
	return &throttler{node: strings.TrimPrefix(nodeURL, "http://"), ms: ms, sent: map[string][]time.Time{}, answd: map[string][]time.Time{}}
}

func (th *throttler) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		method := req.Spec().Procedure[strings.LastIndex(req.Spec().Procedure, "/")+1:]
		key := method + "@" + req.Peer().Addr
		th.mu.Lock()
		th.sent[key] = append(th.sent[key], time.Now())
		th.mu.Unlock()
		resp, err := next(ctx, req)
		if err == nil && req.Peer().Addr == th.node {
			switch m := resp.Any().(type) {
			case *storagev1.ProduceResponse:
				m.ThrottleTimeMs = th.ms
			case *storagev1.FetchResponse:
				m.ThrottleTimeMs = th.ms
			}
		}
		th.mu.Lock()
		th.answd[key] = append(th.answd[key], time.Now())
		th.mu.Unlock()
		return resp, err
	}
}

func (th *throttler) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (th *throttler) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (th *throttler) times(key string) (sent, answered []time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	return append([]time.Time(nil), th.sent[key]...), append([]time.Time(nil), th.answd[key]...)
}

// TestProducerHonoursThrottle: after an answer with a throttle time, the
// producer's next request to that node waits at least that long, while a
// partition led by another node is produced to meanwhile; a throttle that
// outlasts the delivery timeout fails the batch with ErrDeliveryTimeout.
func TestProducerHonoursThrottle(t *testing.T) {
	fc := newFake(t, 2, "t", 2) // partition 0 led by node 1, partition 1 by node 2
	const throttle = 400 * time.Millisecond
	th := newThrottler(fc.NodeURL(1), int32(throttle/time.Millisecond))
	p := newProducer(t, fc, ManualPartitioning(), ConnectOptions(connect.WithInterceptors(th)), Linger(0), DeliveryTimeout(3*time.Second))
	ctx := ctxT(t)
	rec := func(part int32) *Record { return &Record{Topic: "t", Partition: part, Value: []byte("v")} }
	node1 := "Produce@" + strings.TrimPrefix(fc.NodeURL(1), "http://")

	if err := p.ProduceSync(ctx, rec(0)); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, rec(0)); err != nil {
		t.Fatal(err)
	}
	sent, answered := th.times(node1)
	if len(sent) != 2 {
		t.Fatalf("%d produces to node 1, want 2", len(sent))
	}
	if gap := sent[1].Sub(answered[0]); gap < throttle {
		t.Errorf("second produce to node 1 sent %s after the throttled answer; want at least %s", gap, throttle)
	}

	// A long throttle on node 1: node 2's partition goes on, node 1's
	// record waits and then fails at its delivery timeout.
	th.mu.Lock()
	th.ms = int32(time.Hour / time.Millisecond)
	th.mu.Unlock()
	if err := p.ProduceSync(ctx, rec(0)); err != nil { // answered with an hour's throttle
		t.Fatal(err)
	}
	done := make(chan error, 1)
	p.Produce(ctx, rec(0), func(_ *Record, err error) { done <- err })
	if err := p.ProduceSync(ctx, rec(1)); err != nil {
		t.Fatalf("node 2's partition held up by node 1's throttle: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("node 1's record finished (%v) during its throttle", err)
	default:
	}
	if sent, _ := th.times(node1); len(sent) != 3 {
		t.Errorf("%d produces to node 1, want 3 (the fourth waits for the throttle)", len(sent))
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrDeliveryTimeout) {
			t.Errorf("the record held by the throttle failed with %v; want ErrDeliveryTimeout", err)
		}
	case <-ctx.Done():
		t.Fatal("the record held by the throttle never failed")
	}
}

// TestProducerThrottleOutlastsDeliveryTimeout: a record whose leader's
// throttle ends after its delivery timeout fails with ErrDeliveryTimeout
// without being sent.
func TestProducerThrottleOutlastsDeliveryTimeout(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	th := newThrottler(fc.NodeURL(1), int32(time.Hour/time.Millisecond))
	p := newProducer(t, fc, ConnectOptions(connect.WithInterceptors(th)), DeliveryTimeout(500*time.Millisecond))
	ctx := ctxT(t)
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("b")})
	if !errors.Is(err, ErrDeliveryTimeout) || !strings.Contains(err.Error(), "throttle") {
		t.Fatalf("err %v; want ErrDeliveryTimeout naming the throttle", err)
	}
	if sent, _ := th.times("Produce@" + strings.TrimPrefix(fc.NodeURL(1), "http://")); len(sent) != 1 {
		t.Errorf("%d produces sent; the throttled one must not be", len(sent))
	}
}

// TestConsumerHonoursThrottle: a fetch answered with a throttle time holds
// the next fetch from that node for that long, while another node's
// partition is fetched meanwhile.
func TestConsumerHonoursThrottle(t *testing.T) {
	fc := newFake(t, 2, "t", 2)
	th := newThrottler(fc.NodeURL(1), int32(time.Hour/time.Millisecond))
	p := newProducer(t, fc, ManualPartitioning())
	ctx := ctxT(t)
	produce := func(part int32, v string) {
		t.Helper()
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: part, Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, "a")
	produce(1, "b")
	c := newConsumer(t, fc, ConnectOptions(connect.WithInterceptors(th)))
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0), 1: AtOffset(0)}})
	got := map[int32][]string{}
	testwait.Until(t, 20*time.Second, "both first records", func() error {
		recs, err := c.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		}
		if len(got[0]) == 0 || len(got[1]) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	node1 := "Fetch@" + strings.TrimPrefix(fc.NodeURL(1), "http://")
	before, _ := th.times(node1)

	produce(0, "c")
	produce(1, "d")
	testwait.Until(t, 20*time.Second, "node 2's second record", func() error {
		recs, err := c.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		}
		if len(got[1]) < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	if len(got[0]) != 1 {
		t.Errorf("partition 0 (node 1, throttled for an hour) returned %q", got[0])
	}
	if after, _ := th.times(node1); len(after) != len(before) {
		t.Errorf("%d fetches sent to the throttled node during its throttle", len(after)-len(before))
	}
}
