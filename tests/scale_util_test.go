package tests

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/tests/harness"
)

// What the elastic-storage tests share: a steady acks=all load whose every
// acknowledgement is remembered, a consumer that measures how long it went
// without records, a watch on the ISR, and the final check that the log
// holds every acknowledged record exactly once where it was acknowledged.

// ackedLoad produces keyed records through the gateway with the Go
// client's idempotent acks=all producer, at a steady rate, and remembers
// where each was acknowledged and how long each took.
type ackedLoad struct {
	topic string
	p     *client.Producer
	stop  chan struct{}
	done  chan struct{}

	mu        sync.Mutex
	acked     map[string]ackedAt // value -> where it was acknowledged
	sent      int
	failed    map[string]int // error text -> count
	latencies []sample
}

type ackedAt struct {
	partition int32
	offset    int64
}

// sample is one acknowledged record's latency and when it was sent.
type sample struct {
	at      time.Time
	latency time.Duration
}

// startLoad sends perSecond records a second, keys spread over keys, with
// values of valueBytes (at least enough for a unique name); opts tune the
// producer further. A full producer buffer slows the sending down.
func startLoad(t *testing.T, gateway, topic string, perSecond, keys, valueBytes int, opts ...client.ProducerOpt) *ackedLoad {
	t.Helper()
	opts = append([]client.ProducerOpt{client.RequestTimeout(10 * time.Second), client.Linger(5 * time.Millisecond)}, opts...)
	p, err := client.NewProducer(gateway, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l := &ackedLoad{topic: topic, p: p, stop: make(chan struct{}), done: make(chan struct{}),
		acked: map[string]ackedAt{}, failed: map[string]int{}}
	pad := strings.Repeat("x", max(valueBytes-24, 0))
	go func() {
		defer close(l.done)
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			value := fmt.Sprintf("v-%08d-%s", i, pad)
			key := fmt.Sprintf("k%d", i%keys)
			sent := time.Now()
			l.mu.Lock()
			l.sent++
			l.mu.Unlock()
			l.p.Produce(context.Background(), &client.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}, func(r *client.Record, err error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					l.failed[err.Error()]++
					return
				}
				l.acked[value] = ackedAt{r.Partition, r.Offset}
				l.latencies = append(l.latencies, sample{sent, time.Since(sent)})
			})
		}
	}()
	return l
}

