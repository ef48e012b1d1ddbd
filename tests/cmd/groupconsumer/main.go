// Command groupconsumer is one member of a consumer group, run as a real
// process by the group fault tests in tests/ (SIGKILL, SIGSTOP/SIGCONT,
// restart). It reads one topic with client.GroupConsumer and, for each
// batch Poll returns, prints every record, waits --process-delay (the
// "processing"), then commits the batch with CommitRecords and prints the
// outcome. So what it printed as committed was printed as read first, and a
// pause or kill between the two leaves read records uncommitted.
//
// Stdout is one event per line, fields separated by single spaces; the
// tests parse it, so this is part of their contract:
//
//	member ID                     once, before joining
//	epoch N                       the member epoch changed to N (0: fenced, rejoining); sampled every 10ms
//	assigned P,P,...              OnAssigned: partitions gained
//	revoked P,P,...               OnRevoked: partitions given up, or lost to a fence
//	record P OFFSET VALUE         a record Poll returned
//	committing EPOCH P:OFF,...    printed just before a commit is sent, so a process killed or paused
//	                              without this line for its last batch has not sent that commit
//	commit ok EPOCH P:OFF,...     a commit that succeeded; OFF is one past the batch's last record of P
//	commit fenced EPOCH P:OFF,... MESSAGE   a commit refused because the member is a zombie, or the records were read under an earlier assignment of their partition (client.ErrFenced)
//	commit error EPOCH P:OFF,... MESSAGE    a commit that failed otherwise
//	closed                        after a clean Close on SIGTERM or SIGINT
//
// EPOCH on a committing or commit line is the member epoch read just
// before the commit.
// Diagnostics go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-mq/strata/client"
)

func main() {
	gateway := flag.String("gateway", "http://127.0.0.1:9092", "gateway base URL")
	group := flag.String("group", "", "consumer group id (required)")
	topic := flag.String("topic", "", "topic to read (required)")
	delay := flag.Duration("process-delay", 0, "pause between printing a batch and committing it")
	flag.Parse()
	if *group == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "groupconsumer: --group and --topic are required")
		os.Exit(2)
	}
	if err := run(*gateway, *group, *topic, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "groupconsumer:", err)
		os.Exit(1)
	}
}

// out serializes stdout lines from the Poll goroutine and the epoch watcher.
type out struct{ mu sync.Mutex }

func (o *out) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func partitions(tps []client.TopicPartition) string {
	s := make([]string, len(tps))
	for i, tp := range tps {
		s[i] = strconv.Itoa(int(tp.Partition))
	}
	return strings.Join(s, ",")
}

func run(gateway, group, topic string, delay time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	o := &out{}
	gc, err := client.NewGroupConsumer(gateway, group, []string{topic},
		client.GroupConsumerOptions(client.FetchMaxWait(100*time.Millisecond), client.RetryBackoff(50*time.Millisecond),
			client.MaxRetryBackoff(500*time.Millisecond), client.RequestTimeout(5*time.Second)),
		client.ClientID("groupconsumer"),
		client.OnAssigned(func(_ context.Context, tps []client.TopicPartition) { o.printf("assigned %s", partitions(tps)) }),
		client.OnRevoked(func(_ context.Context, tps []client.TopicPartition) { o.printf("revoked %s", partitions(tps)) }))
	if err != nil {
		return err
	}
	o.printf("member %s", gc.MemberID())

	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		last := int32(-1)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if e := gc.Epoch(); e != last {
				last = e
				o.printf("epoch %d", e)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	for ctx.Err() == nil {
		recs, err := gc.Poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "groupconsumer: poll:", err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		next := map[int32]int64{}
		for _, r := range recs {
			o.printf("record %d %d %s", r.Partition, r.Offset, r.Value)
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		}
		if delay > 0 {
			time.Sleep(delay) // not ctx-bound: a batch printed is committed, as an application would
		}
		ps := make([]int32, 0, len(next))
		for p := range next {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		offs := make([]string, len(ps))
		for i, p := range ps {
			offs[i] = fmt.Sprintf("%d:%d", p, next[p])
		}
		epoch := gc.Epoch()
		o.printf("committing %d %s", epoch, strings.Join(offs, ","))
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = gc.CommitRecords(cctx, recs...)
		cancel()
		switch {
		case err == nil:
			o.printf("commit ok %d %s", epoch, strings.Join(offs, ","))
		case errors.Is(err, client.ErrFenced):
			o.printf("commit fenced %d %s %s", epoch, strings.Join(offs, ","), oneLine(err))
		default:
			o.printf("commit error %d %s %s", epoch, strings.Join(offs, ","), oneLine(err))
		}
	}
	<-watchDone
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gc.Close(cctx); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	o.printf("closed")
	return nil
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
