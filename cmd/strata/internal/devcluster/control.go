package devcluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The control socket is how a separate `strata dev scale` hands work to
// the running `strata dev`, which supervises every child: it owns the
// processes and cluster.json, so it alone starts and stops them.
//
// Protocol (part of the contract between strata dev and strata dev scale
// of the same build): a client connects to the Unix socket named by
// cluster.json's "control", writes one JSON request line, and reads JSON
// lines until the last one: {"line":"..."} is progress to print, and the
// last is {"ok":true} or {"error":"one line"}. One request per connection;
// requests run one at a time, in the supervisor's own goroutine.

// controlRequest is one request on the control socket.
type controlRequest struct {
	// Op is "scale".
	Op string `json:"op"`
	// StorageNodes is the storage node count wanted (1..9).
	StorageNodes int `json:"storage_nodes"`
}

// controlReply is one line of a reply.
type controlReply struct {
	Line  string `json:"line,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// pendingRequest is a request handed to the supervisor with a way to
// answer.
type pendingRequest struct {
	req   controlRequest
	reply func(controlReply)
	done  chan struct{}
}

// maxSocketPath is a safe length for a Unix socket path (the kernel limit
// is 104 to 108 bytes depending on the system).
const maxSocketPath = 100

// controlPath returns where dir's control socket goes: DIR/control.sock,
// or, when that path is too long for a Unix socket, a file in the
// temporary directory named by a hash of dir.
func controlPath(dir string) string {
	p := filepath.Join(dir, "control.sock")
	if len(p) <= maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), "strata-dev-"+hex.EncodeToString(sum[:6])+".sock")
}

// openControl listens on the control socket and hands each request to the
// supervisor through c.requests until ctx ends. A stale socket file (from
// a strata dev that was killed) is replaced.
func (c *cluster) openControl(ctx context.Context) error {
	path := controlPath(c.opts.dir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	c.controlPath = path
	c.controlLn = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serveControl(ctx, conn)
		}
	}()
	return nil
}

// closeControl stops the control socket and removes its file.
func (c *cluster) closeControl() {
	if c.controlLn != nil {
		c.controlLn.Close()
		os.Remove(c.controlPath)
		c.controlLn, c.controlPath = nil, ""
	}
}

func (c *cluster) serveControl(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	enc := json.NewEncoder(conn)
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	var req controlRequest
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	if err != nil {
		enc.Encode(controlReply{Error: "bad request on the control socket"})
		return
	}
	p := &pendingRequest{req: req, done: make(chan struct{})}
	p.reply = func(r controlReply) { enc.Encode(r) }
	select {
	case c.requests <- p:
	case <-ctx.Done():
		enc.Encode(controlReply{Error: "strata dev is stopping"})
		return
	}
	<-p.done
}

// handle runs one control request in the supervisor's goroutine.
func (c *cluster) handle(ctx context.Context, p *pendingRequest) {
	defer close(p.done)
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		fmt.Fprintln(c.stdout, line)
		p.reply(controlReply{Line: line})
	}
	var err error
	switch p.req.Op {
	case "scale":
		err = c.scaleTo(ctx, p.req.StorageNodes, say)
	default:
		err = fmt.Errorf("unknown control request %q", p.req.Op)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "strata dev: %v\n", err)
		p.reply(controlReply{Error: err.Error()})
		return
	}
	p.reply(controlReply{OK: true})
}

// scaleTo starts storage nodes up to n (ids after the highest one) and
// waits until they are ready, or stops the ones above n (SIGTERM, then
// SIGKILL after stopTimeout) and drops them from cluster.json. Their data
// directories stay, so scaling up again brings them back with their data.
func (c *cluster) scaleTo(ctx context.Context, n int, say func(string, ...any)) error {
	if n < 1 || n > maxStorageNodes {
		return fmt.Errorf("--storage-nodes %d: must be 1..%d", n, maxStorageNodes)
	}
	have := len(c.plan.storage)
	switch {
	case n == have:
		say("strata dev: already %d storage node(s)", n)
		return nil
	case n > have:
		pl := makePlan(c.opts.dir, c.opts.basePort, c.opts.controllers, n, c.opts.gateways, c.bins, c.plan.secure)
		specs := pl.storage[have:]
		for _, s := range specs {
			for _, pu := range s.ports() {
				ln, err := net.Listen("tcp", hostPort(pu.port))
				if err != nil {
					return fmt.Errorf("port %d (%s) is in use; stop what uses it", pu.port, pu.what)
				}
				ln.Close()
			}
		}
		var started []*proc
		for _, s := range specs {
			// A node of this id started before (and stopped) leaves its
			// entry for the new one.
			c.procs = slices.DeleteFunc(c.procs, func(p *proc) bool { return p.name() == s.name() && !p.running })
			if c.ca != nil {
				if err := ensureServiceCert(c.opts.dir, c.ca, s); err != nil {
					return err
				}
			}
			p, err := c.startProc(s)
			if err != nil {
				return err
			}
			started = append(started, p)
			c.plan.storage = append(c.plan.storage, s)
			say("  %-13s %-24s admin %s  pid %d  log %s", p.name(), c.plan.url(p.port), hostPort(p.adminPort), p.pid, p.log)
		}
		if err := c.writeClusterFile(); err != nil {
			return err
		}
		if err := c.waitReady(ctx, started, func(p *proc) {
			fmt.Fprintf(c.stderr, "strata dev: %s exited (%s); restart it with the argv in cluster.json\n", p.name(), p.exit)
		}); err != nil {
			return err
		}
		for _, p := range started {
			say("  %-13s ready after %s", p.name(), c.elapsed())
		}
		say("strata dev: %d storage node(s) running", n)
		return c.writeClusterFile()
	default:
		var stopping []*proc
		for _, s := range c.plan.storage[n:] {
			for _, p := range c.procs {
				if p.name() == s.name() && p.running {
					p.stopping = true
					stopping = append(stopping, p)
				}
			}
		}
		c.stopPhase(stopping, nil)
		for _, p := range stopping {
			say("  %-13s stopped (%s)", p.name(), exitText(p.waitErr))
		}
		gone := c.plan.storage[n:]
		c.plan.storage = c.plan.storage[:n]
		c.procs = slices.DeleteFunc(c.procs, func(p *proc) bool {
			return p.service == serviceStorage && slices.ContainsFunc(gone, func(s procSpec) bool { return s.name() == p.name() })
		})
		say("strata dev: %d storage node(s) running", n)
		return c.writeClusterFile()
	}
}

// sendControl sends req to the strata dev whose control socket is path,
// calling line for each progress line, and returns the final error.
func sendControl(ctx context.Context, path string, req controlRequest, line func(string)) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return fmt.Errorf("cannot reach the running strata dev at %s: %v", path, err)
	}
	defer conn.Close()
	go func() {
		<-ctx.Done()
		conn.SetDeadline(time.Now())
	}()
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var r controlReply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("bad answer on the control socket: %q", strings.TrimSpace(sc.Text()))
		}
		switch {
		case r.Error != "":
			return errors.New(r.Error)
		case r.OK:
			return nil
		default:
			line(r.Line)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("strata dev closed the control socket without an answer (did it stop?)")
}
