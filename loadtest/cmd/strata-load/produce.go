package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	connect "connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/partitioner"
)

// settings are the knobs every run shares.
type settings struct {
	records     int           // per produce run; 0: no limit
	duration    time.Duration // per produce run; 0: no limit
	inflight    int           // closed loop: records produced and not yet acknowledged, at most
	linger      time.Duration // producer linger
	maxInFlight int           // idempotent producer: batches in flight per partition
	keys        int           // distinct keys
	rate        rateSpec      // offered load of rate runs
	keepTopics  bool
	// txnBatches lists the transactional runs after each max run
	// (--txn-batches): batches per transaction, each of txnBatchRecords
	// records (txn.go).
	txnBatches      []int
	txnBatchRecords int
	// requestBytes is the size of a request run's requests (request.go).
	requestBytes int
}

// runner makes the runs against one cluster.
type runner struct {
	gateway string
	copts   []client.Opt // the credentials, for every producer and consumer
	// admin asks the processes' admin ports for profiles: plain HTTP, or
	// with --tls-ca (a cluster run with TLS, whose admin ports speak it
	// too) https with the credentials' client.
	admin       *http.Client
	adminScheme string
	gw          gatewayv1connect.GatewayServiceClient
	// kafka, when set (--protocol kafka), makes the runs' producers and
	// consumers franz-go at the Kafka listener (kafka.go).
	kafka    *kafkaConfig
	set      settings
	cpu      *cpuMeter
	progress io.Writer
	// origin is the zero of the send times stamped into rate-run values,
	// taken from the monotonic clock so a wall-clock step cannot skew
	// end-to-end latency (producer and consumer share this process).
	origin time.Time
	keys   [][]byte
	// breakdown reads the storage nodes' stage histograms around each
	// produce run (--breakdown, breakdown.go).
	breakdown bool
}

func newRunner(gateway string, gw gatewayv1connect.GatewayServiceClient, set settings, cpu *cpuMeter, progress io.Writer) *runner {
	r := &runner{gateway: gateway, gw: gw, set: set, cpu: cpu, progress: progress, origin: time.Now(),
		admin: http.DefaultClient, adminScheme: "http"}
	for i := range set.keys {
		r.keys = append(r.keys, fmt.Appendf(nil, "key-%d", i))
	}
	return r
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, format+"\n", args...)
}

func (r *runner) createTopic(ctx context.Context, w workload, what string) (string, error) {
	topic := fmt.Sprintf("load-%s-%s-%d", w.Name(), what, time.Now().UnixMilli())
	_, err := r.gw.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
		Name: topic, Partitions: w.Partitions, ReplicationFactor: w.Durability.RF,
	}))
	if err != nil {
		return "", fmt.Errorf("create topic %s: %w", topic, err)
	}
	return topic, nil
}

func (r *runner) deleteTopic(ctx context.Context, topic string) {
	if r.set.keepTopics || topic == "" {
		return
	}
	if _, err := r.gw.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: topic})); err != nil {
		r.logf("  (could not delete topic %s: %v)", topic, err)
	}
}

// warmUpRecords is how many one-byte records warmUp writes per partition.
const warmUpRecords = 4

