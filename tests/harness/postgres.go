package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresRoot is where Debian and Ubuntu install PostgreSQL's server
// binaries, one directory per major version (<root>/<version>/bin).
const postgresRoot = "/usr/lib/postgresql"

// postgresOSUser is the account the server runs as: PostgreSQL refuses to
// run as root, which the tests run as.
const postgresOSUser = "postgres"

// postgresStartTimeout bounds initdb and the first start in StartPostgres.
// Both take a second or two on an idle machine; the bound is for one whose
// cores are busy with other work.
const postgresStartTimeout = 2 * time.Minute

// postgresStopTimeout bounds the stop when the test ends. An immediate
// shutdown takes milliseconds; the postmaster itself sends SIGKILL to
// children that ignore its SIGQUIT for 5s.
const postgresStopTimeout = 30 * time.Second

// postgresLogTailLines is how many lines of the server log go into an
// error.
const postgresLogTailLines = 30

// StopMode is how Postgres.Stop shuts the server down.
type StopMode int

const (
	// Immediate is `pg_ctl stop -m immediate` (SIGQUIT to the
	// postmaster): every backend is killed at once and nothing is
	// checkpointed, so the next start runs crash recovery from the WAL.
	// Committed transactions survive it (fsync and synchronous_commit are
	// on); anything in flight is lost. It is the zero StopMode.
	Immediate StopMode = iota
	// Fast is `pg_ctl stop -m fast` (SIGINT): sessions are terminated,
	// open transactions rolled back, and a checkpoint is written, so the
	// next start needs no recovery.
	Fast
)

func (m StopMode) String() string {
	switch m {
	case Immediate:
		return "immediate"
	case Fast:
		return "fast"
	}
	return "StopMode(" + strconv.Itoa(int(m)) + ")"
}

// Postgres is a private PostgreSQL server for one test, which the test may
// stop, crash and restart without disturbing the machine's shared server
// (127.0.0.1:5432, used by other packages' tests at the same time).
//
// The server runs as the postgres OS user, from the highest version under
// /usr/lib/postgresql, over a fresh cluster made by initdb (trust
// authentication, superuser postgres). It listens on 127.0.0.1 only, on a
// port from FreePorts that stays the same across restarts, with its unix
// socket in the data directory. fsync and synchronous_commit are on, so a
// committed transaction survives an Immediate stop as it would a crash;
// shared_buffers is small. Its stdout and stderr go to server.log in the
// data directory, whose tail errors quote.
//
// The methods that act on the server (Start, Stop, Restart,
// CreateDatabase) return errors rather than failing the test, so a fault
// injector may call them from a goroutine of its own. Methods are safe for
// concurrent use; Start, Stop and Restart run one at a time. When the test
// ends the server is stopped (Immediate) and every process of it is gone
// before the data directory is removed.
type Postgres struct {
	t       testing.TB
	bin     string // directory of initdb and postgres
	dataDir string
	logPath string
	cred    *syscall.Credential // the postgres OS user
	spawn   *spawnThread

	// port is chosen by StartPostgres before the first start and never
	// changes afterwards.
	port int

	mu  sync.Mutex   // held for the whole of a Start or Stop
	run *postgresRun // the running postmaster; nil when stopped
}

// postgresRun is one run of the postmaster.
type postgresRun struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd's exit status, written before done is closed
}

// StartPostgres creates a cluster with initdb in a directory of the test's
// and starts a server on it, waiting until it accepts connections. It fails
// the test (never skips) when no server binaries are installed, when the
// postgres OS user does not exist, or when the server does not start.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		t.Fatalf("%v", err)
	}
	u, err := user.Lookup(postgresOSUser)
	if err != nil {
		t.Fatalf("harness: postgres: the %q OS user, which the server runs as, is missing: %v", postgresOSUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("harness: postgres: user %s: %v", postgresOSUser, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	base := postgresBaseDir(t, cred)

	p := &Postgres{
		t:       t,
		bin:     bin,
		dataDir: filepath.Join(base, "data"),
		cred:    cred,
	}
	p.logPath = filepath.Join(p.dataDir, "server.log")
	ctx, cancel := context.WithTimeout(context.Background(), postgresStartTimeout)
	defer cancel()
	if err := p.initdb(ctx, base); err != nil {
		t.Fatalf("%v", err)
	}
	p.spawn = newSpawnThread()
	t.Cleanup(p.cleanup)
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(t, 1)
		if err != nil {
			t.Fatalf("harness: postgres: %v", err)
		}
		p.port = ports[0]
		err = p.Start(ctx)
		if err == nil {
			t.Logf("harness: postgres %s started on 127.0.0.1:%d, data in %s", filepath.Base(filepath.Dir(bin)), p.port, p.dataDir)
			return p
		}
		if errors.Is(err, errPortInUse) && attempt < 3 {
			t.Logf("harness: attempt %d: %v; starting again on another port", attempt, err)
			continue
		}
		t.Fatalf("%v", err)
	}
}

// postgresBinDir returns the bin directory of the highest PostgreSQL
// version installed under postgresRoot.
func postgresBinDir() (string, error) {
	found, _ := filepath.Glob(filepath.Join(postgresRoot, "*", "bin", "postgres"))
	var best string
	var bestVer []int
	for _, f := range found {
		ver, ok := parseVersion(filepath.Base(filepath.Dir(filepath.Dir(f))))
		if !ok {
			continue
		}
		dir := filepath.Dir(f)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			continue
		}
		if best == "" || slices.Compare(ver, bestVer) > 0 {
			best, bestVer = dir, ver
		}
	}
	if best == "" {
		return "", fmt.Errorf("harness: postgres: no PostgreSQL server binaries (initdb, postgres) under %s/<version>/bin; install the postgresql package", postgresRoot)
	}
	return best, nil
}

