package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one process the demo started. Its stdout and stderr go, line by
// line, to its log file under the demo's directory, to the terminal
// (prefixed with its name) when forward is set, and to onLine.
type proc struct {
	name string
	argv []string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its output is read
	err  error         // Wait's error, set before done closes
}

// start runs argv with env added to the demo's environment.
func (d *demo) start(name string, argv []string, env []string, forward bool, onLine func(string)) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(d.logs, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	w.Close() // the child holds its own copy
	p := &proc{name: name, argv: argv, cmd: cmd, done: make(chan struct{})}
	var read sync.WaitGroup
	read.Go(func() {
		defer logf.Close()
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if forward {
				d.printf("  %-10s| %s", name, line)
			}
			if onLine != nil {
				onLine(line)
			}
		}
		_, _ = io.Copy(logf, r) // a last line too long for the scanner
	})
	go func() {
		p.err = cmd.Wait()
		read.Wait()
		close(p.done)
	}()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	return p, nil
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until p is gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends sig, waits up to grace for p to exit, then kills it.
func (p *proc) stop(sig os.Signal, grace time.Duration) {
	if p.exited() {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.kill()
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// exitText says how p ended.
func (p *proc) exitText() string {
	if p.err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ProcessState.String()
	}
	return p.err.Error()
}
