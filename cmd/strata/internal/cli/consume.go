package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

func consume(ctx context.Context, e *Env, args []string) error {
	var (
		group, start, format  string
		isolation             string
		count, partition      int
		exitAtEnd, skipBroken bool
		deliveryTimeout       time.Duration
	)
	f := newFlags(e, "strata consume TOPIC [-g GROUP] [-o start|end|OFFSET|@UNIX_MS] [-n COUNT] [-e] [-f FORMAT] [--delivery-timeout DURATION]",
		`Print the records of every partition of a topic (or of one, with -p).

-o is where to start in each partition: start (the oldest record kept), end
(only new records), an offset, -N (N records before the end) or @UNIX_MS (the
first record at or after that time). -e stops at the end of the log: each
partition is read up to its high watermark as it was when consume started.

FORMAT is "json" for one JSON object per record:
  {"topic","partition","offset","timestamp","key","value","headers"}
(timestamp in Unix ms; key, value and header values as text when valid UTF-8,
else {"base64":"..."}; null when absent; headers as an object, the last value
winning for a repeated key), or a format string with %t topic, %p partition,
%o offset, %k key, %v value, %h headers (k=v,k=v), %T timestamp (Unix ms),
escapes \t \n \r \\ and %%.

A batch that cannot be decoded (a log written before leaders validated
batches) stops consume with an error naming its partition and offsets;
--skip-corrupt reads on past such batches, losing their records, with a
warning on stderr for each.

While the client retries (no leader, an unreachable node, the group
coordinator unavailable), one line on stderr says why it waits, and one
more when another reason appears. When no fetch has succeeded for
--delivery-timeout, consume exits 1 with one line saying what it waited for.

--isolation committed (the default, Kafka's read_committed) reads each
partition up to its last stable offset and leaves out the records of
aborted transactions; uncommitted (read_uncommitted) reads every record up
to the high watermark. Transaction markers are never printed. Without
transactions in a topic the two read the same records.`,
		`strata consume orders -o start -e -f '%p:%o %k=%v\n'`)
	f.String(&group, "g", "group", "GROUP", "", "consume as a member of a consumer group (needs the coordinator)")
	f.String(&start, "o", "offset", "POSITION", "start", "where to start: start, end, OFFSET, -N or @UNIX_MS")
	f.Int(&count, "n", "count", "COUNT", 0, "exit after COUNT records (0: no limit)")
	f.Bool(&exitAtEnd, "e", "exit", "exit at the end of the log")
	f.String(&format, "f", "format", "FORMAT", `%v\n`, "output format: json or a format string")
	f.Int(&partition, "p", "partition", "PARTITION", -1, "read only this partition (-1: all)")
	f.Bool(&skipBroken, "", "skip-corrupt", "skip batches that cannot be decoded (their records are lost), warning on stderr")
	f.String(&isolation, "", "isolation", "LEVEL", "committed", "committed (read_committed) or uncommitted (read up to the high watermark)")
	f.Duration(&deliveryTimeout, "", "delivery-timeout", "DURATION", 2*time.Minute,
		"how long a poll may keep retrying failed fetches (no leader, unreachable node, no coordinator) before consume fails")
	pos, err := f.parse(args, "TOPIC")
	if err != nil {
		return err
	}
	if deliveryTimeout <= 0 {
		return usagef("--delivery-timeout must be positive, not %s", deliveryTimeout)
	}
	if isolation != "committed" && isolation != "uncommitted" {
		return usagef("--isolation must be committed or uncommitted, not %q", isolation)
	}
	isolate := client.ReadCommitted()
	if isolation == "uncommitted" {
		isolate = client.ReadUncommitted()
	}
	topic := pos[0]
	off, err := parseStart(start)
	if err != nil {
		return usagef("%v", err)
	}
	if count < 0 {
		return usagef("-n must not be negative")
	}
	asJSON := format == "json" || (e.Output == "json" && !flagGiven(args, "f", "format"))
	var out *outputFormat
	if !asJSON {
		if out, err = newOutputFormat(format); err != nil {
			return usagef("-f: %v", err)
		}
	}
	if group != "" {
		rctx, cancel := withTimeout(ctx)
		defer cancel()
		if _, err := e.gateway().FindCoordinator(rctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: group})); err != nil {
			if _, _, down := unreachable(err); down {
				return err
			}
			if code := connect.CodeOf(err); code == connect.CodeUnavailable || code == connect.CodeUnimplemented {
				return errors.New(msgNoCoordinator)
			}
			return err
		}
		if partition >= 0 {
			return usagef("-p cannot be used with -g: the group coordinator assigns the partitions")
		}
		wait := newWaitNotice(e, deliveryTimeout, fmt.Sprintf("group %q", group))
		return consumeGroup(ctx, e, topic, group, off, count, exitAtEnd, asJSON, out, wait,
			append(corruptOpts(e, skipBroken), isolate, client.DeliveryTimeout(deliveryTimeout), client.OnRetry(wait.onRetry)))
	}

	wait := newWaitNotice(e, deliveryTimeout, "")
	c, err := client.NewConsumer(e.gatewayURL(),
		e.consumerOpts(append(corruptOpts(e, skipBroken), isolate, client.DeliveryTimeout(deliveryTimeout), client.OnRetry(wait.onRetry))...)...)
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.Partitions(ctx, topic)
	if err != nil {
		return err
	}
	parts := make([]int32, 0, n)
	for p := range n {
		if partition < 0 || int(p) == partition {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("topic %q has no partition %d (it has %d)", topic, partition, n)
	}
	// Resolve the start now, so -e can compare it with the end.
	startAt, err := c.ListOffsets(ctx, topic, parts, off)
	if err != nil {
		return wait.failed(err)
	}
	assign := map[int32]client.Offset{}
	for _, p := range parts {
		assign[p] = client.AtOffset(startAt[p])
	}
	var ends map[int32]int64
	if exitAtEnd {
		if ends, err = c.ListOffsets(ctx, topic, parts, client.EndOffset()); err != nil {
			return wait.failed(err)
		}
		for _, p := range parts {
			if startAt[p] >= ends[p] {
				delete(assign, p)
			}
		}
	}
	c.Assign(map[string]map[int32]client.Offset{topic: assign})

	w := bufio.NewWriter(e.Stdout)
	defer w.Flush()
	printed := 0
	for len(assign) > 0 {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if exitAtEnd {
			// Wake up now and then to notice positions that reached the
			// end through batches without records.
			pctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		recs, err := c.Poll(pctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil // interrupted: what was printed stands
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return wait.failed(corruptHint(err, ""))
		}
		for _, r := range recs {
			if exitAtEnd && r.Offset >= ends[r.Partition] {
				continue
			}
			_, span := c.StartProcessSpan(ctx, r)
			if asJSON {
				err = writeJSON(w, toJSON(r))
			} else {
				err = out.write(w, r)
			}
			span.End()
			if err != nil {
				return err
			}
			printed++
			if count > 0 && printed >= count {
				return w.Flush()
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if exitAtEnd {
			for p := range assign {
				if pos, ok := c.Position(topic, p); ok && pos >= ends[p] {
					c.Unassign(topic, p)
					delete(assign, p)
				}
			}
		}
	}
	return nil
}

// flagGiven reports whether a flag appears on the command line.
func flagGiven(args []string, names ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		for _, n := range names {
			for _, form := range []string{"-" + n, "--" + n} {
				if a == form || len(a) > len(form) && a[:len(form)+1] == form+"=" {
					return true
				}
			}
		}
	}
	return false
}

// consumeGroup reads topic as a member of group: the coordinator assigns
// the partitions, reading starts at the group's committed offsets (at off
// where there is none), and the offsets of the records printed are
// committed after each batch, so a restarted consume goes on after the
// last record it printed. With -e it exits once every partition it owns
// is read to its high watermark. opts are the options of its consumer;
// wait is the notice they report retries to.
func consumeGroup(ctx context.Context, e *Env, topic, group string, off client.Offset, count int, exitAtEnd, asJSON bool, out *outputFormat,
	wait *waitNotice, opts []client.ConsumerOpt) error {
	gc, err := client.NewGroupConsumer(e.gatewayURL(), group, []string{topic}, client.StartWhenNoCommit(off), client.ClientID("strata-cli"),
		client.GroupConsumerOptions(e.consumerOpts(opts...)...))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = gc.Close(cctx)
	}()
	w := bufio.NewWriter(e.Stdout)
	defer w.Flush()
	printed := 0
	idle := 0
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if exitAtEnd {
			pctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		recs, err := gc.Poll(pctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil // interrupted: what was printed stands (and was committed)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return wait.failed(corruptHint(err, group))
		}
		var done []*client.Record
		for _, r := range recs {
			_, span := gc.StartProcessSpan(ctx, r)
			if asJSON {
				err = writeJSON(w, toJSON(r))
			} else {
				err = out.write(w, r)
			}
			span.End()
			if err != nil {
				return err
			}
			done = append(done, r)
			printed++
			if count > 0 && printed >= count {
				break
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(done) > 0 {
			cctx, cancel := withTimeout(context.WithoutCancel(ctx))
			err := gc.CommitRecords(cctx, done...)
			cancel()
			if err != nil {
				return err
			}
		}
		if count > 0 && printed >= count {
			return nil
		}
		if exitAtEnd && len(recs) == 0 {
			// At the end when every owned partition's position reached
			// its high watermark (twice in a row, to let a rebalance
			// that is still moving partitions settle).
			assigned := gc.Assignment()
			atEnd := len(assigned) > 0
			for _, tp := range assigned {
				pos, ok1 := gc.Position(tp.Topic, tp.Partition)
				hw, ok2 := gc.HighWatermark(tp.Topic, tp.Partition)
				if !ok1 || !ok2 || pos < hw {
					atEnd = false
				}
			}
			if atEnd {
				idle++
			} else {
				idle = 0
			}
			if idle >= 2 {
				return nil
			}
		}
	}
}

// corruptOpts are the consumer options for --skip-corrupt: move past a
// batch that cannot be decoded and say so on stderr.
func corruptOpts(e *Env, skip bool) []client.ConsumerOpt {
	if !skip {
		return nil
	}
	return []client.ConsumerOpt{client.SkipCorruptBatches(func(err *client.CorruptBatchError) {
		what := fmt.Sprintf("offset %d", err.Offset)
		if err.Next > err.Offset+1 {
			what = fmt.Sprintf("offsets %d to %d", err.Offset, err.Next-1)
		}
		fmt.Fprintf(e.Stderr, "strata: skipped %s of topic %s partition %d: batch cannot be decoded: %s\n",
			what, err.Topic, err.Partition, oneLine(err.Err.Error()))
	})}
}

// corruptHint adds to a *client.CorruptBatchError how to read on past the
// batch: start after it (-p/-o; a group's position is its committed offset,
// so only --skip-corrupt applies there) or skip such batches. Other errors
// pass through unchanged.
func corruptHint(err error, group string) error {
	var cbe *client.CorruptBatchError
	if !errors.As(err, &cbe) {
		return err
	}
	if cbe.Next < 0 {
		return fmt.Errorf("%w; its header is unreadable too, so nothing says where it ends", err)
	}
	if group != "" {
		return fmt.Errorf("%w; to read on past it, run again with --skip-corrupt (its records are lost)", err)
	}
	return fmt.Errorf("%w; to read on past it, run again with -p %d -o %d, or with --skip-corrupt to skip every such batch (their records are lost)",
		err, cbe.Partition, cbe.Next)
}
