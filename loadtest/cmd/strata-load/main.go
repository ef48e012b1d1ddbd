// Command strata-load benchmarks a running Strata cluster with the Go
// client: produce throughput and latency, consume throughput and
// end-to-end latency, and the cluster's CPU cost, for a matrix of
// workloads (partitions x record size x replication factor and acks), so
// the figures of one invocation compare.
//
//	strata-load --gateway http://127.0.0.1:9092 --cluster-json strata-dev/cluster.json
//	strata-load --matrix bench --records 0 --duration 15s --output json
//
// Each workload is run in up to three modes, in this order:
//
//   - max: closed loop, as fast as the in-flight bound allows (--inflight
//     records produced and not yet acknowledged); MB/s and the latency
//     from Produce to the delivery callback.
//   - rate: open loop at a constant offered load (--rate, MB/s or a
//     percentage of the max run), with a consumer reading alongside. Sends
//     follow a fixed-rate clock and latency is measured from each record's
//     intended send time, so a stall counts against the cluster instead
//     of silently pausing the load (coordinated omission); ack and
//     end-to-end p50/p99/p999/max.
//   - consume: the max run's topic read from the start by one consumer of
//     every partition, then by a group of three that joined before the
//     topic was filled; MB/s from the first Poll to the last record.
//
// With --cluster-json (the file `strata dev` writes), every run also
// reports the CPU seconds the cluster's processes used per GB of record
// values, read from /proc/PID/stat, and the load generator's own.
// Progress goes to stderr; the table (or, with --output json, the JSON
// report) to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
)

// options are the parsed command line.
type options struct {
	gateway     string
	clusterJSON string
	protocol    string // connect or kafka
	kafkaBoot   string // --kafka-bootstrap, or cluster.json's kafka_bootstrap
	matrix      []workload
	set         settings
	output      string
	jsonFile    string
	peersFile   string
	profileDir  string
	breakdown   bool
	creds       credentials // credentials.go
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "strata-load: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &Report{Started: time.Now(), Gateway: opts.gateway, Command: "strata-load " + strings.Join(args, " ")}
	rep.Settings.Records = opts.set.records
	rep.Settings.DurationSec = opts.set.duration.Seconds()
	rep.Settings.Inflight = opts.set.inflight
	rep.Settings.LingerMs = float64(opts.set.linger) / float64(time.Millisecond)
	rep.Settings.MaxInFlight = opts.set.maxInFlight
	rep.Settings.Keys = opts.set.keys
	rep.Settings.Rate = opts.set.rate.String()
	rep.Settings.Protocol = opts.protocol
	if opts.peersFile != "" {
		if rep.Peers, err = readPeers(opts.peersFile); err != nil {
			fmt.Fprintf(stderr, "strata-load: peers: %v\n", err)
			return 2
		}
	}
	meter := &cpuMeter{}
	if opts.clusterJSON != "" {
		if meter.procs, err = readClusterJSON(opts.clusterJSON); err != nil {
			fmt.Fprintf(stderr, "strata-load: cluster CPU: %v\n", err)
			return 2
		}
	}
	hc, closeTLS, err := opts.creds.adminHTTPClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "strata-load: %v\n", err)
		return 2
	}
	defer closeTLS()
	gw := gatewayv1connect.NewGatewayServiceClient(hc, opts.gateway)
	r := newRunner(opts.gateway, gw, opts.set, meter, stderr)
	r.copts = opts.creds.clientOpts()
	r.breakdown = opts.breakdown
	if opts.creds.files().Enabled() {
		r.admin, r.adminScheme = hc, "https"
	}
	if opts.protocol == "kafka" {
		kc, closeKafka, err := opts.creds.kafka(ctx, opts.kafkaBoot)
		if err != nil {
			fmt.Fprintf(stderr, "strata-load: %v\n", err)
			return 2
		}
		defer closeKafka()
		r.kafka = kc
	}

	runErr := runMatrix(ctx, r, opts.matrix, &rep.Results)
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	rep.Checks = checks(rep.Results, rep.Peers)
	var profiles []string
	if runErr == nil && opts.profileDir != "" {
		d := opts.set.duration
		if d == 0 {
			d = 10 * time.Second
		}
		r.logf("profiling %s max for %s (not in the table)", opts.matrix[0].Name(), d)
		if profiles, err = r.profileRun(ctx, opts.matrix[0], d, opts.profileDir); err != nil {
			r.logf("profile: %v", err)
		}
	}

	if opts.output == "json" {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "strata-load: %v\n", err)
			return 1
		}
	} else {
		printText(stdout, rep)
	}
	if opts.jsonFile != "" {
		if err := writeJSONFile(opts.jsonFile, rep); err != nil {
			fmt.Fprintf(stderr, "strata-load: %v\n", err)
			return 1
		}
		r.logf("JSON report written to %s", opts.jsonFile)
	}
	if len(profiles) > 0 {
		r.logf("CPU profiles: %s (go tool pprof -top FILE)", strings.Join(profiles, " "))
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "strata-load: %v\n", runErr)
		return 1
	}
	return 0
}

