package devcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// stopTimeout is how long a stop phase waits after SIGTERM before it kills
// the processes still running.
const stopTimeout = 10 * time.Second

// proc is one started process. Only the cluster's goroutine (run) touches
// its fields, except waitErr and lastReadyz as noted.
type proc struct {
	procSpec
	cmd     *exec.Cmd
	pid     int
	running bool
	exit    string // why it ended, once run saw it end
	ready   bool
	// done is closed when Wait has returned; waitErr is set before.
	done    chan struct{}
	waitErr error
	// lastReadyz is the last /readyz answer, for the timeout message.
	// Written by the poller, read after it ended.
	lastReadyz string
	// stopping marks a process `strata dev scale` is stopping on purpose.
	stopping bool
}

// cluster runs the processes of a plan. Its methods are called from one
// goroutine (the one running run); child waiters only send on exits.
type cluster struct {
	opts   options
	plan   plan
	stdout io.Writer
	stderr io.Writer
	start  time.Time
	procs  []*proc    // started so far, in start order
	exits  chan *proc // a child's waiter sends it once Wait returned
	ready  bool
	// stopped closes when the stop begins; waiters then stop reporting.
	stopped chan struct{}
	// bins are the service binaries, for storage nodes `scale` adds.
	bins map[string]string
	// requests carries control-socket requests to the supervisor
	// (control.go); controlLn and controlPath are the socket.
	requests    chan *pendingRequest
	controlLn   net.Listener
	controlPath string
	// ca is the dev CA of a secure cluster (--secure), nil for a plain
	// one: it issues the certificates of storage nodes `scale` adds and
	// verifies /readyz.
	ca *devca.CA
}

func newCluster(o options, pl plan, stdout, stderr io.Writer) *cluster {
	return &cluster{
		opts:   o,
		plan:   pl,
		stdout: stdout,
		stderr: stderr,
		// Every process exits once and strata dev restarts none, so one
		// slot each means a waiter never blocks; processes `scale` adds
		// stop waiting once the stop begins.
		exits:    make(chan *proc, len(pl.all())),
		stopped:  make(chan struct{}),
		requests: make(chan *pendingRequest),
	}
}

// errInterrupted ends the start when ctx ends; the cluster then stops
// cleanly and Main exits 0.
var errInterrupted = errors.New("interrupted")

// run starts the cluster, supervises it until ctx ends, stops it and
// returns the exit code. kill closes on a second signal: stop kills what is
// left at once.
func (c *cluster) run(ctx context.Context, kill <-chan struct{}) int {
	c.start = time.Now()
	fmt.Fprintf(c.stdout, "strata dev: starting %d controller(s), %d storage node(s), %d gateway(s), a coordinator and tiering in %s\n",
		c.opts.controllers, c.opts.storageNodes, len(c.plan.gateways), c.opts.dir)
	if c.plan.secure {
		fmt.Fprintf(c.stdout, "strata dev: secure: TLS and mutual TLS with the dev CA in %s, authentication and ACLs required\n", tlsDir(c.opts.dir))
	} else {
		fmt.Fprintln(c.stdout, "strata dev: no authentication and no TLS: anyone who can reach these ports may do anything; for local use only (--secure turns them on)")
	}
	if c.plan.postgres {
		fmt.Fprintf(c.stdout, "strata dev: the coordinator keeps group offsets in PostgreSQL at %s\n", redactDSN(c.opts.postgres))
	}

	err := c.startAll(ctx)
	if err != nil && !errors.Is(err, errInterrupted) {
		fmt.Fprintf(c.stderr, "strata dev: %v\n", err)
		c.stop(kill)
		return exitError
	}
	if err == nil {
		// `strata dev scale` reaches this process through the control
		// socket; without it the cluster still runs, it just cannot scale.
		if err := c.openControl(ctx); err != nil {
			fmt.Fprintf(c.stderr, "strata dev: no control socket, so 'strata dev scale' will not work: %v\n", err)
		}
		// The ready block is printed before cluster.json says ready, so a
		// reader that saw ready in the file finds the block printed too.
		c.printReady()
		c.ready = true
		if err := c.writeClusterFile(); err != nil {
			fmt.Fprintf(c.stderr, "strata dev: %v\n", err)
			c.stop(kill)
			return exitError
		}
		c.supervise(ctx)
	}
	c.stop(kill)
	return exitOK
}

