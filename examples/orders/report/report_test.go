package report

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/examples/orders/event"
	"github.com/strata-mq/strata/examples/orders/store"
)

// newDB creates a fresh database on $STRATA_TEST_POSTGRES (the machine's
// server by default), dropped when the test ends. It fails, never skips,
// without Postgres.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin := os.Getenv("STRATA_TEST_POSTGRES")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("Postgres is required for this test and is not reachable (STRATA_TEST_POSTGRES or 127.0.0.1:5432): %v", err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "strata_report_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			defer c.Close(context.Background())
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
	})
	return pool
}

// topic is two orders: order-1 placed, paid and shipped ($10), order-2
// placed and cancelled before payment ($5, no revenue).
func topic() *Topic {
	return &Topic{Name: "orders", Partitions: 12, Events: 5, Revenue: 1000, Orders: map[string]*Order{
		"order-1": {Events: 3, Total: 1000, Revenue: 1000, Last: event.Shipped},
		"order-2": {Events: 2, Total: 500, Revenue: 0, Last: event.Cancelled},
	}}
}

type invoice struct {
	id                   string
	status               string
	total, paid          int64
	last, events, breaks int
}

var good = []invoice{{"order-1", "shipped", 1000, 1000, 3, 3, 0}, {"order-2", "cancelled", 500, 0, 2, 2, 0}}

// TestCheckBilling: the check passes on invoices that match the topic
// exactly, and names each way they can fail to.
func TestCheckBilling(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	if err := store.CreateInvoices(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		invoices []invoice
		want     string // "" for a pass
	}{
		{"exactly once", good, ""},
		{"an event applied twice", []invoice{{"order-1", "shipped", 1000, 1000, 3, 4, 1}, good[1]}, "1 orders with events applied twice (first order-1 (4 events applied, 3 in the topic))"},
		{"an event not applied", []invoice{{"order-1", "shipped", 1000, 1000, 3, 2, 1}, good[1]}, "1 orders with events not applied"},
		{"a sequence broken", []invoice{{"order-1", "shipped", 1000, 1000, 4, 3, 1}, good[1]}, "1 orders whose sequence broke (first order-1 (last seq 4 after 3 events, 1 breaks))"},
		{"an invoice missing", good[:1], "1 orders without an invoice (first order-2)"},
		{"an invoice too many", append([]invoice{{"order-3", "placed", 1, 0, 1, 1, 0}}, good...), "1 invoices of orders not in the topic (first order-3)"},
		{"a wrong total", []invoice{good[0], {"order-2", "cancelled", 500, -500, 2, 2, 0}}, "1 orders with wrong totals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Exec(ctx, "TRUNCATE invoices"); err != nil {
				t.Fatal(err)
			}
			for _, i := range tc.invoices {
				if _, err := db.Exec(ctx, "INSERT INTO invoices VALUES ($1, $2, $3, $4, $5, $6, $7, now())", i.id, i.status, i.total, i.paid, i.last, i.events, i.breaks); err != nil {
					t.Fatal(err)
				}
			}
			c, b := CheckBilling(ctx, db, topic())
			if tc.want == "" {
				if !c.OK || b != (Billing{Invoices: 2, Events: 5, Revenue: 1000}) {
					t.Fatalf("check %+v, billing %+v; want a pass with 2 invoices, 5 events, $10", c, b)
				}
				return
			}
			if c.OK || !strings.Contains(c.Detail, tc.want) {
				t.Fatalf("check %+v; want a failure saying %q", c, tc.want)
			}
		})
	}
}

// TestCheckWarehouse: the warehouse passes with each event once and
// billing's totals, and fails on a record loaded twice or a total apart.
func TestCheckWarehouse(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	if err := store.CreateWarehouse(ctx, db, "wh"); err != nil {
		t.Fatal(err)
	}
	row := func(offset int64, order string, revenue int64) {
		t.Helper()
		if _, err := db.Exec(ctx, "INSERT INTO wh VALUES ('orders', 0, $1, $2, 1, 'paid', 0, $3, now(), now())", offset, order, revenue); err != nil {
			t.Fatal(err)
		}
	}
	billing := Billing{Invoices: 2, Events: 5, Revenue: 1000}
	for o, order := range []string{"order-1", "order-1", "order-1", "order-2", "order-2"} {
		rev := int64(0)
		if o == 1 {
			rev = 1000
		}
		row(int64(o), order, rev)
	}
	if c := CheckWarehouse(ctx, db, "analytics", "wh", topic(), billing); !c.OK {
		t.Fatalf("check %+v; want a pass", c)
	}
	if c := CheckWarehouse(ctx, db, "analytics", "wh", topic(), Billing{Invoices: 2, Events: 5, Revenue: 999}); c.OK {
		t.Fatalf("check %+v passed with billing's revenue $9.99 against $10.00", c)
	}
	row(1, "order-1", 1000) // offset 1 loaded twice
	if c := CheckWarehouse(ctx, db, "analytics", "wh", topic(), billing); c.OK || !strings.Contains(c.Detail, "6 events (1 twice)") {
		t.Fatalf("check %+v; want a failure saying 6 events (1 twice)", c)
	}
}

// TestProduced: the shop's acknowledged count must be the topic's, and
// the topic's own sequences whole.
func TestProduced(t *testing.T) {
	if c := Produced(5, topic()); !c.OK {
		t.Fatalf("%+v; want a pass", c)
	}
	if c := Produced(6, topic()); c.OK || !strings.Contains(c.Detail, "1 acknowledged events are not in the topic") {
		t.Fatalf("%+v; want a failure for an acknowledged event missing", c)
	}
	broken := topic()
	broken.Broken = []string{"order-2"}
	if c := Produced(5, broken); c.OK || !strings.Contains(c.Detail, "1 orders' sequences are broken in the topic itself (first order-2)") {
		t.Fatalf("%+v; want a failure for a broken sequence", c)
	}
}
