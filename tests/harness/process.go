// Package harness builds Strata's binaries and runs them as real OS
// processes for cross-process tests: start, wait for a line or a port, kill
// with SIGKILL, pause with SIGSTOP, and restart with the same argv.
// StartCluster (cluster.go) runs a whole controller quorum and storage
// nodes on loopback ports and gives Connect clients and partition-state
// helpers for them; with ClusterConfig.Secure every process runs with
// TLS, authentication and ACLs, and tests call as the principals
// security.go makes.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
)

// Build compiles the Go package at pkg (an import path or a path relative to
// the tests module, like "./cmd/logwriter") into dir and returns the binary
// path. Build failures fail the test with the compiler output.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	return build(t, dir, pkg)
}

// build is Build with more go build flags.
func build(t testing.TB, dir, pkg string, flags ...string) string {
	t.Helper()
	name := filepath.Base(pkg)
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("harness: go build %s: %v\n%s", pkg, err, buf.String())
	}
	return out
}

// Process is one running binary. Its stdout is kept line by line so a test
// can read what the process reported; stderr goes to the test log. Methods
// are safe for concurrent use.
type Process struct {
	t     testing.TB
	name  string
	argv  []string
	env   []string
	setup func(*exec.Cmd) // see StartWith; nil for Start

	stderr *testWriter // forwards stderr to the test log and keeps its tail

	mu      sync.Mutex
	cmd     *exec.Cmd
	stdout  *stdoutReader // the current run's stdout; its bytes leave the pipe only under mu
	lines   []string      // stdout lines of the current run
	partial []byte        // stdout bytes after the last newline
	notify  chan struct{} // closed and replaced when lines grow or the run ends
	done    chan struct{} // closed when the current run has exited
	err     error         // exit status of the finished run
}

// Start runs argv[0] with the remaining arguments and env added to the
// test's environment. The process is killed when the test ends.
func Start(t testing.TB, name string, argv []string, env ...string) *Process {
	t.Helper()
	return StartWith(t, name, argv, nil, env...)
}

// StartWith is Start with setup called on the command of every run (the
// first and each Restart) just before it starts, for what Start leaves at
// its zero value: SysProcAttr (a cgroup to start in, say) or ExtraFiles.
// setup must leave Path, Args, Env, Stdout and Stderr alone; the process
// depends on them. A nil setup makes StartWith the same as Start.
func StartWith(t testing.TB, name string, argv []string, setup func(*exec.Cmd), env ...string) *Process {
	t.Helper()
	p := &Process{t: t, name: name, argv: argv, env: env, setup: setup}
	p.stderr = &testWriter{t: t, prefix: name + ": "}
	p.start()
	t.Cleanup(func() { p.Kill() })
	return p
}

func (p *Process) start() {
	p.t.Helper()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = p.stderr
	// An os.Pipe rather than cmd.StdoutPipe: the read end must be an
	// *os.File we own, so that reads can happen under p.mu (see
	// stdoutReader) and it is closed only after the last read.
	r, w, err := os.Pipe()
	if err != nil {
		p.t.Fatalf("harness: %s: %v", p.name, err)
	}
	cmd.Stdout = w
	if p.setup != nil {
		p.setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		p.t.Fatalf("harness: start %s: %v", p.name, err)
	}
	w.Close() // the child holds its own copy
	out, err := newStdoutReader(r)
	if err != nil {
		r.Close()
		p.t.Fatalf("harness: %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.cmd, p.stdout, p.lines, p.partial, p.err = cmd, out, nil, nil, nil
	p.notify, p.done = make(chan struct{}), make(chan struct{})
	done := p.done
	p.mu.Unlock()

	go func() {
		// Each read takes bytes out of the pipe and into p.lines in one
		// step under p.mu, so that once the pipe is empty (Stop checks
		// that under p.mu) Lines holds every line the process wrote.
		for out.read(&p.mu, p.addOutputLocked) {
		}
		out.close()
		p.mu.Lock()
		if len(p.partial) > 0 { // a last line without its newline
			p.addOutputLocked([]byte("\n"))
		}
		p.mu.Unlock()
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		close(p.notify)
		p.notify = make(chan struct{})
		p.mu.Unlock()
		close(done)
	}()
}

// addOutputLocked appends stdout bytes: complete lines go to p.lines,
// a trailing partial line waits for its newline.
func (p *Process) addOutputLocked(b []byte) {
	p.partial = append(p.partial, b...)
	grew := false
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lines = append(p.lines, strings.TrimRight(string(p.partial[:i]), "\r"))
		p.partial = p.partial[i+1:]
		grew = true
	}
	if grew {
		close(p.notify)
		p.notify = make(chan struct{})
	}
}

// Pid is the OS process id of the current run.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Lines returns a copy of the stdout lines seen so far in the current run.
func (p *Process) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// WaitLine waits until a stdout line satisfies match, and returns it. It
// fails the test if the process exits first or ctx ends.
func (p *Process) WaitLine(ctx context.Context, match func(string) bool) string {
	p.t.Helper()
	line, exited := p.WaitLineOrExit(ctx, match)
	if exited {
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		p.t.Fatalf("harness: %s exited (%v) before the awaited line", p.name, err)
	}
	return line
}

// WaitLineOrExit waits until a stdout line satisfies match and returns
// it, or returns exited true when the process exits first (every line it
// printed was checked). It fails the test if ctx ends first.
func (p *Process) WaitLineOrExit(ctx context.Context, match func(string) bool) (line string, exited bool) {
	p.t.Helper()
	seen := 0
	for {
		p.mu.Lock()
		lines, notify, done := p.lines, p.notify, p.done
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if match(lines[seen]) {
				return lines[seen], false
			}
		}
		select {
		case <-done:
			// done closes after the last line is in; check those first.
			if seen == len(p.Lines()) {
				return "", true
			}
		case <-ctx.Done():
			p.t.Fatalf("harness: %s: waiting for a line: %v", p.name, ctx.Err())
		case <-notify:
		}
	}
}

