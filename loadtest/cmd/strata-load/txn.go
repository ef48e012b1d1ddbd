package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-mq/strata/client"
)

// modeTxn is the transactional run (--txn-batches): a closed loop of
// transactions, each writing N batches and committing. Not a --modes
// value: it runs after the max run once per --txn-batches value.
const modeTxn mode = "txn"

// runTxn produces to a new topic in transactions of n batches, one after
// the other, until the run's record or time bound: each batch is
// --txn-batch-records records to one partition (the next one in turn,
// so a transaction spans min(n, partitions) partitions), sent as one batch
// since they are produced together within the linger. Then
// CommitTransaction, whose duration (flushing the transaction's records,
// then EndTxn until the decision is durable) is the commit latency. MB/s
// counts the records of committed transactions only; Ack is Produce to
// acknowledgement, as in a max run.
func (r *runner) runTxn(ctx context.Context, w workload, n int) (Result, error) {
	res := newResult(w, modeTxn)
	res.TxnBatches = n
	topic, err := r.createTopic(ctx, w, fmt.Sprintf("txn%d", n))
	if err != nil {
		return res, err
	}
	defer r.deleteTopic(context.WithoutCancel(ctx), topic)
	p, err := client.NewProducer(r.gateway, r.producerOpts(client.Linger(r.set.linger), client.MaxInFlight(r.set.maxInFlight),
		client.ManualPartitioning(), client.TransactionalID(fmt.Sprintf("strata-load-%s-%d", topic, n)))...)
	if err != nil {
		return res, err
	}
	defer p.Close()

	// Warm-up, not measured: the producer id, the coordinator, and a
	// connection to every leader, in one committed transaction.
	if err := p.BeginTransaction(); err != nil {
		return res, err
	}
	var warm []*client.Record
	for part := range w.Partitions {
		warm = append(warm, &client.Record{Topic: topic, Partition: part, Value: []byte("w")})
	}
	if err := p.ProduceSync(ctx, warm...); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		return res, fmt.Errorf("warm-up commit: %w", err)
	}

	value := recordValue(w.RecordBytes)
	lat, commit := newLatency(), newLatency()
	var o outcome
	var committedRecords, committedBytes int64
	before := r.cpu.sample()
	start := time.Now()
	stop := r.ticker(fmt.Sprintf("%s txn %d", w.Name(), n), start, &o)
	defer stop()
	next := int32(0)
	per := r.set.txnBatchRecords
	var runErr error
	for {
		if r.set.duration > 0 && time.Since(start) >= r.set.duration {
			break
		}
		if r.set.records > 0 && committedRecords >= int64(r.set.records) {
			break
		}
		if err := p.BeginTransaction(); err != nil {
			runErr = err
			break
		}
		var wg sync.WaitGroup
		wg.Add(n * per)
		for range n {
			part := next % w.Partitions
			next++
			for range per {
				sent := time.Now()
				p.Produce(ctx, &client.Record{Topic: topic, Partition: part, Value: value}, func(_ *client.Record, err error) {
					lat.Record(time.Since(sent))
					o.done(w.RecordBytes, err)
					wg.Done()
				})
			}
		}
		t0 := time.Now()
		err := p.CommitTransaction(ctx)
		commit.Record(time.Since(t0))
		wg.Wait()
		if err != nil {
			runErr = fmt.Errorf("commit: %w", err)
			break
		}
		committedRecords += int64(n * per)
		committedBytes += int64(n * per * w.RecordBytes)
	}
	end := time.Now()
	res.finish(start, end, committedRecords, committedBytes)
	res.Ack = lat.Summary()
	res.Commit = commit.Summary()
	res.Transactions = commit.Count()
	res.CPU = r.cpu.between(before, r.cpu.sample(), res.Bytes)
	return res, errors.Join(runErr, o.err())
}
