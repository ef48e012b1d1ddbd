package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/client/pgsink"
	"github.com/strata-mq/strata/examples/orders/report"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/testports"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
	"github.com/strata-mq/strata/tests/harness"
)

// The orders story's programs (examples/orders).
const ordersPkg = "github.com/strata-mq/strata/examples/orders/"

// buildOrders builds strata dev's binaries and the orders programs and
// returns the orders programs' directory and the strata CLI, which the
// demo is told of (--strata): with make test's prebuilt bin/ the two are
// not in one directory.
func buildOrders(t *testing.T) (dir, strata string) {
	t.Helper()
	strata = harness.BuildDev(t)
	for _, p := range []string{"shop", "billing", "analytics", "demo"} {
		dir = filepath.Dir(harness.Binary(t, ordersPkg+p))
	}
	return dir, strata
}

// TestOrdersDemo runs a short `make demo` (the demo program on its own
// database) and checks it by its report: the last line says ok, the exit
// code agrees, a billing member and a storage node were killed, and every
// check of the report passed.
func TestOrdersDemo(t *testing.T) {
	t.Parallel()
	bin, strata := buildOrders(t)
	dsn := pgtest.NewDatabase(t)
	// A base port held for this test (lib/testports): the demo's cluster
	// restarts a killed storage node on its port, which another test's
	// cluster must not take meanwhile.
	d := harness.Start(t, "demo", []string{filepath.Join(bin, "demo"), "--strata", strata, "--dsn", dsn, "--duration", "20s", "--rate", "150",
		"--dir", t.TempDir(), "--timeout", "8m", "--base-port", strconv.Itoa(testports.Reserve(t))})
	err := d.Wait(harness.Deadline(t, 10*time.Minute))
	lines := d.Lines()
	if len(lines) == 0 {
		t.Fatalf("the demo printed nothing (%v): %s", err, d.StderrTail())
	}
	last := lines[len(lines)-1]
	if err != nil || !strings.HasPrefix(last, "demo ok: ") {
		t.Fatalf("demo: %v; last line %q", err, last)
	}
	out := strings.Join(lines, "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^demo: SIGKILL billing-2 \(pid \d+\) and storage-2 \(pid \d+\) after \d+ events$`),
		regexp.MustCompile(`(?m)^demo: restarted storage-2 and billing-2 `),
		regexp.MustCompile(`(?m)^  ok     events produced +(\d+) acknowledged by the cluster, (\d+) in topic orders \(12 partitions\)`),
		regexp.MustCompile(`(?m)^  ok     invoices +(\d+) rows for (\d+) orders; (\d+) events applied of (\d+), each exactly once`),
		regexp.MustCompile(`(?m)^  ok     revenue +billing (\$[\d,.]+), the topic's events (\$[\d,.]+)$`),
		regexp.MustCompile(`(?m)^  ok     analytics +(\d+) events \(0 twice\), \d+ orders, revenue \$[\d,.]+: equal to billing's$`),
		regexp.MustCompile(`(?m)^  ok     fresh replay +(\d+) events \(0 twice\), \d+ orders, revenue \$[\d,.]+: equal to billing's$`),
	} {
		m := want.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("the demo's output lacks %s", want)
			continue
		}
		// Where a line gives two figures that must agree, they do.
		for i := 2; i < len(m); i += 2 {
			if m[i-1] != m[i] {
				t.Errorf("%q: %s and %s differ", m[0], m[i-1], m[i])
			}
		}
		if len(m) > 1 && (m[1] == "0" || m[1] == "$0.00") {
			t.Errorf("%q: nothing was produced", m[0])
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
}

// TestOrdersDemoWithoutPostgres: without a reachable PostgreSQL the demo
// says so in its one last line and exits 1, before it starts anything.
func TestOrdersDemoWithoutPostgres(t *testing.T) {
	t.Parallel()
	bin, strata := buildOrders(t)
	d := harness.Start(t, "demo", []string{filepath.Join(bin, "demo"), "--strata", strata, "--dsn", "postgres://postgres@127.0.0.1:1/strata_demo?sslmode=disable", "--dir", t.TempDir()})
	err := d.Wait(harness.Deadline(t, time.Minute))
	lines := d.Lines()
	want := "demo FAILED: PostgreSQL is not reachable at 127.0.0.1:1 ("
	if err == nil || len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], want) ||
		!strings.HasSuffix(lines[len(lines)-1], "make demo needs the PostgreSQL the tests use (127.0.0.1:5432, trust auth); start it, or point --dsn at one") {
		t.Fatalf("demo exited with %v, printing:\n%s\nwant exit 1 and a last line starting %q", err, strings.Join(lines, "\n"), want)
	}
	for _, l := range lines {
		if strings.Contains(l, "strata dev") {
			t.Fatalf("the demo started the cluster without PostgreSQL: %q", l)
		}
	}
}