// WaitLines waits until the process has printed at least n stdout lines.
func (p *Process) WaitLines(ctx context.Context, n int) {
	p.t.Helper()
	count := 0
	p.WaitLine(ctx, func(string) bool { count++; return count >= n })
}

// Wait waits for the current run to exit and returns its exit error.
func (p *Process) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL and waits for the process to be gone. Killing a process
// that has exited is a no-op.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	<-done
}

// Exited reports whether the current run has ended.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StderrTail returns the last stderr lines the process wrote, over all its
// runs (at most stderrTailLines), for failure messages.
func (p *Process) StderrTail() string { return p.stderr.tailText() }

// Name is the name the process was started under, for messages.
func (p *Process) Name() string { return p.name }

// stopTimeout bounds Stop's wait for a process to be still. Stopping
// takes microseconds on an idle machine; the bound is for one whose cores
// are busy with other work.
const stopTimeout = 30 * time.Second

// Stop pauses the process with SIGSTOP and returns once it is still:
// every one of its threads is stopped, so it serves nothing more, and
// every line it wrote to stdout before stopping is in Lines. kill(2)
// alone guarantees neither (see threadsStopped). Where the platform
// cannot observe these it returns once the signal is sent. It fails the
// test if the process neither stops nor exits within stopTimeout.
func (p *Process) Stop() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	testwait.Until(p.t, stopTimeout, p.name+" to be stopped by SIGSTOP with its stdout read", func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-p.done:
			return nil // exited: still, and its output is complete
		default:
		}
		stopped, err := threadsStopped(p.cmd.Process.Pid)
		switch {
		case errors.Is(err, errUnobservable):
			return nil
		case err != nil:
			return err
		case !stopped:
			return errors.New("a thread is still running")
		}
		n, err := p.stdout.unread()
		switch {
		case errors.Is(err, errUnobservable):
			return nil
		case err != nil:
			return err
		case n > 0:
			return fmt.Errorf("%d bytes of stdout not read yet", n)
		}
		return nil
	})
}

// Continue resumes a process paused by Stop. Its threads are runnable
// again when Continue returns (the kernel wakes them as SIGCONT is sent).
func (p *Process) Continue() { p.signal(syscall.SIGCONT) }

// Restart starts the same argv again after the previous run has exited.
func (p *Process) Restart() {
	p.t.Helper()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	default:
		p.t.Fatalf("harness: restart %s: still running", p.name)
	}
	p.start()
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
}

// stderrTailLines is how many stderr lines a Process keeps for
// StderrTail.
const stderrTailLines = 40

// testWriter forwards a process's stderr to the test log, a line at a time,
// so the log interleaves sensibly with the test's own messages, and keeps
// the last stderrTailLines lines.
type testWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
	tail   []string
	raced  bool // a race report was seen, and the test failed for it
}

// raceWarning is the first line of a race detector report.
const raceWarning = "WARNING: DATA RACE"

func (w *testWriter) tailText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.tail, "\n")
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(w.buf[:i]), "\r")
		w.t.Log(w.prefix + line)
		if line == raceWarning && !w.raced {
			// A process built with -race (ClusterConfig.Race) found one;
			// its report follows in the log.
			w.raced = true
			w.t.Errorf("harness: %sthe race detector found a data race (its report follows)", w.prefix)
		}
		if len(w.tail) == stderrTailLines {
			w.tail = append(w.tail[:0], w.tail[1:]...)
		}
		w.tail = append(w.tail, line)
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

var _ io.Writer = (*testWriter)(nil)

// Deadline returns a context that ends after d or when the test ends.
func Deadline(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
