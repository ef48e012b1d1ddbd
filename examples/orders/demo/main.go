// Command demo runs the orders story end to end (`make demo`): a dev
// cluster whose coordinator keeps group offsets in PostgreSQL (`strata dev
// --postgres`), the shop publishing order events, three billing members
// writing invoices exactly once, and analytics loading a warehouse. Midway
// it kills one billing member and one storage node with SIGKILL and
// restarts them. Once everything is applied, a fresh group replays the
// topic from the start, and the demo prints a report computed from the
// topic and the database. Its last line is `demo ok: ...` or
// `demo FAILED: ...`, and it exits 0 or 1 accordingly.
//
// It finds shop, billing and analytics next to itself and strata next to
// itself, in the directory above, or on PATH (make demo builds them into
// bin/orders and bin). It owns the database it is given (default
// strata_demo on the machine's PostgreSQL, created when missing): each run
// drops the tables of the run before and deletes its groups.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/client/pgsink"
	"github.com/strata-mq/strata/examples/orders/event"
	"github.com/strata-mq/strata/examples/orders/internal/member"
	"github.com/strata-mq/strata/examples/orders/report"
	"github.com/strata-mq/strata/examples/orders/store"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// The story's names.
const (
	topic        = "orders"
	partitions   = 12
	billingGroup = "billing"
	analytics    = "analytics"
	replayGroup  = "orders-replay"
	warehouse    = "warehouse"
	replayTable  = "warehouse_replay"
)

type options struct {
	dsn      string
	duration time.Duration // the shop's
	rate     int
	billing  int
	timeout  time.Duration
	dir      string
	keep     bool
	bin      string
	strata   string
	basePort int // 0: a random free range
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", member.DefaultDSN, "PostgreSQL database for the invoices, the warehouse, the sink's offsets and the coordinator's; created when missing, emptied at start")
	flag.DurationVar(&o.duration, "duration", time.Minute, "how long the shop publishes")
	flag.IntVar(&o.rate, "rate", 400, "events per second the shop publishes")
	flag.IntVar(&o.billing, "billing", 3, "billing members (2..9: one is killed)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "the whole run's limit")
	flag.StringVar(&o.dir, "dir", "", "directory of the dev cluster and the logs; default a new temporary one, removed after a run that passed")
	flag.BoolVar(&o.keep, "keep", false, "keep the directory after a run that passed")
	flag.StringVar(&o.bin, "bin", "", "directory of shop, billing and analytics; default this program's")
	flag.StringVar(&o.strata, "strata", "", "the strata binary; default next to this program, in the directory above, or on PATH")
	flag.IntVar(&o.basePort, "base-port", 0, "strata dev's --base-port; default a random free range below the kernel's ephemeral ports")
	flag.Parse()
	if o.duration <= 0 || o.rate < 1 || o.billing < 2 || o.billing > 9 || o.timeout <= 0 {
		fmt.Println("demo FAILED: bad flags: --duration, --rate and --timeout must be positive, --billing 2..9")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	d := &demo{o: o}
	ok, line := d.run(ctx)
	d.cleanup(ok)
	fmt.Println(line)
	if !ok {
		os.Exit(1)
	}
}

// demo is one run.
type demo struct {
	o       options
	dir     string // the run's directory: cluster/, logs/
	logs    string
	gateway string
	bins    map[string]string // program -> path
	pool    *pgxpool.Pool
	dev     *proc
	devFile clusterFile
	acked   atomic.Int64 // the shop's last progress line
	shopEnd chan string  // the shop's done line

	mu    sync.Mutex
	procs []*proc // every process started, strata dev first
	out   sync.Mutex
}

// clusterFile is what the demo reads from strata dev's cluster.json.
type clusterFile struct {
	Gateway   string `json:"gateway"`
	Processes []struct {
		Service string   `json:"service"`
		ID      int      `json:"id"`
		PID     int      `json:"pid"`
		Argv    []string `json:"argv"`
	} `json:"processes"`
}

func (d *demo) printf(format string, args ...any) {
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Printf(format+"\n", args...)
}

// run plays the story and returns the outcome and the last line.
func (d *demo) run(ctx context.Context) (bool, string) {
	d.printf("demo: the orders story: a shop publishing order events, %d billing members writing invoices to PostgreSQL exactly once, analytics loading a warehouse; "+
		"one billing member and one storage node killed with SIGKILL midway", d.o.billing)
	fail := func(err error) (bool, string) {
		if ctx.Err() != nil && !errors.Is(err, errPostgres) {
			err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		}
		return false, "demo FAILED: " + oneLine(err.Error())
	}
	steps := []func(context.Context) error{d.prepare, d.openDatabase, d.startCluster, d.resetGroups, d.createTopic, d.startPrograms, d.faults, d.drain, d.replay}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return fail(err)
		}
	}
	return d.report(ctx)
}

