// Package member is what billing and analytics share: the flags that say
// where the cluster and the database are, and a group member that applies
// what it reads through the exactly-once sink (client/pgsink).
package member

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/client/pgsink"
)

// DefaultDSN is the demo's database on the machine's PostgreSQL.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/strata_demo?sslmode=disable"

// Flags are the flags every member program takes.
type Flags struct {
	Gateway string
	DSN     string
	Group   string
	Topic   string
	Name    string
}

// Register defines the flags with group as the default group id.
func (f *Flags) Register(fs *flag.FlagSet, group string) {
	fs.StringVar(&f.Gateway, "gateway", envOr("STRATA_GATEWAY", "http://127.0.0.1:9092"), "gateway base URL (STRATA_GATEWAY)")
	fs.StringVar(&f.DSN, "dsn", envOr("STRATA_DEMO_DSN", DefaultDSN), "PostgreSQL database (STRATA_DEMO_DSN)")
	fs.StringVar(&f.Group, "group", group, "consumer group id")
	fs.StringVar(&f.Topic, "topic", "orders", "topic to read")
	fs.StringVar(&f.Name, "name", group, "name in log lines and the client id")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Logf prints one line prefixed with the member's name.
func (f *Flags) Logf(format string, args ...any) {
	fmt.Printf("%s: %s\n", f.Name, fmt.Sprintf(format, args...))
}

// Open connects to the database and joins the group through a pgsink
// consumer; opts come after the member's own (client id, rebalance log
// lines, group-commit failures logged).
func (f *Flags) Open(ctx context.Context, opts ...pgsink.Opt) (*pgxpool.Pool, *pgsink.Consumer, error) {
	pool, err := pgxpool.New(ctx, f.DSN)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	base := []pgsink.Opt{
		pgsink.GroupOptions(client.ClientID(f.Name),
			client.OnAssigned(func(_ context.Context, tps []client.TopicPartition) { f.Logf("assigned %s", partitions(tps)) }),
			client.OnRevoked(func(_ context.Context, tps []client.TopicPartition) { f.Logf("revoked %s", partitions(tps)) })),
		pgsink.OnGroupCommitError(func(err error) { f.Logf("group commit (a view only; the offsets are in the database): %v", err) }),
	}
	c, err := pgsink.NewConsumer(ctx, pool, f.Gateway, f.Group, []string{f.Topic}, append(base, opts...)...)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, c, nil
}

// Report tells what an Apply left out: records applied before (which a
// member reads again only after a transaction whose outcome it did not
// learn), partitions it was fenced from (their new owner applies those
// records), and a failure (the sink moved the partitions back, so the
// records come again).
func (f *Flags) Report(res pgsink.Result, err error) {
	if res.Skipped > 0 {
		f.Logf("skipped %d records applied before", res.Skipped)
	}
	switch {
	case err == nil:
	case errors.Is(err, client.ErrFenced):
		f.Logf("left out of a transaction, as this member no longer holds them: %v", err)
	default:
		f.Logf("transaction failed, reading the batch again: %v", err)
	}
}

func partitions(tps []client.TopicPartition) string {
	out := ""
	for i, tp := range tps {
		if i > 0 {
			out += " "
		}
		out += tp.String()
	}
	return out
}