// newProducer returns a producer for the workload that has already
// fetched metadata, its producer id and a connection to every leader, so
// a run measures none of that. The warm-up records are one byte long, so
// rate-run consumers can tell them from stamped values. linger is the
// producer's (--linger, or a request run's own).
func (r *runner) newProducer(ctx context.Context, w workload, topic string, linger time.Duration) (loadProducer, error) {
	var p loadProducer
	if r.kafka != nil {
		kp, err := r.newKafkaProducer(w, linger)
		if err != nil {
			return nil, err
		}
		p = kp
	} else {
		gp, err := client.NewProducer(r.gateway, r.producerOpts(client.WithAcks(w.Durability.Acks), client.Linger(linger),
			client.Idempotent(w.Durability.Acks == client.AcksAll), client.MaxInFlight(r.set.maxInFlight))...)
		if err != nil {
			return nil, err
		}
		p = goProducer{gp}
	}
	var recs []*client.Record
	for part := range w.Partitions {
		key := keyFor(part, w.Partitions)
		for range warmUpRecords {
			recs = append(recs, &client.Record{Topic: topic, Key: key, Value: []byte("w")})
		}
	}
	if err := p.produceSync(ctx, recs); err != nil {
		p.close()
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return p, nil
}

// keyFor returns a key the default partitioner maps to partition p of n.
func keyFor(p, n int32) []byte {
	for i := 0; ; i++ {
		k := fmt.Appendf(nil, "warm-%d", i)
		if partitioner.ForKey(k, n) == p {
			return k
		}
	}
}

func recordValue(size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// outcome collects the callbacks of one run.
type outcome struct {
	acked, failed, bytes atomic.Int64
	lastAck              atomic.Int64 // UnixNano of the latest callback
	mu                   sync.Mutex
	firstErr             error
}

func (o *outcome) done(size int, err error) {
	o.lastAck.Store(time.Now().UnixNano())
	if err != nil {
		o.failed.Add(1)
		o.mu.Lock()
		if o.firstErr == nil {
			o.firstErr = err
		}
		o.mu.Unlock()
		return
	}
	o.acked.Add(1)
	o.bytes.Add(int64(size))
}

func (o *outcome) err() error {
	if n := o.failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d records failed, first: %w", n, n+o.acked.Load(), o.firstErr)
	}
	return nil
}

// ticker prints progress every few seconds until stop is called.
func (r *runner) ticker(label string, start time.Time, o *outcome) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s := time.Since(start).Seconds()
				r.logf("  %s: %.0fs, %d records acknowledged, %.1f MB/s so far", label, s, o.acked.Load(),
					float64(o.bytes.Load())/1e6/s)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// runMax produces to topic (new and empty) as fast as the in-flight
// bound allows: closed loop, the shape of a throughput test. Latency is
// Produce to callback, so it includes the wait in the producer's batches.
// It leaves the topic filled for the consume runs.
func (r *runner) runMax(ctx context.Context, w workload, topic string, records int, duration time.Duration) (Result, error) {
	res := newResult(w, modeMax)
	p, err := r.newProducer(ctx, w, topic, r.set.linger)
	if err != nil {
		return res, err
	}
	defer p.close()

	value := recordValue(w.RecordBytes)
	lat := newLatency()
	var o outcome
	var wg sync.WaitGroup
	window := make(chan struct{}, r.set.inflight)
	before := r.cpu.sample()
	start := time.Now()
	stop := r.ticker(w.Name()+" max", start, &o)
	var sendErr error
	for i := 0; records == 0 || i < records; i++ {
		if duration > 0 && time.Since(start) >= duration {
			break
		}
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
		if sendErr != nil {
			break
		}
		wg.Add(1)
		sent := time.Now()
		p.produce(ctx, topic, r.keys[i%len(r.keys)], value, func(err error) {
			lat.Record(time.Since(sent))
			o.done(w.RecordBytes, err)
			<-window
			wg.Done()
		})
	}
	wg.Wait()
	stop()
	res.finish(start, time.Unix(0, o.lastAck.Load()), o.acked.Load(), o.bytes.Load())
	res.Ack = lat.Summary()
	res.CPU = r.cpu.between(before, r.cpu.sample(), res.Bytes)
	return res, errors.Join(sendErr, o.err())
}

// runRate offers a constant load (open loop) and measures, from each
// record's intended send time, the time to its acknowledgement and the
// time until a consumer reading the topic alongside receives it.
func (r *runner) runRate(ctx context.Context, w workload, mbps float64) (Result, error) {
	res := newResult(w, modeRate)
	res.OfferedMBps = mbps
	res.OfferedFraction = r.set.rate.Fraction
	if mbps <= 0 {
		return res, fmt.Errorf("offered load %.3f MB/s: must be positive", mbps)
	}
	if w.RecordBytes < stampBytes {
		return res, fmt.Errorf("rate runs need records of at least %d bytes to carry their send time", stampBytes)
	}
	topic, err := r.createTopic(ctx, w, "rate")
	if err != nil {
		return res, err
	}
	defer r.deleteTopic(context.WithoutCancel(ctx), topic)
	p, err := r.newProducer(ctx, w, topic, r.set.linger)
	if err != nil {
		return res, err
	}
	defer p.close()

	e2e := newLatency()
	cons, err := r.startE2EConsumer(ctx, w, topic, e2e)
	if err != nil {
		return res, err
	}
	defer cons.stop()

	perSecond := mbps * 1e6 / float64(w.RecordBytes)
	template := recordValue(w.RecordBytes)
	ack := newLatency()
	var o outcome
	var wg sync.WaitGroup
	before := r.cpu.sample()
	start := time.Now()
	var until time.Time
	if r.set.duration > 0 {
		until = start.Add(r.set.duration)
	}
	stop := r.ticker(fmt.Sprintf("%s rate %.1f MB/s", w.Name(), mbps), start, &o)
	sent, lag, sendErr := openLoop(ctx, realClock{}, start, perSecond, r.set.records, until, func(i int, intended time.Time) {
		v := make([]byte, len(template))
		copy(v, template)
		stamp(v, intended.Sub(r.origin), i)
		wg.Add(1)
		p.produce(ctx, topic, r.keys[i%len(r.keys)], v, func(err error) {
			ack.Record(time.Since(intended))
			o.done(w.RecordBytes, err)
			wg.Done()
		})
	})
	wg.Wait()
	stop()
	last := time.Unix(0, o.lastAck.Load())
	res.finish(start, last, o.acked.Load(), o.bytes.Load())
	res.Ack = ack.Summary()
	res.SendLagMaxMs = float64(lag.Microseconds()) / 1e3
	if err := errors.Join(sendErr, o.err()); err != nil {
		return res, err
	}
	// Every acknowledged record is below the high watermark, so the
	// consumer sees it soon; allow generously for a busy machine.
	if err := cons.wait(ctx, int64(sent), 60*time.Second); err != nil {
		return res, err
	}
	res.E2E = e2e.Summary()
	res.CPU = r.cpu.between(before, r.cpu.sample(), res.Bytes)
	return res, nil
}

// stampBytes is the head of a rate-run value: the intended send time in
// nanoseconds after runner.origin, then the record's sequence number, both
// big-endian uint64.
const stampBytes = 16

func stamp(v []byte, sinceOrigin time.Duration, seq int) {
	binary.BigEndian.PutUint64(v, uint64(sinceOrigin))
	binary.BigEndian.PutUint64(v[8:], uint64(seq))
}

// unstamp returns the intended send time stamped in v; false for values
// too short to hold one (warm-up records).
func unstamp(v []byte, origin time.Time) (time.Time, bool) {
	if len(v) < stampBytes {
		return time.Time{}, false
	}
	return origin.Add(time.Duration(binary.BigEndian.Uint64(v))), true
}