// errPostgres marks the failure to reach PostgreSQL, which the last line
// says plainly.
var errPostgres = errors.New("PostgreSQL is not reachable")

// prepare finds the binaries and makes the run's directory.
func (d *demo) prepare(context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	exeDir := filepath.Dir(exe)
	bin := d.o.bin
	if bin == "" {
		bin = exeDir
	}
	d.bins = map[string]string{}
	for _, name := range []string{"shop", "billing", "analytics"} {
		p := filepath.Join(bin, name)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found in %s; run 'make demo', or build ./examples/orders/... there", name, bin)
		}
		d.bins[name] = p
	}
	d.bins["strata"] = d.o.strata
	if d.bins["strata"] == "" {
		for _, p := range []string{filepath.Join(exeDir, "strata"), filepath.Join(filepath.Dir(exeDir), "strata")} {
			if _, err := os.Stat(p); err == nil {
				d.bins["strata"] = p
				break
			}
		}
	}
	if d.bins["strata"] == "" {
		p, err := exec.LookPath("strata")
		if err != nil {
			return errors.New("strata not found next to the demo, in the directory above or on PATH; run 'make build'")
		}
		d.bins["strata"] = p
	}
	d.dir = d.o.dir
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "strata-demo-"); err != nil {
			return err
		}
	} else if d.dir, err = filepath.Abs(d.dir); err != nil {
		return err
	}
	d.logs = filepath.Join(d.dir, "logs")
	return os.MkdirAll(d.logs, 0o755)
}

// openDatabase connects to the demo's database, creating it when it does
// not exist, and drops the tables an earlier run left.
func (d *demo) openDatabase(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(d.o.dsn)
	if err != nil {
		return fmt.Errorf("--dsn: %w", err)
	}
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3D000" { // invalid_catalog_name: no such database
		if err := createDatabase(cctx, cfg); err != nil {
			return fmt.Errorf("%w: create database %s at %s: %v", errPostgres, cfg.Database, where, err)
		}
		d.printf("demo: created database %s", cfg.Database)
		conn, err = pgx.ConnectConfig(cctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("%w at %s (%v): make demo needs the PostgreSQL the tests use (127.0.0.1:5432, trust auth); start it, or point --dsn at one", errPostgres, where, err)
	}
	conn.Close(context.Background())
	if d.pool, err = pgxpool.New(ctx, d.o.dsn); err != nil {
		return err
	}
	if err := store.Drop(ctx, d.pool, store.Invoices, warehouse, replayTable, pgsink.DefaultTable); err != nil {
		return err
	}
	d.printf("demo: PostgreSQL at %s, database %s: invoices, the warehouse, the sink's offsets and the coordinator's", where, cfg.Database)
	return nil
}

// createDatabase creates cfg's database through the server's postgres
// database.
func createDatabase(ctx context.Context, cfg *pgx.ConnConfig) error {
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P04" { // created meanwhile
		return nil
	}
	return err
}

// startCluster runs strata dev --postgres on a free range of ports.
func (d *demo) startCluster(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		base := 20000 + rand.IntN(12000) // below the kernel's ephemeral ports
		if d.o.basePort > 0 {
			base = d.o.basePort
		}
		ready := make(chan string, 1)
		dev, err := d.start("strata-dev", []string{d.bins["strata"], "dev", "--dir", filepath.Join(d.dir, "cluster"),
			"--base-port", strconv.Itoa(base), "--postgres", d.o.dsn}, nil, false, func(l string) {
			if strings.HasPrefix(l, "strata dev: ready") || strings.Contains(l, "in use") {
				select {
				case ready <- l:
				default:
				}
			}
		})
		if err != nil {
			return err
		}
		d.dev = dev
		select {
		case l := <-ready:
			if strings.HasPrefix(l, "strata dev: ready") {
				raw, err := os.ReadFile(filepath.Join(d.dir, "cluster", "cluster.json"))
				if err != nil {
					return err
				}
				if err := json.Unmarshal(raw, &d.devFile); err != nil {
					return fmt.Errorf("cluster.json: %w", err)
				}
				d.gateway = d.devFile.Gateway
				d.printf("demo: strata dev ready: gateway %s, 3 storage nodes, the coordinator on PostgreSQL (logs in %s)", d.gateway, d.logs)
				return nil
			}
			<-dev.done
			if attempt == 5 || d.o.basePort > 0 {
				return fmt.Errorf("strata dev: no free ports after 5 tries: %s", l)
			}
		case <-dev.done:
			return fmt.Errorf("strata dev exited (%s) before it was ready; see %s", dev.exitText(), filepath.Join(d.logs, "strata-dev.log"))
		case <-ctx.Done():
			return errors.New("strata dev did not get ready")
		}
	}
}

