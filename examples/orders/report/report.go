// Package report checks the orders story end to end from what is stored,
// not from what the programs say they did: the orders topic (read back
// from the start), billing's invoices and the warehouse tables in
// PostgreSQL, and the groups' offsets as the coordinator reports them.
package report

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/examples/orders/event"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
)

// Topic is what the orders topic holds.
type Topic struct {
	Name       string
	Partitions int32
	Ends       map[int32]int64 // high watermark of each partition when read
	Events     int64
	Revenue    int64             // cents: payments minus refunds
	Orders     map[string]*Order // by order id
	// Broken are orders whose events in the topic are not the sequence
	// 1..n in offset order (the shop publishes them so; one here would be
	// the log's fault, not billing's).
	Broken []string
}

// Order is one order's events in the topic.
type Order struct {
	Events  int
	Total   int64 // cents, from placed
	Revenue int64 // cents
	Last    event.Kind
}

// ReadTopic reads every record of topic from the start to the high
// watermarks it finds first, through the gateway at the given base URL.
func ReadTopic(ctx context.Context, gateway, topic string) (*Topic, error) {
	c, err := client.NewConsumer(gateway)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	n, err := c.Partitions(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	parts := make([]int32, n)
	for i := range parts {
		parts[i] = int32(i)
	}
	ends, err := c.ListOffsets(ctx, topic, parts, client.EndOffset())
	if err != nil {
		return nil, fmt.Errorf("report: end offsets of %s: %w", topic, err)
	}
	t := &Topic{Name: topic, Partitions: n, Ends: ends, Orders: map[string]*Order{}}
	assign := map[int32]client.Offset{}
	for p, end := range ends {
		if end > 0 {
			assign[p] = client.StartOffset()
		}
	}
	c.Assign(map[string]map[int32]client.Offset{topic: assign})
	seqs := map[string]int{}
	broken := map[string]bool{}
	for len(assign) > 0 {
		recs, err := c.Poll(ctx)
		if err != nil {
			return nil, fmt.Errorf("report: read %s: %w", topic, err)
		}
		for _, r := range recs {
			if r.Offset >= ends[r.Partition] {
				continue
			}
			e, err := event.Decode(r.Value)
			if err != nil {
				return nil, fmt.Errorf("report: %s-%d offset %d: %w", topic, r.Partition, r.Offset, err)
			}
			o := t.Orders[e.OrderID]
			if o == nil {
				o = &Order{}
				t.Orders[e.OrderID] = o
			}
			if e.Seq != seqs[e.OrderID]+1 {
				broken[e.OrderID] = true
			}
			seqs[e.OrderID] = e.Seq
			o.Events++
			o.Total += e.Total()
			o.Revenue += e.Revenue()
			o.Last = e.Kind
			t.Events++
			t.Revenue += e.Revenue()
		}
		for p := range assign {
			if pos, ok := c.Position(topic, p); ok && pos >= ends[p] {
				delete(assign, p)
				c.Unassign(topic, p)
			}
		}
	}
	for id := range broken {
		t.Broken = append(t.Broken, id)
	}
	sort.Strings(t.Broken)
	return t, nil
}

// EndSum is the sum of the high watermarks: the offsets a group has
// applied once it has read everything.
func (t *Topic) EndSum() int64 {
	var n int64
	for _, e := range t.Ends {
		n += e
	}
	return n
}

// Check is one line of the report.
type Check struct {
	Name   string
	OK     bool
	Detail string
	// Info marks a line that informs without deciding the outcome.
	Info bool
}

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Produced compares the shop's acknowledged events with the topic.
func Produced(acked int64, t *Topic) Check {
	c := Check{Name: "events produced", OK: acked == t.Events && len(t.Broken) == 0}
	c.Detail = fmt.Sprintf("%d acknowledged by the cluster, %d in topic %s (%d partitions), %d orders", acked, t.Events, t.Name, t.Partitions, len(t.Orders))
	if acked != t.Events {
		c.Detail += fmt.Sprintf("; %d acknowledged events are not in the topic or %d there were not acknowledged", max(acked-t.Events, 0), max(t.Events-acked, 0))
	}
	if len(t.Broken) > 0 {
		c.Detail += fmt.Sprintf("; %d orders' sequences are broken in the topic itself (first %s)", len(t.Broken), t.Broken[0])
	}
	return c
}

// Billing holds billing's totals, for the comparisons after it.
type Billing struct {
	Invoices int64
	Events   int64
	Revenue  int64
}

// CheckBilling checks the invoices against the topic: one row per order
// of the topic and no other, each with exactly the order's events
// applied, in sequence (1..n, never a gap or a repeat), and the order's
// totals.
func CheckBilling(ctx context.Context, q Querier, t *Topic) (Check, Billing) {
	c := Check{Name: "invoices"}
	var b Billing
	rows, err := q.Query(ctx, "SELECT order_id, status, total_cents, paid_cents, last_seq, events, seq_breaks FROM invoices")
	if err != nil {
		c.Detail = err.Error()
		return c, b
	}
	seen := map[string]bool{}
	var extra, missing, dup, short, breaks, wrong []string
	for rows.Next() {
		var id, status string
		var total, paid int64
		var last, events, seqBreaks int
		if err := rows.Scan(&id, &status, &total, &paid, &last, &events, &seqBreaks); err != nil {
			c.Detail = err.Error()
			return c, b
		}
		b.Invoices++
		b.Events += int64(events)
		b.Revenue += paid
		if seen[id] {
			dup = append(dup, id) // impossible with the primary key; checked all the same
		}
		seen[id] = true
		o := t.Orders[id]
		switch {
		case o == nil:
			extra = append(extra, id)
			continue
		case events > o.Events:
			dup = append(dup, fmt.Sprintf("%s (%d events applied, %d in the topic)", id, events, o.Events))
		case events < o.Events:
			short = append(short, fmt.Sprintf("%s (%d events applied, %d in the topic)", id, events, o.Events))
		}
		if seqBreaks > 0 || last != events {
			breaks = append(breaks, fmt.Sprintf("%s (last seq %d after %d events, %d breaks)", id, last, events, seqBreaks))
		}
		if events == o.Events && (paid != o.Revenue || total != o.Total || status != string(o.Last)) {
			wrong = append(wrong, fmt.Sprintf("%s (%s %s paid %s, topic says %s %s paid %s)", id, status, event.Dollars(total), event.Dollars(paid),
				o.Last, event.Dollars(o.Total), event.Dollars(o.Revenue)))
		}
	}
	if err := rows.Err(); err != nil {
		c.Detail = err.Error()
		return c, b
	}
	for id := range t.Orders {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	var problems []string
	for _, p := range []struct {
		what string
		ids  []string
	}{{"orders without an invoice", missing}, {"invoices of orders not in the topic", extra}, {"orders with events applied twice", dup},
		{"orders with events not applied", short}, {"orders whose sequence broke", breaks}, {"orders with wrong totals", wrong}} {
		if len(p.ids) > 0 {
			problems = append(problems, fmt.Sprintf("%d %s (first %s)", len(p.ids), p.what, p.ids[0]))
		}
	}
	c.OK = len(problems) == 0 && b.Events == t.Events
	c.Detail = fmt.Sprintf("%d rows for %d orders; %d events applied of %d", b.Invoices, len(t.Orders), b.Events, t.Events)
	if c.OK {
		c.Detail += ", each exactly once: every order's sequence 1..n unbroken, no duplicates"
	} else if len(problems) > 0 {
		c.Detail += "; " + strings.Join(problems, "; ")
	}
	return c, b
}

// Revenue compares billing's revenue with the topic's.
func Revenue(b Billing, t *Topic) Check {
	return Check{Name: "revenue", OK: b.Revenue == t.Revenue,
		Detail: fmt.Sprintf("billing %s, the topic's events %s", event.Dollars(b.Revenue), event.Dollars(t.Revenue))}
}

// CheckWarehouse checks a warehouse table: every event of the topic once
// (no record twice), and totals equal to billing's.
func CheckWarehouse(ctx context.Context, q Querier, name, table string, t *Topic, b Billing) Check {
	c := Check{Name: name}
	var rows, distinct, orders, revenue int64
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT (partition_index, record_offset)), count(DISTINCT order_id), coalesce(sum(revenue_cents), 0)
FROM %s WHERE topic = $1`, pgx.Identifier{table}.Sanitize()), t.Name).Scan(&rows, &distinct, &orders, &revenue)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	c.OK = rows == distinct && rows == t.Events && rows == b.Events && orders == b.Invoices && revenue == b.Revenue
	c.Detail = fmt.Sprintf("%d events (%d twice), %d orders, revenue %s", rows, rows-distinct, orders, event.Dollars(revenue))
	if c.OK {
		c.Detail += ": equal to billing's"
	} else {
		c.Detail += fmt.Sprintf("; billing: %d events, %d orders, revenue %s", b.Events, b.Invoices, event.Dollars(b.Revenue))
	}
	return c
}

// GroupLag is a group's lag as `strata group describe` shows it: the
// coordinator's committed offsets against the high watermarks. For a
// group applying through the sink, those offsets are a view of the
// sink's, committed after each transaction.
func GroupLag(ctx context.Context, gateway, group string) Check {
	c := Check{Name: group + " group offsets", Info: true}
	resp, err := Gateway(gateway).DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: group}))
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	var lag int64
	n, unknown := 0, 0
	for _, p := range resp.Msg.GetGroup().GetPartitions() {
		n++
		if p.GetLag() < 0 {
			unknown++
			continue
		}
		lag += p.GetLag()
	}
	c.OK = unknown == 0 && lag == 0
	c.Detail = fmt.Sprintf("lag %d on %d partitions in `strata group describe %s`", lag, n, group)
	if unknown > 0 {
		c.Detail += fmt.Sprintf(" (%d unknown)", unknown)
	}
	return c
}

// Gateway is a Connect client of the gateway at the given base URL
// (http:// with HTTP/2 cleartext, as Strata serves it).
func Gateway(url string) gatewayv1connect.GatewayServiceClient {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: protos}, Timeout: 30 * time.Second}
	return gatewayv1connect.NewGatewayServiceClient(hc, strings.TrimRight(url, "/"))
}

// Report is the checks in order.
type Report struct {
	Checks []Check
}

// Add appends a check.
func (r *Report) Add(c Check) { r.Checks = append(r.Checks, c) }

// OK reports whether every check that decides passed.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK && !c.Info {
			return false
		}
	}
	return len(r.Checks) > 0
}

// Failed returns the names of the checks that decide and failed.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK && !c.Info {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

// Write prints one line per check.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintln(w, "report (from the topic and the database):")
	for _, c := range r.Checks {
		mark := "ok    "
		switch {
		case c.Info && c.OK:
			mark = "info  "
		case c.Info:
			mark = "note  "
		case !c.OK:
			mark = "FAILED"
		}
		fmt.Fprintf(w, "  %s %-26s %s\n", mark, c.Name, c.Detail)
	}
}