// startAll starts the controllers, waits for them, then starts the data
// plane (storage nodes, gateway, coordinator, tiering) and waits for it.
func (c *cluster) startAll(ctx context.Context) error {
	// All controllers at once: each etcd member waits for a quorum of its
	// peers before it is ready.
	ctrls, err := c.startPhase(c.plan.controllers)
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx, ctrls, nil); err != nil {
		return err
	}
	rest, err := c.startPhase(c.plan.dataPlane())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "  %-13s embedded s3 %s, served by %s\n", serviceS3, httpURL(c.plan.s3Port), c.plan.tiering.name())
	return c.waitReady(ctx, rest, nil)
}

// startPhase starts specs, prints each one's addresses and log, and
// rewrites cluster.json.
func (c *cluster) startPhase(specs []procSpec) ([]*proc, error) {
	var started []*proc
	for _, s := range specs {
		p, err := c.startProc(s)
		if err != nil {
			return nil, err
		}
		started = append(started, p)
		fmt.Fprintf(c.stdout, "  %-13s %-24s admin %s  pid %d  log %s\n",
			p.name(), c.plan.url(p.port), hostPort(p.adminPort), p.pid, p.log)
	}
	return started, c.writeClusterFile()
}

// startProc starts one process with its output appended to its log file.
func (c *cluster) startProc(s procSpec) (*proc, error) {
	if s.dataDir != "" {
		if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %v", s.name(), err)
		}
	}
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", s.name(), err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "--- strata dev %s: starting %s: %s\n", time.Now().Format(time.RFC3339), s.name(), quoteArgv(s.argv))

	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = c.opts.dir
	cmd.Env = c.procEnv(s) // telemetry.go
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %v", s.name(), err)
	}
	p := &proc{procSpec: s, cmd: cmd, pid: cmd.Process.Pid, running: true, done: make(chan struct{})}
	c.procs = append(c.procs, p)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
		select {
		case c.exits <- p:
		case <-c.stopped:
		}
	}()
	return p, nil
}

// waitReady waits until every process in ps answers /readyz with 200,
// printing each as it becomes ready. It fails when a process exits, when
// the ready timeout passes, and with errInterrupted when ctx ends. With
// other set, a process not in ps that exits meanwhile is passed to it
// instead of failing the wait.
func (c *cluster) waitReady(ctx context.Context, ps []*proc, other func(*proc)) error {
	pollCtx, cancelPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelPolls()
	readyc := make(chan *proc, len(ps))
	client := readyClient(c.ca) // secure.go
	for _, p := range ps {
		wg.Go(func() {
			if pollReady(pollCtx, client, c.plan.url(p.adminPort), p) {
				readyc <- p
			}
		})
	}
	timer := time.NewTimer(c.opts.readyTimeout)
	defer timer.Stop()
	for pending := len(ps); pending > 0; {
		select {
		case p := <-readyc:
			p.ready = true
			pending--
			fmt.Fprintf(c.stdout, "  %-13s ready after %s\n", p.name(), c.elapsed())
		case p := <-c.exits:
			c.exited(p)
			if other != nil && !slices.Contains(ps, p) {
				if !p.stopping {
					other(p)
				}
				continue
			}
			return fmt.Errorf("%s exited (%s) before it was ready%s; log: %s", p.name(), p.exit, lastLogLine(p.log), p.log)
		case <-timer.C:
			cancelPolls()
			wg.Wait() // lastReadyz is final now
			var lines []string
			for _, p := range ps {
				if !p.ready {
					lines = append(lines, fmt.Sprintf("%s (GET %s/readyz: %s; log: %s)",
						p.name(), c.plan.url(p.adminPort), p.lastReadyz, p.log))
				}
			}
			return fmt.Errorf("not ready after %s: %s", c.opts.readyTimeout, strings.Join(lines, "; "))
		case <-ctx.Done():
			return errInterrupted
		}
	}
	return nil
}

// pollReady asks p's /readyz at adminURL until it answers 200 (true) or
// ctx ends (false), keeping the last answer in p.lastReadyz.
func pollReady(ctx context.Context, client *http.Client, adminURL string, p *proc) bool {
	err := launch.WaitReady(ctx, client, adminURL, nil)
	if nr, ok := errors.AsType[*launch.NotReadyError](err); ok {
		p.lastReadyz = nr.Last
	}
	return err == nil
}