// resetGroups deletes the groups an earlier run left in the coordinator's
// database: billing would otherwise start where they committed.
func (d *demo) resetGroups(ctx context.Context) error {
	gw := report.Gateway(d.gateway)
	for _, g := range []string{billingGroup, analytics, replayGroup} {
		_, err := gw.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: g}))
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return fmt.Errorf("delete group %s of an earlier run: %w", g, err)
		}
	}
	return nil
}

func (d *demo) createTopic(ctx context.Context) error {
	_, err := report.Gateway(d.gateway).CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
		Name: topic, Partitions: partitions, ReplicationFactor: 3}))
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	d.printf("demo: topic %s: %d partitions, 3 replicas", topic, partitions)
	return nil
}

// memberArgv is the command line of a billing or analytics member.
func (d *demo) memberArgv(program, name, group string, extra ...string) []string {
	return append([]string{d.bins[program], "--gateway", d.gateway, "--dsn", d.o.dsn, "--group", group, "--topic", topic, "--name", name}, extra...)
}

// startPrograms starts billing, analytics and the shop.
func (d *demo) startPrograms(context.Context) error {
	for i := 1; i <= d.o.billing; i++ {
		name := fmt.Sprintf("billing-%d", i)
		if _, err := d.start(name, d.memberArgv("billing", name, billingGroup, "--progress", "1h"), nil, true, nil); err != nil {
			return err
		}
	}
	if _, err := d.start(analytics, d.memberArgv("analytics", analytics, analytics, "--table", warehouse), nil, true, nil); err != nil {
		return err
	}
	d.shopEnd = make(chan string, 1)
	_, err := d.start("shop", []string{d.bins["shop"], "--gateway", d.gateway, "--topic", topic, "--rate", strconv.Itoa(d.o.rate),
		"--duration", d.o.duration.String(), "--progress", "500ms"}, nil, false, func(l string) {
		var n int64
		switch {
		case strings.HasPrefix(l, "shop: done: "):
			d.shopEnd <- l
		case strings.HasPrefix(l, "shop: "):
			if _, err := fmt.Sscanf(l, "shop: %d events acknowledged", &n); err == nil {
				d.acked.Store(n)
			}
		}
	})
	if err != nil {
		return err
	}
	d.printf("demo: started %d billing members, analytics and the shop (%d events/s for %s)", d.o.billing, d.o.rate, d.o.duration)
	return nil
}

// waitFor polls cond every 200ms until it holds, printing status every
// 10s, until ctx ends.
func (d *demo) waitFor(ctx context.Context, what string, cond func() (bool, error), status func() string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastStatus := time.Now()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if status != nil && time.Since(lastStatus) >= 10*time.Second {
			lastStatus = time.Now()
			d.printf("demo: %s", status())
		}
		select {
		case <-ctx.Done():
			last := ""
			if status != nil {
				last = "; " + status()
			}
			return fmt.Errorf("waiting for %s: not done in time%s", what, last)
		case <-tick.C:
		}
	}
}

// shopAt waits until the shop has acknowledged n events.
func (d *demo) shopAt(ctx context.Context, n int64, what string) error {
	shop := d.proc("shop")
	return d.waitFor(ctx, what, func() (bool, error) {
		if d.acked.Load() >= n {
			return true, nil
		}
		if shop.exited() {
			return false, fmt.Errorf("the shop exited (%s) after %d events; see %s", shop.exitText(), d.acked.Load(), filepath.Join(d.logs, "shop.log"))
		}
		return false, nil
	}, d.status)
}

