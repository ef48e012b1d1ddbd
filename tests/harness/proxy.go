package harness

import (
	"net"
	"sync"
	"testing"
)

// Direction is one way through a Proxy.
type Direction int

// The two directions through a Proxy.
const (
	// ToServer carries what clients send: requests.
	ToServer Direction = iota
	// ToClient carries what the target sends back: answers.
	ToClient
)

func (d Direction) String() string {
	if d == ToServer {
		return "to-server"
	}
	return "to-client"
}

// Proxy is a TCP proxy on loopback in front of one target address, for
// fault tests that need a request to meet a failure at a chosen point of
// its life. Each direction can be paused (bytes are read and held, not
// delivered, until Resume) or dropped (bytes are read and discarded), and
// every connection can be reset (TCP RST to both sides) on command. The
// counters say how far a request got: Held(ToServer) > 0 means a request
// left the client but has not reached the server; Held(ToClient) > 0 means
// the server answered and the client has not seen it.
//
// Connections opened while a direction is paused or dropped start so.
// When the target refuses a connection or closes one, the client's side is
// reset, as a client of a dead process sees. The proxy stops when the test
// ends. Methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	paused  [2]bool
	dropped [2]bool
	conns   map[*proxyConn]struct{}
	closed  bool
	fwd     [2]int64 // bytes delivered, per direction
	drop    [2]int64 // bytes discarded, per direction
	wg      sync.WaitGroup
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client, server net.Conn
	pipes          [2]*proxyPipe
}

// proxyPipe is one direction of a proxyConn.
type proxyPipe struct {
	mu   sync.Mutex
	dst  net.Conn
	held []byte
}

// StartProxy listens on a free loopback port and forwards every connection
// to target (host:port).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: proxy listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			resetConn(c) // a dead target: the client sees a reset
			continue
		}
		pc := &proxyConn{client: c, server: s}
		pc.pipes[ToServer] = &proxyPipe{dst: s}
		pc.pipes[ToClient] = &proxyPipe{dst: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			resetConn(c)
			resetConn(s)
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(pc, ToServer, c)
		go p.pump(pc, ToClient, s)
	}
}

// pump copies src into the direction's pipe until src ends or fails, then
// resets both sides.
func (p *Proxy) pump(pc *proxyConn, d Direction, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pp := pc.pipes[d]
			pp.mu.Lock()
			p.mu.Lock()
			paused, dropped := p.paused[d], p.dropped[d]
			if dropped {
				p.drop[d] += int64(n)
			}
			p.mu.Unlock()
			var werr error
			switch {
			case dropped:
			case paused:
				pp.held = append(pp.held, buf[:n]...)
			default:
				werr = p.deliver(pp, d, buf[:n])
			}
			pp.mu.Unlock()
			if werr != nil {
				err = werr
			}
		}
		if err != nil {
			// Either side went away: the other sees a reset, as a client
			// of a killed process does.
			p.resetPair(pc)
			return
		}
	}
}

// deliver writes held bytes, then b, to the pipe's destination. The caller
// holds pp.mu.
func (p *Proxy) deliver(pp *proxyPipe, d Direction, b []byte) error {
	if len(pp.held) > 0 {
		if _, err := pp.dst.Write(pp.held); err != nil {
			return err
		}
		p.mu.Lock()
		p.fwd[d] += int64(len(pp.held))
		p.mu.Unlock()
		pp.held = nil
	}
	if len(b) == 0 {
		return nil
	}
	if _, err := pp.dst.Write(b); err != nil {
		return err
	}
	p.mu.Lock()
	p.fwd[d] += int64(len(b))
	p.mu.Unlock()
	return nil
}

func (p *Proxy) resetPair(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	resetConn(pc.client)
	resetConn(pc.server)
}

// resetConn closes c with a TCP RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Pause stops delivering bytes in direction d: they are read and held
// until Resume (or discarded by Reset).
func (p *Proxy) Pause(d Direction) {
	p.t.Logf("harness: proxy %s: pause %s", p.Addr(), d)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[d] = true
}

// Resume delivers what Pause held in direction d and forwards again.
func (p *Proxy) Resume(d Direction) {
	p.t.Logf("harness: proxy %s: resume %s", p.Addr(), d)
	p.mu.Lock()
	p.paused[d] = false
	var pipes []*proxyPipe
	for pc := range p.conns {
		pipes = append(pipes, pc.pipes[d])
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.mu.Lock()
		_ = p.deliver(pp, d, nil) // a failed write ends its pump, which resets the pair
		pp.mu.Unlock()
	}
}

// Drop discards bytes in direction d (on) or forwards them again (off).
// Bytes held by Pause stay held.
func (p *Proxy) Drop(d Direction, on bool) {
	p.t.Logf("harness: proxy %s: drop %s %v", p.Addr(), d, on)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped[d] = on
}

// Reset closes every open connection with a TCP RST to both sides,
// discarding held bytes: the client sees "connection reset by peer", as
// from a process killed with SIGKILL. New connections are accepted as
// before.
func (p *Proxy) Reset() {
	p.t.Logf("harness: proxy %s: reset every connection", p.Addr())
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	for _, pc := range conns {
		resetConn(pc.client)
		resetConn(pc.server)
	}
}

// Held returns the bytes read in direction d and held by Pause now.
func (p *Proxy) Held(d Direction) int64 {
	p.mu.Lock()
	var pipes []*proxyPipe
	for pc := range p.conns {
		pipes = append(pipes, pc.pipes[d])
	}
	p.mu.Unlock()
	var n int64
	for _, pp := range pipes {
		pp.mu.Lock()
		n += int64(len(pp.held))
		pp.mu.Unlock()
	}
	return n
}

// Forwarded returns the bytes delivered in direction d so far.
func (p *Proxy) Forwarded(d Direction) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fwd[d]
}

// Dropped returns the bytes discarded in direction d so far.
func (p *Proxy) Dropped(d Direction) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop[d]
}

// Close stops accepting, resets every connection and waits for the
// proxy's goroutines. Safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}