// supervise waits for ctx to end, reporting each process that exits.
// Nothing is restarted: a test kills and restarts processes itself.
func (c *cluster) supervise(ctx context.Context) {
	for {
		select {
		case p := <-c.exits:
			c.exited(p)
			if !p.stopping {
				fmt.Fprintf(c.stderr, "strata dev: %s exited (%s); restart it with the argv in cluster.json\n", p.name(), p.exit)
			}
		case req := <-c.requests:
			c.handle(ctx, req)
		case <-ctx.Done():
			return
		}
	}
}

// exited records that p has ended and rewrites cluster.json.
func (c *cluster) exited(p *proc) {
	p.running = false
	p.exit = exitText(p.waitErr)
	if err := c.writeClusterFile(); err != nil {
		fmt.Fprintf(c.stderr, "strata dev: %v\n", err)
	}
}

// stop ends every process: first the gateway and the storage nodes, then
// the controllers (so storage nodes can still reach them while shutting
// down). Each phase sends SIGTERM and waits up to stopTimeout before
// SIGKILL; a closed kill skips the wait. It returns once every child has
// been waited for, and leaves cluster.json saying nothing runs.
func (c *cluster) stop(kill <-chan struct{}) {
	fmt.Fprintln(c.stdout, "strata dev: stopping (Ctrl-C again to kill at once)")
	close(c.stopped)
	c.closeControl()
	var data, ctrls []*proc
	for _, p := range c.procs {
		if p.service == serviceController {
			ctrls = append(ctrls, p)
		} else {
			data = append(data, p)
		}
	}
	for _, phase := range [][]*proc{data, ctrls} {
		c.stopPhase(phase, kill)
	}
	c.ready = false
	for _, p := range c.procs {
		if p.running {
			p.running = false
			p.exit = exitText(p.waitErr)
		}
	}
	if err := c.writeClusterFile(); err != nil {
		fmt.Fprintf(c.stderr, "strata dev: %v\n", err)
	}
	fmt.Fprintln(c.stdout, "strata dev: stopped")
}

func (c *cluster) stopPhase(ps []*proc, kill <-chan struct{}) {
	for _, p := range ps {
		if !isDone(p) {
			terminate(p.cmd.Process)
		}
	}
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	for _, p := range ps {
		select {
		case <-p.done:
			continue
		case <-deadline.C:
		case <-kill:
		}
		for _, q := range ps {
			if !isDone(q) {
				fmt.Fprintf(c.stderr, "strata dev: %s did not stop; killing it\n", q.name())
				q.cmd.Process.Kill()
			}
		}
		break
	}
	for _, p := range ps {
		<-p.done
	}
}

func isDone(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate asks a process to shut down gracefully; where SIGTERM cannot
// be sent (Windows) it kills it.
func terminate(p *os.Process) {
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.Kill()
	}
}

// writeClusterFile rewrites DIR/cluster.json from the current state.
func (c *cluster) writeClusterFile() error {
	f := &clusterFile{
		Dir:         c.opts.dir,
		BasePort:    c.opts.basePort,
		Gateway:     c.plan.url(c.plan.gateways[0].port),
		Gateways:    c.plan.gatewayURLs(),
		Controllers: c.plan.controllerURLs(),
		PID:         os.Getpid(),
		Ready:       c.ready,
		Control:     c.controlPath,
		Processes:   []processEntry{},
	}
	if c.plan.secure {
		f.Secure = true
		f.TLSCA, _ = caFiles(c.opts.dir)
		f.AdminEnv = filepath.Join(c.opts.dir, adminEnvName)
	}
	f.Postgres = c.plan.postgres
	f.KafkaBootstrap = c.plan.kafkaBootstrap()
	if f.KafkaBootstrap != "" {
		f.KafkaSecurityProtocol = "PLAINTEXT"
		if c.plan.secure {
			f.KafkaSecurityProtocol = "SASL_SSL"
		}
	}
	for _, p := range c.procs {
		var kafka string
		if p.kafkaPort != 0 {
			kafka = hostPort(p.kafkaPort)
		}
		f.Processes = append(f.Processes, processEntry{
			KafkaAddress: kafka,
			Service:      p.service,
			ID:           p.id,
			PID:          p.pid,
			Running:      p.running,
			Exit:         p.exit,
			Address:      hostPort(p.port),
			URL:          c.plan.url(p.port),
			AdminAddress: hostPort(p.adminPort),
			DataDir:      p.dataDir,
			EtcdClient:   p.etcdClient,
			Argv:         p.argv,
			Log:          p.log,
		})
	}
	return writeClusterFile(c.opts.dir, f)
}