// faults kills billing-2 and storage-2 a third of the way through the
// shop's run and restarts them once it has published another sixth.
func (d *demo) faults(ctx context.Context) error {
	target := int64(d.o.rate) * int64(d.o.duration/time.Second)
	if err := d.shopAt(ctx, target/3, "the shop to publish a third of its events"); err != nil {
		return err
	}
	billing := d.proc("billing-2")
	var storage struct {
		pid  int
		argv []string
	}
	for _, p := range d.devFile.Processes {
		if p.Service == "storage" && p.ID == 2 {
			storage.pid, storage.argv = p.PID, p.Argv
		}
	}
	if storage.pid == 0 {
		return errors.New("cluster.json lists no storage-2")
	}
	d.printf("demo: SIGKILL billing-2 (pid %d) and storage-2 (pid %d) after %d events", billing.cmd.Process.Pid, storage.pid, d.acked.Load())
	billing.kill()
	if err := syscall.Kill(storage.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill storage-2: %w", err)
	}
	if err := d.shopAt(ctx, target/2, "the shop to go on publishing without storage-2"); err != nil {
		return err
	}
	if _, err := d.start("storage-2", storage.argv, nil, false, nil); err != nil {
		return err
	}
	if _, err := d.start("billing-2", billing.argv, nil, true, nil); err != nil {
		return err
	}
	d.printf("demo: restarted storage-2 and billing-2 after %d events (billing-2's old member keeps its partitions until the coordinator's session timeout; the sink fences it then)", d.acked.Load())
	return nil
}

// proc returns the last process started under name.
func (d *demo) proc(name string) *proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.procs) - 1; i >= 0; i-- {
		if d.procs[i].name == name {
			return d.procs[i]
		}
	}
	return nil
}

// applied is the number of records group has applied through the sink:
// the sum of its offsets (every partition starts at 0).
func (d *demo) applied(ctx context.Context, group string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, "SELECT coalesce(sum(greatest(next_offset, 0)), 0) FROM "+pgsink.DefaultTable+" WHERE group_id = $1", group).Scan(&n)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // no table yet: nothing applied
		return 0, nil
	}
	return n, err
}

func (d *demo) status() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, _ := d.applied(ctx, billingGroup)
	a, _ := d.applied(ctx, analytics)
	return fmt.Sprintf("%d events published; billing has applied %d, analytics %d", d.acked.Load(), b, a)
}

// shopDone is the shop's done line's figures, once it has ended.
var shopDone struct {
	events, orders, failed int64
}

// drain waits for the shop to end, then for billing and analytics to
// apply everything it published.
func (d *demo) drain(ctx context.Context) error {
	shop := d.proc("shop")
	var line string
	err := d.waitFor(ctx, "the shop to finish", func() (bool, error) {
		select {
		case line = <-d.shopEnd:
			return true, nil
		default:
		}
		if shop.exited() {
			select {
			case line = <-d.shopEnd:
				return true, nil
			default:
				return false, fmt.Errorf("the shop exited (%s) without its done line; see %s", shop.exitText(), filepath.Join(d.logs, "shop.log"))
			}
		}
		return false, nil
	}, d.status)
	if err != nil {
		return err
	}
	if _, err := fmt.Sscanf(line, "shop: done: events=%d orders=%d failed=%d", &shopDone.events, &shopDone.orders, &shopDone.failed); err != nil {
		return fmt.Errorf("the shop's done line %q: %w", line, err)
	}
	d.printf("demo: the shop is done: %d events acknowledged for %d orders, %d failed", shopDone.events, shopDone.orders, shopDone.failed)
	ends, err := d.endSum(ctx)
	if err != nil {
		return err
	}
	return d.caughtUp(ctx, ends, billingGroup, analytics)
}

