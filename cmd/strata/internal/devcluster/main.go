package devcluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// Defaults of the flags.
const (
	DefaultDir          = "strata-dev"
	DefaultStorageNodes = 3
	DefaultControllers  = 1
	DefaultGateways     = 1
	DefaultBasePort     = 9092
	DefaultReadyTimeout = 60 * time.Second
)

// options are the parsed flags of `strata dev`.
type options struct {
	dir          string        // --dir, made absolute by parse
	storageNodes int           // --storage-nodes, 1..9
	controllers  int           // --controllers, 1, 3 or 5
	gateways     int           // --gateways, 1..9
	basePort     int           // --base-port, minBasePort..maxBasePort
	clean        bool          // --clean: delete dir first
	readyTimeout time.Duration // --ready-timeout: per start phase
	otlp         string        // --otlp: OTLP endpoint for every process; empty: the OTEL_* environment decides
	secure       bool          // --secure: TLS, mutual TLS, authentication and ACLs (secure.go)
	postgres     string        // --postgres: the coordinator's offsets database (postgres.go); empty: embedded SQLite
}

// Exit codes of Main.
const (
	exitOK    = 0 // stopped by a signal or the context, or --help
	exitError = 1 // could not start: missing binary, port in use, a process failed
	exitUsage = 2 // bad flags
)

const usage = `Usage: strata dev [flags]

Runs a whole Strata cluster on this machine, each service its own process,
in the foreground. Ctrl-C stops it. DIR/cluster.json lists every process
with its pid, addresses and argv; DIR/logs/ holds their logs. A DIR from an
earlier run is reused with its data; --clean starts from nothing.

Plain, it has no TLS and no authentication: anyone who can reach its
loopback ports may do anything, which is for local use only. With --secure
every process serves TLS and requires authentication; 'source DIR/admin.env'
then makes the CLI the cluster's admin.

The coordinator keeps group offsets in embedded SQLite under DIR; with
--postgres DSN it keeps them in that PostgreSQL database instead (the DSN
reaches it as STRATA_DSN and is never written to cluster.json).

Ports from --base-port P: gateway P, controller 1 P+1, storage node i P+10+i,
controller i>=2 P+20+i, gateway i>=2 P+30+i, admin ports +100. See docs/design/dev-cluster.md.

'strata dev scale --dir DIR --storage-nodes N' starts (or stops) storage
nodes of the strata dev running in DIR; see 'strata dev scale --help'.

Flags:
`

// Main runs `strata dev` with args (the arguments after "dev"), writing
// progress to stdout and problems to stderr, and returns the exit code: 0
// after a stop by SIGINT, SIGTERM or the end of ctx; 1 when the cluster
// could not start; 2 on bad flags. It blocks until the cluster has stopped
// and every child process has been waited for.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "scale" {
		return scaleMain(ctx, args[1:], stdout, stderr)
	}
	o, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "strata dev: %v\n", err)
		return exitUsage
	}

	bins, err := findBinaries(services, exeDirs(), exec.LookPath)
	if err != nil {
		fmt.Fprintf(stderr, "strata dev: %v\n", err)
		return exitError
	}
	pl := makePlan(o.dir, o.basePort, o.controllers, o.storageNodes, o.gateways, bins, o.secure)
	pl = pl.withPostgres(o.postgres)
	if err := checkPorts(pl); err != nil {
		fmt.Fprintf(stderr, "strata dev: %v\n", err)
		return exitError
	}
	if err := prepareDir(o.dir, o.clean); err != nil {
		fmt.Fprintf(stderr, "strata dev: %v\n", err)
		return exitError
	}
	var ca *devca.CA
	if o.secure {
		ca, err = prepareSecure(o.dir, pl, pl.gatewayURLs()[0])
	} else {
		err = removeAdminEnv(o.dir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "strata dev: %v\n", err)
		return exitError
	}

	// Signals are handled here, not by the caller's context alone: the
	// first SIGINT or SIGTERM stops the cluster gracefully, a second one
	// kills what is left at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kill := make(chan struct{})
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		case <-stopped:
			return
		}
		select {
		case <-sigs:
			close(kill)
		case <-stopped:
		}
	}()

	c := newCluster(o, pl, stdout, stderr)
	c.bins = bins
	c.ca = ca
	return c.run(ctx, kill)
}