// runMatrix runs every workload in its modes, appending each result as it
// is made so a failure still reports what was measured before it.
func runMatrix(ctx context.Context, r *runner, matrix []workload, results *[]Result) error {
	total := 0
	for _, w := range matrix {
		total += len(w.Modes)
		if w.Durability.Acks == client.AcksAll {
			total += len(r.set.txnBatches)
		}
		if w.has(modeConsume) {
			total++ // one consumer, then a group
		}
	}
	step, began := 0, time.Now()
	next := func(w workload, what string) {
		step++
		r.logf("[%d/%d %s] %s %s", step, total, time.Since(began).Round(time.Second), w.Name(), what)
	}
	for _, w := range matrix {
		if err := runWorkload(ctx, r, w, next, results); err != nil {
			return fmt.Errorf("%s %w", w.Name(), err)
		}
	}
	return nil
}

// runWorkload makes the runs of one workload: max, then rate, then
// consume on the topic max filled.
func runWorkload(ctx context.Context, r *runner, w workload, next func(workload, string), results *[]Result) error {
	topic, err := r.createTopic(ctx, w, "max")
	if err != nil {
		return err
	}
	defer r.deleteTopic(context.WithoutCancel(ctx), topic)
	var g *group
	if w.has(modeConsume) {
		// The group of the second consume run joins now, while the
		// topic is empty (see group).
		r.logf("%s: forming a consumer group of 3 on the empty topic, for the consume runs", w.Name())
		if g, err = r.formGroup(ctx, w, topic, 3); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		defer g.close(ctx)
	}

	next(w, "max: closed loop, "+r.bound())
	before, err := r.stagesBefore(ctx)
	if err != nil {
		return err
	}
	res, err := r.runMax(ctx, w, topic, r.set.records, r.set.duration)
	if err != nil {
		return fmt.Errorf("max: %w", err)
	}
	if res.Stages, err = r.stagesSince(ctx, before); err != nil {
		return err
	}
	*results = append(*results, res)
	r.logf("  %.1f MB/s, ack p99 %s ms", res.MBps, latP99(res.Ack))

	for _, n := range r.set.txnBatches {
		if w.Durability.Acks != client.AcksAll {
			r.logf("  (txn %d skipped: transactions need acks=all)", n)
			continue
		}
		next(w, fmt.Sprintf("txn: transactions of %d batches of %d records, %s", n, r.set.txnBatchRecords, r.bound()))
		tr, err := r.runTxn(ctx, w, n)
		if err != nil {
			return fmt.Errorf("txn %d: %w", n, err)
		}
		*results = append(*results, tr)
		r.logf("  %.1f MB/s, %d transactions, commit p50 %s ms p99 %s ms", tr.MBps, tr.Transactions, f2(tr.Commit.P50), f2(tr.Commit.P99))
	}

	if w.has(modeRate) {
		mbps := r.set.rate.MBps
		if r.set.rate.Fraction > 0 {
			mbps = r.set.rate.Fraction * res.MBps
		}
		next(w, fmt.Sprintf("rate: open loop at %.1f MB/s (%s), %s", mbps, r.set.rate, r.bound()))
		before, err := r.stagesBefore(ctx)
		if err != nil {
			return err
		}
		rr, err := r.runRate(ctx, w, mbps)
		if err != nil {
			return fmt.Errorf("rate: %w", err)
		}
		if rr.Stages, err = r.stagesSince(ctx, before); err != nil {
			return err
		}
		*results = append(*results, rr)
		r.logf("  %.1f MB/s, ack p99 %s ms, end-to-end p99 %s ms", rr.MBps, latP99(rr.Ack), latP99(rr.E2E))
	}

	if w.has(modeRequest) {
		next(w, fmt.Sprintf("request: one request of %d bytes at a time, %d times", r.set.requestBytes, requestRuns))
		before, err := r.stagesBefore(ctx)
		if err != nil {
			return err
		}
		rq, err := r.runRequest(ctx, w, topic)
		if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		if rq.Stages, err = r.stagesSince(ctx, before); err != nil {
			return err
		}
		*results = append(*results, rq)
		r.logf("  p50 %s ms, p99 %s ms", f2(rq.Ack.P50), latP99(rq.Ack))
	}

	if w.has(modeConsume) {
		for _, grp := range []*group{nil, g} {
			what := "one consumer of every partition"
			if grp != nil {
				what = fmt.Sprintf("the group of %d", grp.size())
			}
			next(w, "consume: "+what+", from the start")
			cr, err := r.runConsume(ctx, w, topic, grp)
			if err != nil {
				return fmt.Errorf("consume (%s): %w", what, err)
			}
			*results = append(*results, cr)
			r.logf("  %.1f MB/s, first record after %.0f ms", cr.MBps, cr.FirstRecordMs)
		}
	}
	return nil
}

