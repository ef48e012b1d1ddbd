// Command analytics is the orders story's analytics: a member of group
// analytics that loads the events into a warehouse table with COPY, in
// batches of at least --batch events or every --flush, whichever comes
// first, each batch in one exactly-once transaction (client/pgsink). After
// each load it prints the revenue per minute. Given another group and
// table it replays the topic from the start into them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/examples/orders/event"
	"github.com/strata-mq/strata/examples/orders/internal/member"
	"github.com/strata-mq/strata/examples/orders/store"
)

func main() {
	var f member.Flags
	f.Register(flag.CommandLine, "analytics")
	table := flag.String("table", "warehouse", "warehouse table to load")
	batch := flag.Int("batch", 10000, "load once this many events are waiting")
	flush := flag.Duration("flush", 3*time.Second, "load what is waiting after this long, even if fewer than --batch")
	flag.Parse()
	if err := store.CheckTable(*table); err != nil || *batch < 1 || *flush <= 0 {
		fmt.Fprintf(os.Stderr, "%s: bad flags: --table must be a lower-case identifier, --batch and --flush positive\n", f.Name)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &f, *table, *batch, *flush); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f *member.Flags, table string, batch int, flush time.Duration) error {
	pool, c, err := f.Open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.CreateWarehouse(ctx, pool, table); err != nil {
		return err
	}
	f.Logf("member %s of group %s, loading %s", c.Group().MemberID(), f.Group, table)
	load := func(ctx context.Context, tx pgx.Tx, recs []*client.Record) error {
		return store.LoadWarehouse(ctx, tx, table, recs)
	}
	var pending []*client.Record
	var since time.Time // when the first pending record arrived
	loads, loaded := 0, 0
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if len(pending) > 0 {
			pctx, cancel = context.WithDeadline(ctx, since.Add(flush))
		}
		recs, err := c.Poll(pctx)
		cancel()
		if err != nil && pctx.Err() == nil {
			f.Logf("poll: %v", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		if len(pending) == 0 && len(recs) > 0 {
			since = time.Now()
		}
		pending = append(pending, recs...)
		stopping := ctx.Err() != nil
		if len(pending) > 0 && (len(pending) >= batch || time.Since(since) >= flush || stopping) {
			actx := ctx
			if stopping {
				var cancel context.CancelFunc
				actx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
			}
			res, err := c.Apply(actx, pending, load)
			f.Report(res, err)
			pending = nil
			if len(res.Applied) > 0 {
				loads++
				loaded += len(res.Applied)
				f.Logf("load %d: %d events (%d in all); revenue per minute: %s", loads, len(res.Applied), loaded, perMinute(actx, pool, table))
			}
		}
		if stopping {
			break
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Close(cctx)
	f.Logf("stopped: %d events in %d loads", loaded, loads)
	return nil
}

// perMinute renders the last three minutes' revenue.
func perMinute(ctx context.Context, q store.Querier, table string) string {
	ms, err := store.RevenuePerMinute(ctx, q, table, 3)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s %s (%d events)", m.Start.Local().Format("15:04"), event.Dollars(m.RevenueCents), m.Events))
	}
	return strings.Join(parts, ", ")
}