// ordersCluster is a cluster for the billing tests: three storage nodes,
// a gateway and a coordinator on a Postgres database of its own, whose
// session timeout (15s) leaves a dead member's partitions with it long
// enough for a test to look at the group's offsets.
func ordersCluster(t *testing.T) (gateway, dsn string, pool *pgxpool.Pool) {
	t.Helper()
	dsn = pgtest.NewDatabase(t)
	c := harness.StartCluster(t, harness.ClusterConfig{})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{DSN: dsn, SessionTimeout: 15 * time.Second})
	c.CreateTopic(harness.Deadline(t, time.Minute), "orders", 12, 3, nil)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return gs.Gateway.URL, dsn, pool
}

// sinkApplied is how many records group applied through the sink: the sum
// of its offsets (0 when the table does not exist yet).
func sinkApplied(ctx context.Context, pool *pgxpool.Pool, group string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT coalesce(sum(greatest(next_offset, 0)), 0) FROM strata_sink_offsets WHERE group_id = $1", group).Scan(&n)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return 0, nil
	}
	return n, err
}

// TestBillingKilledBetweenCommits: a billing member kills itself with
// SIGKILL right after its Postgres commit, before its commit to the group
// coordinator. The coordinator's offsets for the partitions it applied are
// then behind the sink's; the partitions' next owner starts at the sink's,
// so every event is still applied exactly once.
func TestBillingKilledBetweenCommits(t *testing.T) {
	t.Parallel()
	bin, _ := buildOrders(t)
	gateway, dsn, pool := ordersCluster(t)
	ctx := harness.Deadline(t, 5*time.Minute)
	var members []*harness.Process
	member := func(name string, extra ...string) *harness.Process {
		p := harness.Start(t, name, append([]string{filepath.Join(bin, "billing"), "--gateway", gateway, "--dsn", dsn, "--name", name, "--progress", "1h"}, extra...))
		members = append(members, p)
		return p
	}
	shop := harness.Start(t, "shop", []string{filepath.Join(bin, "shop"), "--gateway", gateway, "--rate", "300", "--duration", "12s", "--progress", "1s"})
	shop.WaitLine(ctx, func(l string) bool { return strings.Contains(l, "events acknowledged") })
	victim := member("billing-1", "--crash-after-commits", "1")
	member("billing-2")
	member("billing-3")

	crash := victim.WaitLine(ctx, func(l string) bool { return strings.Contains(l, "crash: database commit 1 done") })
	if err := victim.Wait(ctx); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("billing-1 ended with %v after %q; want killed by SIGKILL", err, crash)
	}
	// The sink's offsets the dead member committed, against the group's,
	// read while the coordinator still gives its partitions to it.
	sink := parseSinkOffsets(t, crash)
	gw := gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), gateway)
	resp, err := gw.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: "billing"}))
	if err != nil {
		t.Fatal(err)
	}
	behind := 0
	for _, p := range resp.Msg.GetGroup().GetPartitions() {
		next, ok := sink[p.GetPartition()]
		if !ok {
			continue
		}
		if p.GetCommittedOffset() >= next {
			t.Fatalf("orders-%d: the group has %d committed, at or past the sink's %d that billing-1 died before committing to the group", p.GetPartition(), p.GetCommittedOffset(), next)
		}
		behind++
	}
	if behind != len(sink) {
		t.Fatalf("the group describes %d of the %d partitions billing-1 applied (%v)", behind, len(sink), sink)
	}
	t.Logf("billing-1 died between commits: sink offsets %v ahead of the group's", sink)

	member("billing-1-again")
	line := shop.WaitLine(ctx, func(l string) bool { return strings.HasPrefix(l, "shop: done: ") })
	var acked int64
	if _, err := fmt.Sscanf(line, "shop: done: events=%d", &acked); err != nil || acked == 0 {
		t.Fatalf("shop's done line %q: %v", line, err)
	}
	testwait.Until(t, 3*time.Minute, "billing to apply every event", func() error {
		n, err := sinkApplied(ctx, pool, "billing")
		if err == nil && n < acked {
			err = fmt.Errorf("%d of %d applied", n, acked)
		}
		return err
	})
	topic, err := report.ReadTopic(ctx, gateway, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if c := report.Produced(acked, topic); !c.OK {
		t.Fatalf("%s: %s", c.Name, c.Detail)
	}
	if c, _ := report.CheckBilling(ctx, pool, topic); !c.OK {
		t.Fatalf("%s: %s", c.Name, c.Detail)
	}
	// Exactly once would hold even if the partitions' next owner started
	// at the group's offsets (the sink leaves out what it applied before);
	// it started at the sink's, so it read nothing twice.
	for _, m := range members {
		for _, l := range m.Lines() {
			if strings.Contains(l, "skipped") {
				t.Errorf("%s read records the sink had applied: %q", m.Name(), l)
			}
		}
	}
	// The group's offsets live in the same database.
	var groupRows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM strata_offsets WHERE group_id = 'billing'").Scan(&groupRows); err != nil || groupRows == 0 {
		t.Fatalf("the coordinator's offsets of billing in Postgres: %d rows, %v", groupRows, err)
	}
}

