// Command strata-load measures produce throughput and latency against a
// running cluster with the Go client, for each scenario in one run so the
// figures compare: by default RF=3 with acks=all against RF=1 with
// acks=leader, 12 partitions, 1 KiB records.
//
//	strata-load --gateway http://127.0.0.1:9092 --records 200000
//
// Each scenario creates its own topic, produces the same number of records
// with keys spread over every partition, and reports MB/s of record values
// and the p50/p99/max time from Produce to the delivery callback.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	connect "connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/serve"
)

type scenario struct {
	name string
	rf   int32
	acks client.Acks
}

var scenarios = map[string]scenario{
	"rf3-all":    {"rf3-all", 3, client.AcksAll},
	"rf1-leader": {"rf1-leader", 1, client.AcksLeader},
	"rf3-leader": {"rf3-leader", 3, client.AcksLeader},
}

type result struct {
	scenario
	records  int
	bytes    int64
	elapsed  time.Duration
	failed   int
	lat      []time.Duration
	firstErr error
}

func main() {
	gateway := flag.String("gateway", envOr("STRATA_GATEWAY", "http://127.0.0.1:9092"), "gateway base URL (env STRATA_GATEWAY)")
	records := flag.Int("records", 100000, "records per scenario")
	size := flag.Int("record-bytes", 1024, "value size of each record in bytes")
	partitions := flag.Int("partitions", 12, "partitions of each scenario's topic")
	keys := flag.Int("keys", 1000, "distinct keys, spread over the partitions")
	list := flag.String("scenarios", "rf3-all,rf1-leader", "comma-separated scenarios: rf3-all, rf1-leader, rf3-leader; the first is the baseline of the ratios")
	linger := flag.Duration("linger", 5*time.Millisecond, "producer linger")
	inflight := flag.Int("inflight", 2048, "records produced but not yet acknowledged at most; bounds queueing so latency means the cluster's")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var results []result
	for _, name := range strings.Split(*list, ",") {
		sc, ok := scenarios[strings.TrimSpace(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "strata-load: unknown scenario %q\n", name)
			os.Exit(2)
		}
		r, err := run(ctx, *gateway, sc, *records, *size, int32(*partitions), *keys, *linger, *inflight)
		if err != nil {
			fmt.Fprintf(os.Stderr, "strata-load: %s: %v\n", sc.name, err)
			os.Exit(1)
		}
		results = append(results, r)
	}
	report(results, *size, *partitions)
}

func run(ctx context.Context, gateway string, sc scenario, n, size int, partitions int32, keys int, linger time.Duration, inflight int) (result, error) {
	topic := fmt.Sprintf("load-%s-%d", sc.name, time.Now().UnixMilli())
	gw := gatewayv1connect.NewGatewayServiceClient(serve.NewHTTPClient(), gateway)
	_, err := gw.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
		Name: topic, Partitions: partitions, ReplicationFactor: sc.rf,
	}))
	if err != nil {
		return result{}, fmt.Errorf("create topic: %w", err)
	}

	p, err := client.NewProducer(gateway, client.WithAcks(sc.acks), client.Linger(linger), client.Idempotent(sc.acks == client.AcksAll))
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	// Warm up: metadata, producer id and connections to every leader.
	for i := range int(partitions) * 4 {
		if err := p.ProduceSync(ctx, &client.Record{Topic: topic, Key: fmt.Appendf(nil, "warm-%d", i), Value: []byte("w")}); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}

	value := make([]byte, size)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	res := result{scenario: sc, records: n, lat: make([]time.Duration, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(n)
	window := make(chan struct{}, inflight)
	start := time.Now()
	for i := range n {
		window <- struct{}{}
		sent := time.Now()
		r := &client.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%keys), Value: value}
		p.Produce(ctx, r, func(_ *client.Record, err error) {
			d := time.Since(sent)
			mu.Lock()
			res.lat[i] = d
			if err != nil {
				res.failed++
				if res.firstErr == nil {
					res.firstErr = err
				}
			}
			mu.Unlock()
			<-window
			wg.Done()
		})
		if ctx.Err() != nil {
			return result{}, ctx.Err()
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.bytes = int64(n) * int64(size)
	if res.failed > 0 {
		return res, fmt.Errorf("%d of %d records failed, first: %w", res.failed, n, res.firstErr)
	}
	return res, nil
}

func report(rs []result, size, partitions int) {
	fmt.Printf("%d records of %d B per scenario, %d partitions\n", rs[0].records, size, partitions)
	fmt.Printf("%-12s %10s %12s %10s %10s %10s\n", "scenario", "MB/s", "records/s", "p50", "p99", "max")
	for _, r := range rs {
		sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
		mbps := float64(r.bytes) / 1e6 / r.elapsed.Seconds()
		fmt.Printf("%-12s %10.1f %12.0f %10s %10s %10s\n", r.name, mbps, float64(r.records)/r.elapsed.Seconds(),
			pct(r.lat, 50), pct(r.lat, 99), r.lat[len(r.lat)-1].Round(time.Microsecond))
	}
	base := rs[0]
	for _, r := range rs[1:] {
		fmt.Printf("ratio %s/%s: throughput %.2fx, p50 latency %.2fx, p99 latency %.2fx\n", r.name, base.name,
			base.elapsed.Seconds()/r.elapsed.Seconds(),
			float64(pct(r.lat, 50))/float64(pct(base.lat, 50)), float64(pct(r.lat, 99))/float64(pct(base.lat, 99)))
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := len(sorted) * p / 100
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i].Round(time.Microsecond)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