// parse reads and validates the flags. For -h it prints the usage to
// stdout and returns flag.ErrHelp. Any other error is one line.
func parse(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("strata dev", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.dir, "dir", DefaultDir, "directory of cluster.json, logs and each process's data; created if missing, reused if it exists")
	fs.IntVar(&o.storageNodes, "storage-nodes", DefaultStorageNodes, fmt.Sprintf("number of storage nodes, 1..%d", maxStorageNodes))
	fs.IntVar(&o.controllers, "controllers", DefaultControllers, "number of controllers (etcd members): 1, 3 or 5")
	fs.IntVar(&o.gateways, "gateways", DefaultGateways, fmt.Sprintf("number of gateways, 1..%d: the first on base-port, gateway i on base-port+30+i (to put behind a load balancer)", maxGateways))
	fs.IntVar(&o.basePort, "base-port", DefaultBasePort, fmt.Sprintf("first port of the cluster (the gateway's); the cluster uses ports up to base-port+%d", maxOffset))
	fs.BoolVar(&o.clean, "clean", false, "delete DIR (a dev cluster's directory) before starting, discarding its data")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", DefaultReadyTimeout, "how long each start phase may take before the processes not ready are reported and all stop")
	fs.BoolVar(&o.secure, "secure", false, "run with security on: a dev CA and a certificate per process under DIR/tls, TLS on every listener, mutual TLS between services, authentication and ACLs required (User:admin is a super user), and DIR/admin.env (mode 0600) to source for the CLI")
	fs.StringVar(&o.postgres, "postgres", "", "PostgreSQL DSN (postgres://USER@HOST:PORT/DB?sslmode=disable, or key=value pairs) of the database the coordinator keeps group offsets in, instead of embedded SQLite under DIR; the database must exist")
	fs.StringVar(&o.otlp, "otlp", "", "OpenTelemetry collector (OTLP) every process exports traces to, e.g. http://127.0.0.1:4318; sets OTEL_EXPORTER_OTLP_ENDPOINT for them (other OTEL_* variables pass through as they are)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(stdout, usage)
			fs.VisitAll(func(f *flag.Flag) {
				typ, help := flag.UnquoteUsage(f)
				fmt.Fprintf(stdout, "  --%s %s\n      %s (default %s)\n", f.Name, typ, help, f.DefValue)
			})
			return o, err
		}
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (strata dev takes flags only; see --help)", fs.Arg(0))
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return o, fmt.Errorf("--dir %q: %v", o.dir, err)
	}
	o.dir = abs
	// A controller's etcd listens on a Unix socket in its data directory,
	// and a socket path must stay short (maxSocketPath).
	if sock := etcdSocket(filepath.Join(abs, serviceController+"-5")); len(sock)-len("unix://") > maxSocketPath {
		return o, fmt.Errorf("--dir %q is too long: the controllers' etcd sockets under it (%s) would pass the %d bytes a Unix socket path may have", o.dir, sock, maxSocketPath)
	}
	return o, nil
}

// validate returns every problem with o in one line, or nil.
func (o options) validate() error {
	var problems []string
	bad := func(flag string, value any, reason string) {
		problems = append(problems, fmt.Sprintf("--%s %v: %s", flag, value, reason))
	}
	if o.storageNodes < 1 || o.storageNodes > maxStorageNodes {
		bad("storage-nodes", o.storageNodes, fmt.Sprintf("must be 1..%d", maxStorageNodes))
	}
	if o.controllers != 1 && o.controllers != 3 && o.controllers != 5 {
		bad("controllers", o.controllers, "must be 1, 3 or 5")
	}
	if o.gateways < 1 || o.gateways > maxGateways {
		bad("gateways", o.gateways, fmt.Sprintf("must be 1..%d", maxGateways))
	}
	if o.basePort < minBasePort || o.basePort > maxBasePort {
		bad("base-port", o.basePort, fmt.Sprintf("must be %d..%d (the cluster uses ports up to base-port+%d)", minBasePort, maxBasePort, maxOffset))
	}
	if strings.TrimSpace(o.dir) == "" {
		bad("dir", `""`, "must not be empty")
	}
	if o.readyTimeout <= 0 {
		bad("ready-timeout", o.readyTimeout, "must be positive")
	}
	if err := checkOTLP(o.otlp); err != nil {
		bad("otlp", o.otlp, err.Error())
	}
	if err := checkPostgres(o.postgres); err != nil {
		bad("postgres", redactDSN(o.postgres), err.Error())
	}
	if len(problems) > 0 {
		return errors.New("bad flags: " + strings.Join(problems, "; "))
	}
	return nil
}

// checkPorts tries to listen on every port the plan binds and returns one
// line naming the first that is taken and what it was for.
func checkPorts(pl plan) error {
	for _, s := range pl.all() {
		for _, pu := range s.ports() {
			ln, err := net.Listen("tcp", hostPort(pu.port))
			if err != nil {
				return fmt.Errorf("port %d (%s) is in use; stop what uses it or choose another --base-port", pu.port, pu.what)
			}
			ln.Close()
		}
	}
	return nil
}

// prepareDir creates dir, first deleting it when clean is set. It refuses
// to delete a directory that does not look like a dev cluster's (neither
// empty nor holding a cluster.json), so a mistyped --dir cannot wipe a home
// directory.
func prepareDir(dir string, clean bool) error {
	if clean {
		entries, err := os.ReadDir(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("--clean: %v", err)
		default:
			if _, err := os.Stat(filepath.Join(dir, clusterFileName)); len(entries) > 0 && err != nil {
				return fmt.Errorf("--clean: %s has no %s, so it is not a dev cluster's directory; not deleting it", dir, clusterFileName)
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("--clean: %v", err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("--dir: %v", err)
	}
	// A cluster.json left by an earlier run names dead pids; no reader
	// must mistake it for this run's.
	if err := os.Remove(filepath.Join(dir, clusterFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--dir: %v", err)
	}
	return nil
}
