// Command strata-scale measures what the number of partitions costs a
// cluster. For each size in --sizes it starts a throwaway `strata dev
// --storage-nodes 3` cluster and measures, in this order:
//
//   - produce: strata-load's closed loop on a topic of that many
//     partitions, keys spread over all of them, RF=3 acks=all, for
//     --duration; strata-load deletes the topic, and the rest waits until
//     it is gone, so the cluster never holds more than the size;
//   - create: topics of --partitions-per-topic partitions (RF=3) one
//     after the other, timed from the first CreateTopic until the storage
//     nodes' metrics show every replica hosted and every leader with all
//     three in its ISR (the controller's metadata, which says so from the
//     creation on, is timed too); creation stops, and the size is
//     reported as where the cluster broke, once the processes together
//     hold --max-rss-mb resident;
//   - idle: after --settle, the CPU every process uses over --idle, as %
//     of one core, with its resident memory (VmRSS), open files (entries
//     of /proc/PID/fd) and goroutines (/debug/pprof/goroutine on its admin
//     address);
//   - metadata: the bytes of one full snapshot of the controller's
//     WatchMetadata stream, as a watcher (a storage node, a gateway)
//     receives it on connecting;
//   - failover: SIGKILL storage node 1 and time until the metadata shows
//     no partition led by it, every partition it led having a new leader.
//
// Every size is set against the first (12 partitions by default) of the
// same invocation, and the targets are printed as met or not.
// It is a separate program, not a mode of strata-load, because it owns
// the clusters' lives (start, kill a node, stop), which strata-load, a
// client of a running cluster, never does; it runs strata-load for the
// produce figure.
//
//	strata-scale --sizes 12,1000,10000 --json-file scale.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the parsed command line.
type options struct {
	sizes         []int
	perTopic      int
	basePort      int
	idle          time.Duration
	settle        time.Duration
	duration      time.Duration
	inflight      int
	createTimeout time.Duration
	failTimeout   time.Duration
	binDir        string
	jsonFile      string
	profileDir    string
	keepDir       bool
	maxRSSMB      int
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
		fmt.Fprintf(stderr, "strata-scale: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &Report{Started: time.Now().UTC(), Command: "strata-scale " + strings.Join(args, " "),
		IdleSeconds: opts.idle.Seconds(), ProduceSeconds: opts.duration.Seconds()}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "strata-scale: "+format+"\n", a...)
	}
	var runErr error
	for _, n := range opts.sizes {
		logf("--- %d partitions ---", n)
		row, err := measureSize(ctx, opts, n, logf)
		if row != nil {
			rep.Rows = append(rep.Rows, *row)
		}
		if err != nil {
			runErr = fmt.Errorf("%d partitions: %w", n, err)
			rep.Error = runErr.Error()
			break
		}
	}
	rep.Targets = targets(rep.Rows)
	printText(stdout, rep)
	if opts.jsonFile != "" {
		if err := writeJSONFile(opts.jsonFile, rep); err != nil {
			logf("%v", err)
			return 1
		}
		logf("JSON report written to %s", opts.jsonFile)
	}
	if runErr != nil {
		logf("%v", runErr)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("strata-scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: strata-scale [flags]\n\nMeasures idle CPU, memory, open files, metadata size, topic creation, failover and produce\nof a throwaway 3-node cluster per partition count, against the first. make bench-partitions runs it.\n\nflags:")
		fs.PrintDefaults()
	}
	var o options
	sizes := fs.String("sizes", "12,1000,10000", "partition counts (RF=3), comma-separated; the first is the baseline of the ratios")
	fs.IntVar(&o.perTopic, "partitions-per-topic", 100, "partitions per topic: a size is made of topics of this many (the last one the rest)")
	fs.IntVar(&o.basePort, "base-port", 22092, "--base-port of each throwaway cluster (it uses ports up to base+215; below the ephemeral range, 32768 up on Linux, so no outgoing connection holds one)")
	fs.DurationVar(&o.idle, "idle", 20*time.Second, "idle window over which each process's CPU is measured")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "wait after the topics are ready before the idle window, so creation's work is over")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "produce run (strata-load --duration); 0 skips produce")
	fs.IntVar(&o.inflight, "inflight", 512, "strata-load --inflight of the produce run")
	fs.DurationVar(&o.createTimeout, "create-timeout", 10*time.Minute, "give up when the topics are not all led and in sync after this")
	fs.DurationVar(&o.failTimeout, "failover-timeout", 2*time.Minute, "give up when a killed node's partitions have no new leaders after this")
	fs.StringVar(&o.binDir, "bin", "", "directory holding strata and strata-load (default: this program's own directory)")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the report as JSON to this file")
	fs.StringVar(&o.profileDir, "profile", "", "during each idle window, write a 10 s CPU profile and a goroutine dump of every process into this directory")
	fs.IntVar(&o.maxRSSMB, "max-rss-mb", 12000, "stop creating a size's topics, as a finding, once the cluster's processes together hold this many MB resident (0: no limit), so a size the machine cannot hold does not run it out of memory; a heap profile of each storage node is kept with --profile")
	fs.BoolVar(&o.keepDir, "keep", false, "keep each cluster's directory (logs, data) instead of deleting it")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var problems []string
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100000 {
			problems = append(problems, fmt.Sprintf("--sizes %q: 1..100000", s))
			continue
		}
		o.sizes = append(o.sizes, n)
	}
	if o.perTopic < 1 || o.perTopic > 10000 {
		problems = append(problems, "--partitions-per-topic: 1..10000")
	}
	if o.basePort < 1024 || o.basePort > 65320 {
		problems = append(problems, "--base-port: 1024..65320")
	}
	if o.idle < time.Second {
		problems = append(problems, "--idle: at least 1s")
	}
	if o.duration < 0 || o.settle < 0 {
		problems = append(problems, "--duration and --settle must not be negative")
	}
	if o.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			problems = append(problems, "--bin: "+err.Error())
		}
		o.binDir = filepath.Dir(exe)
	}
	for _, b := range []string{"strata", "strata-load"} {
		if _, err := os.Stat(filepath.Join(o.binDir, b)); err != nil {
			problems = append(problems, fmt.Sprintf("%s not found in %s; run 'make build'", b, o.binDir))
		}
	}
	if len(problems) > 0 {
		return o, errors.New(strings.Join(problems, "; "))
	}
	return o, nil
}