// parseSinkOffsets reads billing's crash line: "... (sink offsets
// [orders-3=120 orders-7=99]) ...".
func parseSinkOffsets(t *testing.T, line string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for _, m := range regexp.MustCompile(`orders-(\d+)=(\d+)`).FindAllStringSubmatch(line, -1) {
		p, _ := strconv.Atoi(m[1])
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out[int32(p)] = n
	}
	if len(out) == 0 {
		t.Fatalf("no sink offsets in %q", line)
	}
	return out
}

// coordinatorCut is an HTTP client that fails every call to the group
// coordinator while cut is set, as a network partition between a member
// and the coordinator would; its fetches from storage go on.
type coordinatorCut struct {
	hc  *http.Client
	cut atomic.Bool
}

func (c *coordinatorCut) Do(req *http.Request) (*http.Response, error) {
	if c.cut.Load() && strings.Contains(req.URL.Path, "CoordinatorService") {
		return nil, errors.New("cut off from the coordinator")
	}
	return c.hc.Do(req)
}

// TestZombieBillingTransactionRefused: a member cut off from the
// coordinator keeps a batch it read; the coordinator removes it after the
// session timeout and another member takes its partitions and applies
// everything. The zombie's transaction for the batch is then refused: no
// write of it reaches the database, and ErrFenced says why.
func TestZombieBillingTransactionRefused(t *testing.T) {
	t.Parallel()
	gateway, _, pool := ordersCluster(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	if _, err := pool.Exec(ctx, "CREATE TABLE effects (partition_index integer, record_offset bigint, member text)"); err != nil {
		t.Fatal(err)
	}
	produceN(t, gateway, 0, 120)
	write := func(member string) pgsink.ApplyFunc {
		return func(ctx context.Context, tx pgx.Tx, recs []*client.Record) error {
			for _, r := range recs {
				if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", r.Partition, r.Offset, member); err != nil {
					return err
				}
			}
			return nil
		}
	}
	cut := &coordinatorCut{hc: harness.H2CClient()}
	consumer := func(hc connect.HTTPClient) *pgsink.Consumer {
		opts := []client.ConsumerOpt{client.FetchMaxWait(200 * time.Millisecond), client.RetryBackoff(50 * time.Millisecond)}
		if hc != nil {
			opts = append(opts, client.HTTPClient(hc))
		}
		c, err := pgsink.NewConsumer(ctx, pool, gateway, "billing", []string{"orders"}, pgsink.GroupOptions(client.GroupConsumerOptions(opts...)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	zombie := consumer(cut)
	var held []*client.Record
	testwait.Until(t, time.Minute, "the zombie to read every record", func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		recs, err := zombie.Poll(pctx)
		held = append(held, recs...)
		if len(held) < 120 {
			return fmt.Errorf("%d of 120 records read (%v)", len(held), err)
		}
		return nil
	})
	cut.cut.Store(true)

	owner := consumer(nil)
	applied := 0
	testwait.Until(t, 2*time.Minute, "the new owner to apply every record after the zombie's session expired", func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		recs, err := owner.Poll(pctx)
		if len(recs) > 0 {
			res, aerr := owner.Apply(ctx, recs, write("owner"))
			if aerr != nil {
				return aerr
			}
			applied += len(res.Applied)
		}
		if applied < 120 {
			return fmt.Errorf("%d of 120 applied (%v)", applied, err)
		}
		return nil
	})

	res, err := zombie.Apply(ctx, held, write("zombie"))
	cut.cut.Store(false) // so that its Close is told at once that it left long ago
	if !errors.Is(err, client.ErrFenced) || !strings.Contains(err.Error(), "assigned to another member since") {
		t.Fatalf("the zombie's Apply = %v; want ErrFenced: assigned to another member since", err)
	}
	parts := map[int32]bool{}
	for _, r := range held {
		parts[r.Partition] = true
	}
	if len(res.Applied) != 0 || len(res.Fenced) != len(parts) {
		t.Fatalf("the zombie's Apply applied %d records and fenced %d partitions; want none and the %d it read", len(res.Applied), len(res.Fenced), len(parts))
	}
	var rows, distinct, zombies int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT (partition_index, record_offset)), count(*) FILTER (WHERE member = 'zombie') FROM effects").Scan(&rows, &distinct, &zombies); err != nil {
		t.Fatal(err)
	}
	if rows != 120 || distinct != 120 || zombies != 0 {
		t.Fatalf("effects: %d rows, %d distinct records, %d written by the zombie; want 120, 120, 0", rows, distinct, zombies)
	}
}
