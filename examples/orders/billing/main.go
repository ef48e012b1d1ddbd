// Command billing is a member of the orders story's billing group: it
// keeps one invoice per order in PostgreSQL (table invoices, primary key
// order_id) through the exactly-once sink, so every event counts once in
// its order's totals however members die, restart or lose partitions.
// Run three of them; each takes a share of the partitions.
//
// --crash-after-commits N is for tests: after its Nth database commit the
// member kills itself with SIGKILL before it commits to the group
// coordinator, the one window where the two disagree.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/client/pgsink"
	"github.com/strata-mq/strata/examples/orders/internal/member"
	"github.com/strata-mq/strata/examples/orders/store"
)

func main() {
	var f member.Flags
	f.Register(flag.CommandLine, "billing")
	progress := flag.Duration("progress", 5*time.Second, "interval of the progress lines")
	crashAfter := flag.Int("crash-after-commits", 0, "for tests: SIGKILL this process after its Nth database commit, before the group commit; 0: never")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &f, *progress, *crashAfter); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f *member.Flags, progress time.Duration, crashAfter int) error {
	commits := 0
	crash := pgsink.AfterCommit(func(_ context.Context, next map[client.TopicPartition]int64) {
		commits++
		if crashAfter == 0 || commits < crashAfter {
			return
		}
		var at []string
		for _, tp := range slices.SortedFunc(maps.Keys(next), func(a, b client.TopicPartition) int { return int(a.Partition) - int(b.Partition) }) {
			at = append(at, fmt.Sprintf("%s=%d", tp, next[tp]))
		}
		f.Logf("crash: database commit %d done (sink offsets %v); SIGKILL before the group commit", commits, at)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	})
	pool, c, err := f.Open(ctx, crash)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.CreateInvoices(ctx, pool); err != nil {
		return err
	}
	f.Logf("member %s of group %s, invoices in PostgreSQL", c.Group().MemberID(), f.Group)
	applied := 0
	last := time.Now()
	for ctx.Err() == nil {
		recs, err := c.Poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.Logf("poll: %v", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		res, err := c.Apply(ctx, recs, store.ApplyInvoices)
		f.Report(res, err)
		applied += len(res.Applied)
		if time.Since(last) >= progress {
			last = time.Now()
			f.Logf("applied %d events; owns %d partitions", applied, len(c.Group().Assignment()))
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Close(cctx)
	f.Logf("stopped: applied %d events", applied)
	return nil
}