// waitMoreAcks returns once n more records are acknowledged than when it
// was called: the load has run on whatever placement the cluster now has.
func (l *ackedLoad) waitMoreAcks(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	want := l.ackedCount() + n
	for l.ackedCount() < want {
		select {
		case <-ctx.Done():
			t.Fatalf("the load got %d acknowledgements, waiting for %d", l.ackedCount(), want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finish stops sending and waits until every record sent is acknowledged
// or failed.
func (l *ackedLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := l.p.Flush(ctx); err != nil {
		t.Errorf("flush: %v", err)
	}
	l.p.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("load on %s: %d sent, %d acknowledged, failures %v", l.topic, l.sent, len(l.acked), l.failed)
	if len(l.failed) > 0 {
		t.Errorf("%d records failed: %v", l.sent-len(l.acked), l.failed)
	}
}

// fillTopic produces n records (keys spread over keys, values of
// valueBytes) as fast as the cluster takes them and returns once all are
// acknowledged.
func fillTopic(t *testing.T, ctx context.Context, gateway, topic string, n, keys, valueBytes int, opts ...client.ProducerOpt) {
	t.Helper()
	fill := startLoad(t, gateway, topic, 2000, keys, valueBytes, append([]client.ProducerOpt{client.MaxBufferedRecords(1000)}, opts...)...)
	for fill.ackedCount() < n {
		select {
		case <-ctx.Done():
			t.Fatalf("fill got only %d of %d acknowledgements", fill.ackedCount(), n)
		case <-time.After(200 * time.Millisecond):
		}
	}
	fill.finish(t)
}

// ackedCount returns how many records are acknowledged so far.
func (l *ackedLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// p99 is the 99th percentile latency of records sent in [from, to).
func (l *ackedLoad) p99(from, to time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, s := range l.latencies {
		if !s.at.Before(from) && s.at.Before(to) {
			ds = append(ds, s.latency)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[int(math.Ceil(0.99*float64(len(ds))))-1], len(ds)
}

// tailer reads every partition of a topic from the start, as a consumer
// would, and records each record's value and the longest time it went
// without receiving a record while watching.
type tailer struct {
	c    *client.Consumer
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	seen     map[string][]ackedAt // value -> where it was read
	last     time.Time
	watching bool
	maxGap   time.Duration
	errs     map[string]int
}

func startTailer(t *testing.T, gateway, topic string, partitions int32) *tailer {
	t.Helper()
	c, err := client.NewConsumer(gateway, client.RequestTimeout(5*time.Second), client.FetchMaxWait(200*time.Millisecond),
		client.RetryBackoff(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	as := map[int32]client.Offset{}
	for p := range partitions {
		as[p] = client.StartOffset()
	}
	c.Assign(map[string]map[int32]client.Offset{topic: as})
	tl := &tailer{c: c, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string][]ackedAt{}, errs: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-tl.stop
		cancel()
	}()
	go func() {
		defer close(tl.done)
		for ctx.Err() == nil {
			recs, err := c.Poll(ctx)
			now := time.Now()
			tl.mu.Lock()
			if err != nil && ctx.Err() == nil {
				tl.errs[err.Error()]++
			}
			if len(recs) > 0 {
				if tl.watching && !tl.last.IsZero() {
					tl.maxGap = max(tl.maxGap, now.Sub(tl.last))
				}
				tl.last = now
			}
			for _, r := range recs {
				v := string(r.Value)
				tl.seen[v] = append(tl.seen[v], ackedAt{r.Partition, r.Offset})
			}
			tl.mu.Unlock()
		}
	}()
	return tl
}

// watch starts (or stops) measuring gaps between records.
func (tl *tailer) watch(on bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.watching, tl.last = on, time.Now()
}

func (tl *tailer) gap() time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.maxGap
}

// waitFor waits until the tailer has read every value in want.
func (tl *tailer) waitFor(t *testing.T, ctx context.Context, want map[string]ackedAt) {
	t.Helper()
	for {
		tl.mu.Lock()
		missing := 0
		for v := range want {
			if len(tl.seen[v]) == 0 {
				missing++
			}
		}
		tl.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer still misses %d of %d acknowledged records: %v", missing, len(want), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (tl *tailer) close() {
	close(tl.stop)
	<-tl.done
	tl.c.Close()
}

// checkExactlyOnce requires every acknowledged record to be read once, at
// the partition and offset its acknowledgement gave, and nothing read that
// was never sent.
func checkExactlyOnce(t *testing.T, l *ackedLoad, tl *tailer) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	bad := 0
	for v, at := range l.acked {
		got := tl.seen[v]
		if len(got) != 1 || got[0] != at {
			if bad < 10 {
				t.Errorf("record %.10s acknowledged at %d/%d, read at %v", v, at.partition, at.offset, got)
			}
			bad++
		}
	}
	for v, got := range tl.seen {
		if len(got) > 1 {
			if bad < 10 {
				t.Errorf("record %.10s read %d times: %v", v, len(got), got)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d records lost, moved or duplicated of %d acknowledged", bad, len(l.acked))
	}
	t.Logf("%d acknowledged records each read exactly once where acknowledged; consumer errors retried: %v", len(l.acked), tl.errs)
}

// isrWatch polls a topic's partitions and remembers, per partition, the
// smallest ISR seen while it had a leader and any time it had none.
type isrWatch struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	minISR  map[int32]int
	offline map[int32]int
	polls   int
}

func watchISR(c *harness.Cluster, topic string) *isrWatch {
	w := &isrWatch{stop: make(chan struct{}), done: make(chan struct{}), minISR: map[int32]int{}, offline: map[int32]int{}}
	go func() {
		defer close(w.done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d, err := describeAny(ctx, c, topic)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.polls++
				for _, p := range d.GetPartitions() {
					idx := p.GetPartition()
					if p.GetLeaderId() < 0 {
						w.offline[idx]++
						continue
					}
					if cur, ok := w.minISR[idx]; !ok || len(p.GetIsr()) < cur {
						w.minISR[idx] = len(p.GetIsr())
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// describeAny asks any running controller.
func describeAny(ctx context.Context, c *harness.Cluster, topic string) (*controllerv1.TopicDescription, error) {
	var last error
	for _, n := range c.Controllers() {
		if n.Proc.Exited() {
			continue
		}
		resp, err := n.ControllerClient().DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{Names: []string{topic}}))
		if err == nil && len(resp.Msg.GetTopics()) == 1 {
			return resp.Msg.GetTopics()[0], nil
		}
		last = err
	}
	return nil, fmt.Errorf("no controller answered: %v", last)
}

// check stops the watch and requires every partition's ISR to have stayed
// at or above minISR, and no partition to have been without a leader.
func (w *isrWatch) check(t *testing.T, minISR int) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls < 10 {
		t.Errorf("ISR watch saw the partitions only %d times", w.polls)
	}
	var parts []int
	for p := range w.minISR {
		parts = append(parts, int(p))
	}
	sort.Ints(parts)
	for _, p := range parts {
		if m := w.minISR[int32(p)]; m < minISR {
			t.Errorf("partition %d: ISR dropped to %d, below min.insync.replicas %d", p, m, minISR)
		}
	}
	for p, n := range w.offline {
		t.Errorf("partition %d had no leader in %d of %d looks", p, n, w.polls)
	}
	t.Logf("ISR watch: %d looks, smallest ISR per partition %v", w.polls, w.minISR)
}

// waitMoveDone waits until the partition has no move running and holds
// exactly want (as a set), and returns its record.
func waitMoveDone(ctx context.Context, c *harness.Cluster, topic string, partition int32, want ...int32) *commonv1.PartitionMetadata {
	return c.WaitPartition(ctx, topic, partition, fmt.Sprintf("the move to %v to complete", want), func(p *commonv1.PartitionMetadata) bool {
		got := slices.Clone(p.GetReplicas())
		w := slices.Clone(want)
		slices.Sort(got)
		slices.Sort(w)
		return !harness.Moving(p) && slices.Equal(got, w) && harness.FullISR(p)
	})
}

// gatewayClient is a gateway client for gw.
func gatewayClient(gw *harness.Node) gatewayv1connect.GatewayServiceClient {
	return gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), gw.URL)
}

// nodeLoads counts replicas and leaders per node over a topic.
func nodeLoads(d *controllerv1.TopicDescription) (replicas, leaders map[int32]int) {
	replicas, leaders = map[int32]int{}, map[int32]int{}
	for _, p := range d.GetPartitions() {
		for _, r := range p.GetReplicas() {
			replicas[r]++
		}
		leaders[p.GetLeaderId()]++
	}
	return replicas, leaders
}

// within reports whether every one of nodes has floor or ceil of total
// over len(nodes) in counts.
func within(counts map[int32]int, nodes []int32, total int) bool {
	n := len(nodes)
	for _, id := range nodes {
		if c := counts[id]; c < total/n || c > (total+n-1)/n {
			return false
		}
	}
	return true
}