// parseVersion reads a directory name such as "16" or "9.6".
func parseVersion(s string) ([]int, bool) {
	var v []int
	for f := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		v = append(v, n)
	}
	return v, true
}

// maxSocketPath is the longest unix socket path the kernel takes
// (sizeof(sun_path) less the terminating NUL).
const maxSocketPath = 107

// postgresBaseDir returns an empty directory owned by cred's user that the
// user can reach, and that is short enough for the server's socket path:
// the test's TempDir when its parents let the user through, otherwise one
// made under the system's temporary directory (testing makes TempDir's
// parent mode 0700, so the fallback is the usual case for root). Either is
// removed when the test ends.
func postgresBaseDir(t testing.TB, cred *syscall.Credential) string {
	t.Helper()
	socket := len("/data/.s.PGSQL.65535")
	dir := t.TempDir()
	err := traversable(filepath.Dir(dir), cred)
	if err == nil && len(dir)+socket > maxSocketPath {
		err = fmt.Errorf("%s is too long a path for the server's unix socket", dir)
	}
	if err != nil {
		t.Logf("harness: postgres: not using the test's directory: %v", err)
		dir, err = os.MkdirTemp("", "strata-pg-")
		if err != nil {
			t.Fatalf("harness: postgres: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := traversable(filepath.Dir(dir), cred); err != nil {
			t.Fatalf("harness: postgres: %v", err)
		}
		if len(dir)+socket > maxSocketPath {
			t.Fatalf("harness: postgres: %s is too long a path for the server's unix socket", dir)
		}
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatalf("harness: postgres: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatalf("harness: postgres: %v", err)
	}
	return dir
}

// traversable reports, as an error naming the first that is not, whether
// dir and each of its parents let cred's user (with no supplementary
// groups) search them.
func traversable(dir string, cred *syscall.Credential) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // cannot tell; let initdb say
		}
		perm := fi.Mode().Perm()
		var ok2 bool
		switch {
		case st.Uid == cred.Uid:
			ok2 = perm&0o100 != 0
		case st.Gid == cred.Gid:
			ok2 = perm&0o010 != 0
		default:
			ok2 = perm&0o001 != 0
		}
		if !ok2 {
			return fmt.Errorf("user %s cannot enter %s (mode %v)", postgresOSUser, d, perm)
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

// initdb creates the cluster in p.dataDir.
func (p *Postgres) initdb(ctx context.Context, base string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "initdb"),
		"-D", p.dataDir,
		"--auth=trust", "-U", "postgres",
		"--no-sync", // the cluster's files are made durable by the first checkpoint
		"-E", "UTF8", "--locale=C")
	cmd.Dir = base // the user cannot enter the test's working directory
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("harness: postgres: initdb: %v\n%s", err, out.String())
	}
	return nil
}

// DSN is the URL of database db on the server, as user postgres (trust
// authentication, no TLS).
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// Addr is the server's host:port.
func (p *Postgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// DataDir is the cluster's data directory, owned by the postgres OS user.
func (p *Postgres) DataDir() string { return p.dataDir }

// LogTail returns the last lines of the server's log, for failure
// messages.
func (p *Postgres) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > postgresLogTailLines {
		lines = lines[len(lines)-postgresLogTailLines:]
	}
	return strings.Join(lines, "\n")
}

// CreateDatabase creates database name on the server.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, p.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("harness: postgres: create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("harness: postgres: create database %s: %w", name, err)
	}
	return nil
}

// Restart stops the server with mode and starts it again, returning once it
// accepts connections; after an Immediate stop that includes crash
// recovery. ctx bounds the whole of it.
func (p *Postgres) Restart(ctx context.Context, mode StopMode) error {
	p.t.Helper()
	p.t.Logf("harness: postgres %s: restart (%s)", p.Addr(), mode)
	if err := p.Stop(ctx, mode); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Start starts the server and returns once it accepts connections, or
// with an error quoting the server log when it exits first or ctx ends
// (the error then names the last failed connection attempt, and the
// server is left running). Starting a running server does nothing.
func (p *Postgres) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		if err := p.startLocked(); err != nil {
			return err
		}
	}
	return p.waitReadyLocked(ctx)
}