// endSum is the sum of the topic's high watermarks.
func (d *demo) endSum(ctx context.Context) (int64, error) {
	c, err := client.NewConsumer(d.gateway)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	parts := make([]int32, partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	ends, err := c.ListOffsets(ctx, topic, parts, client.EndOffset())
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	var n int64
	for _, e := range ends {
		n += e
	}
	return n, nil
}

// caughtUp waits until every group has applied ends records.
func (d *demo) caughtUp(ctx context.Context, ends int64, groups ...string) error {
	var last []string
	return d.waitFor(ctx, strings.Join(groups, " and ")+" to apply every event", func() (bool, error) {
		last = last[:0]
		done := true
		for _, g := range groups {
			n, err := d.applied(ctx, g)
			if err != nil {
				return false, err
			}
			last = append(last, fmt.Sprintf("%s %d", g, n))
			done = done && n >= ends
		}
		return done, nil
	}, func() string { return fmt.Sprintf("applied of %d events: %s", ends, strings.Join(last, ", ")) })
}

// replay runs analytics in a fresh group into a table of its own until it
// has read the whole topic from the start, then stops it and the other
// members.
func (d *demo) replay(ctx context.Context) error {
	d.printf("demo: a fresh group, %s, replays the topic from the start into %s", replayGroup, replayTable)
	p, err := d.start("replay", d.memberArgv("analytics", "replay", replayGroup, "--table", replayTable), nil, true, nil)
	if err != nil {
		return err
	}
	ends, err := d.endSum(ctx)
	if err != nil {
		return err
	}
	if err := d.caughtUp(ctx, ends, replayGroup); err != nil {
		return err
	}
	p.stop(syscall.SIGTERM, 15*time.Second)
	for _, q := range d.programs() {
		q.stop(syscall.SIGTERM, 15*time.Second)
	}
	return nil
}

// programs are the processes the demo started besides strata dev and the
// storage node it restarted.
func (d *demo) programs() []*proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*proc
	for _, p := range d.procs {
		if p != d.dev && p.name != "storage-2" {
			out = append(out, p)
		}
	}
	return out
}

// report computes the report from the topic and the database, prints it
// and returns the last line.
func (d *demo) report(ctx context.Context) (bool, string) {
	t, err := report.ReadTopic(ctx, d.gateway, topic)
	if err != nil {
		return false, "demo FAILED: " + oneLine(err.Error())
	}
	var r report.Report
	r.Add(report.Produced(shopDone.events, t))
	inv, b := report.CheckBilling(ctx, d.pool, t)
	r.Add(inv)
	r.Add(report.Revenue(b, t))
	r.Add(report.CheckWarehouse(ctx, d.pool, "analytics", warehouse, t, b))
	r.Add(report.CheckWarehouse(ctx, d.pool, "fresh replay", replayTable, t, b))
	for _, g := range []string{billingGroup, analytics} {
		r.Add(report.GroupLag(ctx, d.gateway, g))
	}
	r.Add(d.generations(ctx))
	fmt.Println()
	d.out.Lock()
	r.Write(os.Stdout)
	d.out.Unlock()
	if !r.OK() {
		return false, "demo FAILED: " + oneLine(strings.Join(r.Failed(), "; "))
	}
	return true, fmt.Sprintf("demo ok: %d events, %d invoices each applied exactly once through a billing member's SIGKILL and a storage node's; "+
		"analytics and a fresh replay agree with billing on revenue %s", t.Events, b.Invoices, event.Dollars(b.Revenue))
}

// generations reports how often billing's partitions changed hands: each
// assignment bumped a partition's generation in the sink's table.
func (d *demo) generations(ctx context.Context) report.Check {
	c := report.Check{Name: "billing assignments", Info: true, OK: true}
	var rows, gens int64
	err := d.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(generation), 0) FROM "+pgsink.DefaultTable+" WHERE group_id = $1", billingGroup).Scan(&rows, &gens)
	if err != nil {
		c.OK, c.Detail = false, err.Error()
		return c
	}
	c.Detail = fmt.Sprintf("%d partitions were assigned %d times in all (each assignment bumps the sink's generation, fencing the member before)", rows, gens)
	return c
}

// cleanup stops everything the demo started: the programs, the restarted
// storage node, then strata dev (SIGINT, which stops the cluster in
// order). It removes the run's directory after a run that passed.
func (d *demo) cleanup(ok bool) {
	for _, p := range d.programs() {
		p.stop(syscall.SIGTERM, 15*time.Second)
	}
	if p := d.proc("storage-2"); p != nil {
		p.stop(syscall.SIGTERM, 15*time.Second)
	}
	if d.dev != nil {
		d.dev.stop(syscall.SIGINT, 60*time.Second)
	}
	if d.pool != nil {
		d.pool.Close()
	}
	switch {
	case d.dir == "":
	case ok && !d.o.keep && d.o.dir == "":
		os.RemoveAll(d.dir)
	default:
		d.printf("demo: logs and the cluster's data are in %s", d.dir)
	}
}

// oneLine joins the lines of s.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
