// Package store is the orders story's tables in PostgreSQL: billing's
// invoices, one row per order, and analytics' warehouse, one row per
// event. Both are written inside the exactly-once sink's transactions
// (client/pgsink), so every event counts once.
package store

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/examples/orders/event"
)

// Invoices is billing's table.
const Invoices = "invoices"

// DB is what creating tables needs: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// createInvoices is one row per order, updated by every event of the
// order. The update is not idempotent (it adds to totals and counts the
// events applied), which is why it runs in the sink's transaction.
const createInvoices = `CREATE TABLE IF NOT EXISTS invoices (
    order_id    text        PRIMARY KEY,
    status      text        NOT NULL,           -- the kind of the last event applied
    total_cents bigint      NOT NULL,           -- the order's amount, from placed
    paid_cents  bigint      NOT NULL,           -- paid minus refunded: the order's revenue
    last_seq    integer     NOT NULL,           -- sequence number of the last event applied
    events      integer     NOT NULL,           -- events applied
    seq_breaks  integer     NOT NULL DEFAULT 0, -- events applied whose seq was not last_seq + 1
    updated_at  timestamptz NOT NULL
)`

// applyEvent upserts one event into its order's invoice.
const applyEvent = `INSERT INTO invoices AS i (order_id, status, total_cents, paid_cents, last_seq, events, seq_breaks, updated_at)
VALUES ($1, $2, $3, $4, $5, 1, CASE WHEN $5 = 1 THEN 0 ELSE 1 END, now())
ON CONFLICT (order_id) DO UPDATE SET
    status      = EXCLUDED.status,
    total_cents = i.total_cents + EXCLUDED.total_cents,
    paid_cents  = i.paid_cents + EXCLUDED.paid_cents,
    seq_breaks  = i.seq_breaks + CASE WHEN EXCLUDED.last_seq = i.last_seq + 1 THEN 0 ELSE 1 END,
    last_seq    = EXCLUDED.last_seq,
    events      = i.events + 1,
    updated_at  = now()`

// CreateInvoices creates billing's table if it does not exist.
func CreateInvoices(ctx context.Context, db DB) error {
	return createTable(ctx, db, Invoices, createInvoices)
}

// ApplyInvoices applies the events of recs to their invoices in tx, in
// the order given, sent to the server as one pipeline.
func ApplyInvoices(ctx context.Context, tx pgx.Tx, recs []*client.Record) error {
	b := &pgx.Batch{}
	for _, r := range recs {
		e, err := event.Decode(r.Value)
		if err != nil {
			return fmt.Errorf("store: %s offset %d: %w", client.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset, err)
		}
		b.Queue(applyEvent, e.OrderID, string(e.Kind), e.Total(), e.Revenue(), e.Seq)
	}
	return tx.SendBatch(ctx, b).Close()
}

// createWarehouse is analytics' table: one row per event, loaded with COPY.
// It has no key on purpose: a record loaded twice would show as two rows.
const createWarehouse = `CREATE TABLE IF NOT EXISTS %s (
    topic           text        NOT NULL,
    partition_index integer     NOT NULL,
    record_offset   bigint      NOT NULL,
    order_id        text        NOT NULL,
    seq             integer     NOT NULL,
    kind            text        NOT NULL,
    amount_cents    bigint      NOT NULL,
    revenue_cents   bigint      NOT NULL,
    event_time      timestamptz NOT NULL,
    loaded_at       timestamptz NOT NULL
)`

// warehouseColumns are the columns COPY fills, in order.
var warehouseColumns = []string{"topic", "partition_index", "record_offset", "order_id", "seq", "kind", "amount_cents", "revenue_cents", "event_time", "loaded_at"}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CheckTable refuses a table name that is not a plain lower-case
// identifier.
func CheckTable(name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("store: table %q: must be a lower-case identifier", name)
	}
	return nil
}

// CreateWarehouse creates an analytics table if it does not exist.
func CreateWarehouse(ctx context.Context, db DB, table string) error {
	if err := CheckTable(table); err != nil {
		return err
	}
	return createTable(ctx, db, table, fmt.Sprintf(createWarehouse, pgx.Identifier{table}.Sanitize()))
}

// LoadWarehouse copies the events of recs into table in tx.
func LoadWarehouse(ctx context.Context, tx pgx.Tx, table string, recs []*client.Record) error {
	now := time.Now()
	rows := make([][]any, len(recs))
	for i, r := range recs {
		e, err := event.Decode(r.Value)
		if err != nil {
			return fmt.Errorf("store: %s offset %d: %w", client.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset, err)
		}
		rows[i] = []any{r.Topic, r.Partition, r.Offset, e.OrderID, e.Seq, string(e.Kind), e.AmountCents, e.Revenue(), e.At, now}
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, warehouseColumns, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("store: copy into %s: %w", table, err)
	}
	if n != int64(len(rows)) {
		return fmt.Errorf("store: copy into %s: %d of %d rows", table, n, len(rows))
	}
	return nil
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Minute is the revenue of the events of one minute.
type Minute struct {
	Start        time.Time
	RevenueCents int64
	Events       int64
}

// RevenuePerMinute returns the last n minutes of table that have events,
// oldest first.
func RevenuePerMinute(ctx context.Context, q Querier, table string, n int) ([]Minute, error) {
	if err := CheckTable(table); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT m, r, c FROM (
    SELECT date_trunc('minute', event_time) AS m, sum(revenue_cents) AS r, count(*) AS c
    FROM %s GROUP BY 1 ORDER BY 1 DESC LIMIT $1) AS last ORDER BY m`, pgx.Identifier{table}.Sanitize()), n)
	if err != nil {
		return nil, fmt.Errorf("store: revenue per minute: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Minute, error) {
		var m Minute
		err := row.Scan(&m.Start, &m.RevenueCents, &m.Events)
		return m, err
	})
}

// Drop drops tables if they exist, for a run that starts afresh.
func Drop(ctx context.Context, db DB, tables ...string) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer tx.Rollback(context.Background())
	for _, t := range tables {
		if err := CheckTable(t); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			return fmt.Errorf("store: drop %s: %w", t, err)
		}
	}
	return tx.Commit(ctx)
}

// createTable runs ddl under an advisory lock, so members starting
// together do not race on the catalog.
func createTable(ctx context.Context, db DB, name, ddl string) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "strata orders "+name); err != nil {
		return fmt.Errorf("store: create %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("store: create %s: %w", name, err)
	}
	return tx.Commit(ctx)
}