func (p *Postgres) startLocked() error {
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: postgres: %w", err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(filepath.Join(p.bin, "postgres"),
		"-D", p.dataDir,
		"-p", strconv.Itoa(p.port),
		"-k", p.dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on", // what makes an Immediate stop a crash test
		"-c", "shared_buffers=16MB",
		"-c", "logging_collector=off",
	)
	cmd.Dir = p.dataDir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = postgresSysProcAttr(p.cred)
	if err := p.spawn.do(cmd.Start); err != nil {
		return fmt.Errorf("harness: postgres: start: %w", err)
	}
	run := &postgresRun{cmd: cmd, done: make(chan struct{})}
	p.run = run
	go func() {
		run.err = cmd.Wait()
		close(run.done)
	}()
	return nil
}

// waitReadyLocked polls with a connection until one succeeds, the server
// exits or ctx ends.
func (p *Postgres) waitReadyLocked(ctx context.Context) error {
	run := p.run
	start := time.Now()
	wait := 10 * time.Millisecond
	var last error
	for {
		select {
		case <-run.done:
			tail := p.LogTail()
			err := fmt.Errorf("harness: postgres %s exited before accepting connections (%v); server log:\n%s",
				p.Addr(), run.err, tail)
			if strings.Contains(tail, "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			p.run = nil
			return err
		default:
		}
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(attempt, p.DSN("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: postgres %s: not accepting connections after %v (last attempt: %v); server log:\n%s",
				p.Addr(), time.Since(start).Round(time.Millisecond), last, p.LogTail())
		case <-run.done:
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Stop shuts the server down with mode and returns once the postmaster
// and every process it started are gone (Immediate: killed; Fast: ended
// after a checkpoint), so a Start after it finds the data directory free.
// It returns an error quoting the server log when ctx ends first (the
// server may then still be running). Stopping a stopped server does
// nothing.
func (p *Postgres) Stop(ctx context.Context, mode StopMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	run := p.run
	if run == nil {
		return nil
	}
	sig := syscall.SIGQUIT
	switch mode {
	case Immediate:
	case Fast:
		sig = syscall.SIGINT
	default:
		return fmt.Errorf("harness: postgres: unknown stop mode %v", mode)
	}
	_ = run.cmd.Process.Signal(sig)
	select {
	case <-run.done:
	case <-ctx.Done():
		return fmt.Errorf("harness: postgres %s: not stopped (%s) before %v; server log:\n%s",
			p.Addr(), mode, ctx.Err(), p.LogTail())
	}
	p.run = nil
	// The postmaster exits only after its children; a process left in the
	// data directory would be a backend it lost track of.
	wait := 10 * time.Millisecond
	for {
		left := p.processes()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: postgres %s: processes %v still run in the data directory after the postmaster exited", p.Addr(), left)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// processes returns the ids of the processes whose working directory is
// the data directory: the server changes into it at start, and each
// process it forks inherits it.
func (p *Postgres) processes() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == p.dataDir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cleanup stops the server when the test ends. A server that does not stop
// in time, and any process it leaves in its data directory, is killed.
func (p *Postgres) cleanup() {
	defer p.spawn.close()
	ctx, cancel := context.WithTimeout(context.Background(), postgresStopTimeout)
	defer cancel()
	err := p.Stop(ctx, Immediate)
	if err == nil {
		return
	}
	p.t.Errorf("%v", err)
	p.mu.Lock()
	if p.run != nil {
		_ = p.run.cmd.Process.Kill()
		<-p.run.done
		p.run = nil
	}
	p.mu.Unlock()
	for _, pid := range p.processes() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// spawnThread starts processes from one OS thread that no other goroutine
// runs on until close. The kernel sends a child its parent-death signal
// (postgresSysProcAttr) when the thread that forked it exits, not the
// process; Go ends a thread when a goroutine locked to it exits, so a
// child forked from an ordinary thread could be signalled by a test that
// locks a goroutine to that thread later. With a thread of its own, the
// server is signalled only when the test binary dies (a timeout, a
// SIGKILL), which is when it must not outlive it.
type spawnThread struct {
	reqs chan func()
	once sync.Once
}

func newSpawnThread() *spawnThread {
	s := &spawnThread{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

// do runs start on the thread and returns its error.
func (s *spawnThread) do(start func() error) error {
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- start() }
	return <-errc
}

// close ends the thread's goroutine, after the last child has exited.
// Safe to call twice.
func (s *spawnThread) close() { s.once.Do(func() { close(s.reqs) }) }
