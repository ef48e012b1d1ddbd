package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/strata-mq/strata/client"
)

func produce(ctx context.Context, e *Env, args []string) error {
	var (
		key, acks, format, compression string
		headers                        []string
		partition                      int
		deliveryTimeout                time.Duration
	)
	f := newFlags(e, "strata produce TOPIC [-k KEY] [-H K=V]... [--acks all|leader|none] [-f FORMAT] [--delivery-timeout DURATION]",
		`Produce one record per line of stdin and print a delivery report per record on stdout:
"partition P offset O [key K]" (with --output json: {"partition":P,"offset":O,"key":K}).
Failed records are printed on stderr, one line each, and make the exit code 1.
Leader changes are retried by the client (idempotent with --acks all).

While the client retries (no leader, not enough in-sync replicas for
--acks all, an unreachable node), one line on stderr says why it waits
("strata: waiting: orders-3: not enough in-sync replicas (ISR 1,
min.insync.replicas 2); ..."), and one more when another reason appears.
A record still not acknowledged after --delivery-timeout fails.

FORMAT describes each input record with %k (key) and %v (value) and literal
separators; escapes \t \n \r \\ and %% work. A format that does not end in a
literal ends at a newline.`,
		`printf 'k1\tv1\nk2\tv2\n' | strata produce orders -f '%k\t%v\n'`)
	f.String(&key, "k", "key", "KEY", "", "key for every record (no key: records spread over partitions)")
	f.List(&headers, "H", "header", "K=V", "header for every record; repeatable")
	f.String(&acks, "", "acks", "all|leader|none", "all", "acknowledgement level")
	f.String(&format, "f", "format", "FORMAT", `%v\n`, "input record format")
	f.String(&compression, "z", "compression", "CODEC", "none", "batch compression: none, gzip, snappy, lz4, zstd")
	f.Int(&partition, "p", "partition", "PARTITION", -1, "send every record to this partition (-1: by key)")
	f.Duration(&deliveryTimeout, "", "delivery-timeout", "DURATION", 2*time.Minute,
		"how long a record may keep being retried (no leader, not enough in-sync replicas, unreachable node) before it fails")
	pos, err := f.parse(args, "TOPIC")
	if err != nil {
		return err
	}
	if deliveryTimeout <= 0 {
		return usagef("--delivery-timeout must be positive, not %s", deliveryTimeout)
	}
	topic := pos[0]
	level, err := client.ParseAcks(acks)
	if err != nil {
		return usagef("--%s", err)
	}
	codec, err := client.ParseCompression(compression)
	if err != nil {
		return usagef("--%s", err)
	}
	in, err := newInputFormat(format)
	if err != nil {
		return usagef("-f: %v", err)
	}
	if key != "" && in.hasKey() {
		return usagef("give the key with -k or with %%k in -f, not both")
	}
	var hs []client.Header
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return usagef("-H wants K=V, not %q", h)
		}
		hs = append(hs, client.Header{Key: k, Value: []byte(v)})
	}

	wait := newWaitNotice(e, deliveryTimeout, "")
	opts := e.producerOpts(client.WithAcks(level), client.WithCompression(codec),
		client.DeliveryTimeout(deliveryTimeout), client.OnRetry(wait.onRetry))
	if partition >= 0 {
		opts = append(opts, client.ManualPartitioning())
	}
	p, err := client.NewProducer(e.gatewayURL(), opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	n, err := p.Partitions(ctx, topic)
	if err != nil {
		return err
	}
	if partition >= int(n) {
		return fmt.Errorf("topic %q has no partition %d (it has %d)", topic, partition, n)
	}

	rep := &reporter{e: e, deliveryTimeout: deliveryTimeout, done: map[int]report{}}
	type item struct {
		rec *client.Record
		err error
	}
	items := make(chan item)
	go func() {
		// Reading stdin may block forever (a terminal): this goroutine is
		// left behind when ctx ends.
		defer close(items)
		r := bufio.NewReaderSize(e.Stdin, 64<<10)
		for {
			k, v, err := in.read(r)
			if err == io.EOF {
				return
			}
			var bad *badRecordError
			if err != nil && !errors.As(err, &bad) {
				select {
				case items <- item{err: err}:
				case <-ctx.Done():
				}
				return
			}
			rec := &client.Record{Topic: topic, Value: v, Headers: hs, Partition: int32(partition)}
			if key != "" {
				rec.Key = []byte(key)
			} else if in.hasKey() {
				rec.Key = k
			}
			select {
			case items <- item{rec: rec, err: err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var readErr error
	i := 0
loop:
	for {
		select {
		case it, ok := <-items:
			if !ok {
				break loop
			}
			if it.rec == nil {
				readErr = it.err
				break loop
			}
			idx := i
			i++
			if it.err != nil {
				rep.report(idx, it.rec, it.err)
				continue
			}
			p.Produce(ctx, it.rec, func(r *client.Record, err error) { rep.report(idx, r, err) })
		case <-ctx.Done():
			break loop
		}
	}
	p.Close() // flushes what was produced
	if readErr != nil {
		return fmt.Errorf("reading stdin: %v", readErr)
	}
	if err := rep.refusal(); err != nil {
		// Refused for who the caller is, not for the records: one line.
		return err
	}
	if f := rep.failures(); f > 0 {
		return fmt.Errorf("%d of %d records failed", f, i)
	}
	return nil
}

// reporter prints delivery reports in input order, whatever order the
// partitions acknowledge in.
type reporter struct {
	e               *Env
	deliveryTimeout time.Duration // --delivery-timeout, to say in a failure
	mu              sync.Mutex
	next            int
	done            map[int]report
	failed          int
	// refused is the first refusal of the caller itself (no credentials,
	// no permission): every record meets it, so it is said once, as the
	// command's error, rather than once per record.
	refused error
}

// refusal is the refusal every record met, or nil.
func (r *reporter) refusal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

type report struct {
	rec *client.Record
	err error
}

type deliveryJSON struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	Key       any   `json:"key"`
}

func (r *reporter) report(i int, rec *client.Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[i] = report{rec, err}
	for {
		rp, ok := r.done[r.next]
		if !ok {
			return
		}
		delete(r.done, r.next)
		r.print(r.next, rp)
		r.next++
	}
}

func (r *reporter) print(i int, rp report) {
	e := r.e
	if rp.err != nil {
		r.failed++
		if errors.Is(rp.err, client.ErrPermissionDenied) || errors.Is(rp.err, client.ErrUnauthenticated) {
			if r.refused == nil {
				r.refused = rp.err
			}
			return
		}
		what := fmt.Sprintf("record %d", i+1)
		if rp.rec.Key != nil {
			what += fmt.Sprintf(" (key %q)", rp.rec.Key)
		}
		why := e.explain(rp.err)
		if errors.Is(rp.err, client.ErrDeliveryTimeout) {
			why = fmt.Sprintf("not acknowledged within the delivery timeout (%s): %s", r.deliveryTimeout,
				e.explainCause(timeoutCause(rp.err)))
			if errors.Is(rp.err, client.ErrOutcomeUnknown) {
				// Sent, and never answered: it may be in the log.
				why = "may or may not have been written, " + why
			}
		}
		fmt.Fprintf(e.Stderr, "strata: %s failed: %s\n", what, why)
		return
	}
	if e.Output == "json" {
		_ = writeJSON(e.Stdout, deliveryJSON{Partition: rp.rec.Partition, Offset: rp.rec.Offset, Key: bytesJSON(rp.rec.Key)})
		return
	}
	line := fmt.Sprintf("partition %d offset %d", rp.rec.Partition, rp.rec.Offset)
	if rp.rec.Key != nil {
		line += " key " + string(rp.rec.Key)
	}
	fmt.Fprintln(e.Stdout, line)
}

func (r *reporter) failures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
