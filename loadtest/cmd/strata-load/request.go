package main

import (
	"context"
	"fmt"
	"time"
)

// modeRequest is the single-request run (--modes request): one produce
// request of --request-bytes at a time to one partition, each sent once
// the previous one was answered, on an otherwise idle cluster. Its
// latency is one request's round trip (Kafka's request latency), which a
// client that bounds its requests in flight per broker turns into its
// throughput; with --breakdown the leaders' stages show where it goes.
const modeRequest mode = "request"

// requestRuns is how many requests a request run makes, after one
// unmeasured warm-up request.
const requestRuns = 200

// runRequest sends requestRuns requests of r.set.requestBytes each, all
// records under one key (so one partition and one batch), and records
// each request's latency.
func (r *runner) runRequest(ctx context.Context, w workload, topic string) (Result, error) {
	res := newResult(w, modeRequest)
	// Records wait for a flush, not a linger: a request's records leave
	// together, as one batch, and its latency is the round trip alone.
	p, err := r.newProducer(ctx, w, topic, time.Minute)
	if err != nil {
		return res, err
	}
	defer p.close()
	n := max(1, r.set.requestBytes/w.RecordBytes)
	value := recordValue(w.RecordBytes)
	key := keyFor(0, w.Partitions)
	send := func() error {
		errs := make(chan error, n)
		for range n {
			p.produce(ctx, topic, key, value, func(err error) { errs <- err })
		}
		if err := p.flush(ctx); err != nil {
			return err
		}
		for range n {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(); err != nil {
		return res, fmt.Errorf("warm-up request: %w", err)
	}
	lat := newLatency()
	before := r.cpu.sample()
	start := time.Now()
	for range requestRuns {
		sent := time.Now()
		if err := send(); err != nil {
			return res, err
		}
		lat.Record(time.Since(sent))
	}
	end := time.Now()
	res.finish(start, end, int64(requestRuns*n), int64(requestRuns*n*w.RecordBytes))
	res.Ack = lat.Summary()
	res.RequestBytes = n * w.RecordBytes
	res.CPU = r.cpu.between(before, r.cpu.sample(), res.Bytes)
	return res, nil
}
