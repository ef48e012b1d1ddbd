// Package harness builds Strata's binaries and runs them as real OS
// processes for cross-process tests: start, wait for a line or a port, kill
// with SIGKILL, pause with SIGSTOP, and restart with the same argv.
// StartCluster (cluster.go) runs a whole controller quorum and storage
// nodes on loopback ports and gives Connect clients and partition-state
// helpers for them.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles the Go package at pkg (an import path or a path relative to
// the tests module, like "./cmd/logwriter") into dir and returns the binary
// path. Build failures fail the test with the compiler output.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	name := filepath.Base(pkg)
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
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
	t    testing.TB
	name string
	argv []string
	env  []string

	stderr *testWriter // forwards stderr to the test log and keeps its tail

	mu     sync.Mutex
	cmd    *exec.Cmd
	lines  []string      // stdout lines of the current run
	notify chan struct{} // closed and replaced when lines grow or the run ends
	done   chan struct{} // closed when the current run has exited
	err    error         // exit status of the finished run
}

// Start runs argv[0] with the remaining arguments and env added to the
// test's environment. The process is killed when the test ends.
func Start(t testing.TB, name string, argv []string, env ...string) *Process {
	t.Helper()
	p := &Process{t: t, name: name, argv: argv, env: env}
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
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatalf("harness: %s: %v", p.name, err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("harness: start %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.cmd, p.lines, p.err = cmd, nil, nil
	p.notify, p.done = make(chan struct{}), make(chan struct{})
	done := p.done
	p.mu.Unlock()

	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		}
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		close(p.notify)
		p.notify = make(chan struct{})
		p.mu.Unlock()
		close(done)
	}()
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
	seen := 0
	for {
		p.mu.Lock()
		lines, notify, done := p.lines, p.notify, p.done
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if match(lines[seen]) {
				return lines[seen]
			}
		}
		select {
		case <-done:
			p.mu.Lock()
			err := p.err
			p.mu.Unlock()
			p.t.Fatalf("harness: %s exited (%v) before the awaited line", p.name, err)
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

// Stop pauses the process with SIGSTOP; Continue resumes it.
func (p *Process) Stop() { p.signal(syscall.SIGSTOP) }

// Continue resumes a process paused by Stop.
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
}

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