// printReady prints the block that ends a successful start.
func (c *cluster) printReady() {
	w := c.stdout
	gw := c.plan.url(c.plan.gateways[0].port)
	fmt.Fprintf(w, "\nstrata dev: ready after %s\n", c.elapsed())
	fmt.Fprintf(w, "  gateway       %s\n", gw)
	for _, g := range c.plan.gatewayURLs()[1:] {
		fmt.Fprintf(w, "  gateway       %s\n", g)
	}
	fmt.Fprintf(w, "  console       %s/console/\n", gw)
	fmt.Fprintf(w, "  cluster.json  %s\n", c.opts.dir+string(os.PathSeparator)+clusterFileName)
	if c.plan.secure {
		fmt.Fprintf(w, "  audit log     %s   # authentication failures, denied requests, user, ACL and quota changes\n",
			filepath.Join(c.opts.dir, "logs", "*.audit.log"))
	}
	fmt.Fprintf(w, "\nnext steps, in another terminal:\n")
	if dir, ok := strataNotOnPath(); ok {
		fmt.Fprintf(w, "  export PATH=%s:$PATH\n", dir)
	}
	switch {
	case c.plan.secure:
		fmt.Fprintf(w, "  source %s   # the admin's credentials: STRATA_GATEWAY, STRATA_TLS_CA, STRATA_TLS_CERT, STRATA_TLS_KEY\n",
			shellQuote(filepath.Join(c.opts.dir, adminEnvName)))
	case c.opts.basePort != DefaultBasePort:
		fmt.Fprintf(w, "  export STRATA_GATEWAY=%s\n", gw)
	}
	fmt.Fprintf(w, "  strata topic create orders -p 12 -r %d\n", min(3, c.opts.storageNodes))
	fmt.Fprintf(w, "  seq 10 | strata produce orders\n")
	fmt.Fprintf(w, "  strata consume orders -e\n")
	if kb := c.plan.kafkaBootstrap(); kb != "" && c.plan.secure {
		ca, _ := caFiles(c.opts.dir)
		cert, key := certFiles(c.opts.dir, adminUser)
		fmt.Fprintf(w, "  kcat -b %s -X security.protocol=SSL -X ssl.ca.location=%s -X ssl.certificate.location=%s -X ssl.key.location=%s -L   # as the admin, by its certificate\n",
			kb, shellQuote(ca), shellQuote(cert), shellQuote(key))
		fmt.Fprintf(w, "  strata user create alice > alice.env   # then, as alice with her token (SASL PLAIN, username = the user):\n")
		fmt.Fprintf(w, "  kcat -b %s -X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=\"$(cut -d= -f2- alice.env)\" -X ssl.ca.location=%s -L\n",
			kb, shellQuote(ca))
	} else if kb != "" {
		fmt.Fprintf(w, "  kcat -b %s -L            # Kafka clients bootstrap from %s\n", kb, kb)
	}
	fmt.Fprintf(w, "\nCtrl-C stops the cluster.\n")
}

// strataNotOnPath returns the directory of the running strata binary when
// a plain `strata` on PATH would not find it (as after `make run`, which
// runs bin/strata), so the next steps can be pasted as they are.
func strataNotOnPath() (string, bool) {
	exe, err := os.Executable()
	if err != nil {
		return "", false
	}
	if found, err := exec.LookPath("strata"); err == nil {
		if same, err := filepath.EvalSymlinks(found); err == nil {
			if self, err := filepath.EvalSymlinks(exe); err == nil && same == self {
				return "", false
			}
		}
	}
	return filepath.Dir(exe), true
}

func (c *cluster) elapsed() string {
	return time.Since(c.start).Round(100 * time.Millisecond).String()
}

// exitText says how a process ended: "exit status 1", "signal: killed".
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}

// lastLogLine returns ": " and the last non-empty line of the log file
// (shortened), which is usually why a process exited at start; or "".
func lastLogLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), tail)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "--- strata dev ") {
			last = l
		}
	}
	if last == "" {
		return ""
	}
	const max = 300
	if len(last) > max {
		last = last[:max] + "..."
	}
	return ": " + last
}

// oneLine joins the non-empty lines of s with " / ".
func oneLine(s string) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " / ")
}

// quoteArgv renders argv for the log header, quoting what a shell would
// split.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