// bound describes when a produce run stops.
func (r *runner) bound() string {
	switch {
	case r.set.records > 0 && r.set.duration > 0:
		return fmt.Sprintf("%d records or %s", r.set.records, r.set.duration)
	case r.set.records > 0:
		return fmt.Sprintf("%d records", r.set.records)
	}
	return r.set.duration.String()
}

func latP99(s *Summary) string {
	if s == nil {
		return "-"
	}
	return f2(s.P99)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("strata-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: strata-load [flags]\n\nBenchmarks a running cluster: closed-loop and open-loop produce, consume, CPU per GB.\nmake load and make bench-cluster run it on a throwaway cluster.\n\nflags:")
		fs.PrintDefaults()
	}
	var o options
	fs.StringVar(&o.gateway, "gateway", envOr("STRATA_GATEWAY", "http://127.0.0.1:9092"), "gateway base URL (env STRATA_GATEWAY)")
	fs.StringVar(&o.clusterJSON, "cluster-json", "", "the cluster.json `file` strata dev writes; enables the cluster's CPU figures and --profile")
	fs.StringVar(&o.protocol, "protocol", "connect", "connect (Strata's Go client through Connect) or kafka (the same workload with franz-go at the Kafka listener)")
	fs.StringVar(&o.kafkaBoot, "kafka-bootstrap", envOr("STRATA_KAFKA_BOOTSTRAP", ""), "host:port of the Kafka listener for --protocol kafka (default: kafka_bootstrap in --cluster-json; env STRATA_KAFKA_BOOTSTRAP)")
	matrix := fs.String("matrix", "", "a preset list of workloads ("+presetNames()+"); replaces --partitions, --record-bytes, --durability and --modes")
	partitions := fs.String("partitions", "12", "partitions of each workload's topic (comma-separated list)")
	sizes := fs.String("record-bytes", "1KiB", "record value size: bytes, NKiB or NMiB (comma-separated list)")
	durs := fs.String("durability", "rf3-all,rf1-leader", "replication factor and acks: rf3-all, rf3-leader, rf1-leader (comma-separated list)")
	modes := fs.String("modes", "max,rate,consume", "runs per workload: max (closed loop; always run, first), rate (open loop), consume, request (one request of --request-bytes at a time)")
	requestBytes := fs.String("request-bytes", "300KiB", "request runs: the size of each produce request (bytes, NKiB or NMiB)")
	fs.IntVar(&o.set.records, "records", 100000, "records per produce run; 0: no limit (then --duration)")
	fs.DurationVar(&o.set.duration, "duration", 0, "time per produce run; 0: no limit (then --records); with both, the first reached")
	fs.IntVar(&o.set.inflight, "inflight", 512, "closed loop: records produced and not yet acknowledged at most")
	fs.DurationVar(&o.set.linger, "linger", 5*time.Millisecond, "producer linger")
	fs.IntVar(&o.set.maxInFlight, "max-in-flight", 5, "idempotent (acks=all) producer: batches in flight per partition, 1 to 5 (the client's MaxInFlight)")
	fs.IntVar(&o.set.keys, "keys", 1000, "distinct keys, spread over the partitions by the default partitioner")
	rate := fs.String("rate", "50%", "offered load of rate runs: MB/s, or a percentage of the workload's max run")
	txnBatches := fs.String("txn-batches", "", "after each max run, a transactional run per value (comma-separated list, e.g. 1,10,100): transactions of N batches, committed one after the other; commit latency and MB/s (Go client, acks=all workloads)")
	fs.IntVar(&o.set.txnBatchRecords, "txn-batch-records", 100, "records per batch of a --txn-batches run, all to one partition")
	fs.BoolVar(&o.set.keepTopics, "keep-topics", false, "keep each run's topic instead of deleting it")
	fs.StringVar(&o.output, "output", "text", "text (a table) or json")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the JSON report to this file")
	fs.StringVar(&o.peersFile, "peers", "", "output of the peer-systems benchmark to print beside the results, with ratios")
	fs.StringVar(&o.creds.token, "token", "", "bearer token sent on every call (default $STRATA_TOKEN; never printed)")
	fs.StringVar(&o.creds.tlsCA, "tls-ca", envOr("STRATA_TLS_CA", ""), "PEM CA bundle that verifies the cluster's https:// servers (env STRATA_TLS_CA)")
	fs.StringVar(&o.creds.tlsCert, "tls-cert", envOr("STRATA_TLS_CERT", ""), "PEM client certificate presented to the cluster (env STRATA_TLS_CERT)")
	fs.StringVar(&o.creds.tlsKey, "tls-key", envOr("STRATA_TLS_KEY", ""), "private key of --tls-cert (env STRATA_TLS_KEY)")
	fs.BoolVar(&o.breakdown, "breakdown", false, "after each produce run, print where acks=all produces spent their time at the leaders (append, follower fetch and acknowledgement, commit, wake-up, total; p50, p99, p99.9) beside the client's ack latency, from the storage nodes' metrics (needs --cluster-json)")
	fs.StringVar(&o.profileDir, "profile", "", "after the matrix, profile the first workload's max run: CPU profiles of every cluster process and of strata-load into this directory (needs --cluster-json)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["token"] {
		// Read here, not as the flag's default, so --help cannot show it.
		o.creds.token = os.Getenv("STRATA_TOKEN")
	}

	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if *matrix != "" {
		preset, ok := presets[*matrix]
		if !ok {
			bad("--matrix %q: one of %s", *matrix, presetNames())
		} else {
			o.matrix = preset()
		}
		for _, name := range []string{"partitions", "record-bytes", "durability", "modes"} {
			if set[name] {
				bad("--%s and --matrix exclude each other", name)
			}
		}
	} else {
		var ps []int32
		for _, s := range splitList(*partitions) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 10000 {
				bad("--partitions %q: 1..10000", s)
				continue
			}
			ps = append(ps, int32(n))
		}
		var ss []int
		for _, s := range splitList(*sizes) {
			n, err := parseSize(s)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			ss = append(ss, n)
		}
		var ds []durability
		for _, s := range splitList(*durs) {
			d, err := parseDurability(s)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			ds = append(ds, d)
		}
		ms, err := parseModes(*modes)
		if err != nil {
			problems = append(problems, err)
		}
		o.matrix = product(ps, ss, ds, ms)
		if len(problems) == 0 && len(o.matrix) == 0 {
			bad("no workload: --partitions, --record-bytes and --durability must each name one at least")
		}
	}
	for _, s := range splitList(*txnBatches) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			bad("--txn-batches %q: 1..10000", s)
			continue
		}
		o.set.txnBatches = append(o.set.txnBatches, n)
	}
	if o.set.txnBatchRecords < 1 {
		bad("--txn-batch-records %d: at least 1", o.set.txnBatchRecords)
	}
	if *txnBatches != "" && o.protocol == "kafka" {
		bad("--txn-batches runs the Go client's transactional producer; not with --protocol kafka")
	}
	var err error
	if o.set.requestBytes, err = parseSize(*requestBytes); err != nil {
		bad("--request-bytes: %v", err)
	}
	if o.set.rate, err = parseRate(*rate); err != nil {
		problems = append(problems, err)
	}
	if o.set.records < 0 || o.set.duration < 0 {
		bad("--records and --duration must not be negative")
	}
	if o.set.records == 0 && o.set.duration == 0 {
		bad("--records 0 needs a --duration")
	}
	if o.set.inflight < 1 {
		bad("--inflight %d: at least 1", o.set.inflight)
	}
	if o.set.keys < 1 {
		bad("--keys %d: at least 1", o.set.keys)
	}
	if o.set.maxInFlight < 1 || o.set.maxInFlight > 5 {
		bad("--max-in-flight must be 1 to 5")
	}
	if o.set.linger < 0 {
		bad("--linger must not be negative")
	}
	if o.output != "text" && o.output != "json" {
		bad("--output %q: text or json", o.output)
	}
	if o.creds.files().Enabled() {
		if err := o.creds.files().ValidateClient(); err != nil {
			problems = append(problems, err)
		}
	}
	if strings.ContainsFunc(o.creds.token, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		bad("--token (STRATA_TOKEN) has spaces or characters an HTTP header cannot carry")
	}
	switch o.protocol {
	case "connect":
	case "kafka":
		if o.kafkaBoot == "" && o.clusterJSON != "" {
			boot, err := kafkaBootstrapOf(o.clusterJSON)
			if err != nil {
				problems = append(problems, err)
			}
			o.kafkaBoot = boot
		}
		if o.kafkaBoot == "" && o.clusterJSON == "" {
			bad("--protocol kafka needs --kafka-bootstrap or --cluster-json (whose kafka_bootstrap it reads)")
		}
		if set["max-in-flight"] {
			bad("--max-in-flight is the Go client's; --protocol kafka keeps franz-go's defaults")
		}
	default:
		bad("--protocol %q: connect or kafka", o.protocol)
	}
	if o.profileDir != "" && o.clusterJSON == "" {
		bad("--profile needs --cluster-json (it profiles the processes listed there)")
	}
	if o.breakdown && o.clusterJSON == "" {
		bad("--breakdown needs --cluster-json (it reads the metrics of the storage nodes listed there)")
	}
	for _, w := range o.matrix {
		if w.has(modeRate) && w.RecordBytes < stampBytes {
			bad("%s: rate runs need records of at least %d bytes (they carry their send time)", w.Name(), stampBytes)
			break
		}
	}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
		}
		return o, errors.New(strings.Join(msgs, "; "))
	}
	return o, nil
}

func writeJSONFile(path string, rep *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeJSON(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
