package harness

import (
	"net"
	"sync"
	"testing"
)

// Direction names one way through a Proxy.
type Direction uint8

// The directions. Both is ToTarget|FromTarget.
const (
	ToTarget   Direction = 1 << iota // bytes from the client to the proxied service
	FromTarget                       // bytes from the proxied service back to the client
	Both       = ToTarget | FromTarget
)

// Proxy is a TCP proxy in front of one service, for fault tests in the
// style of etcd's per-member proxies: a test can hold the bytes going
// either way (a stalled link: nothing is lost, it is delivered once
// released) and cut every connection. Clients reach the service through
// Addr, which a storage node advertises in place of its own listener (see
// ClusterConfig.StorageProxies). Methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu       sync.Mutex
	held     Direction
	released chan struct{} // closed and replaced whenever a direction is released
	conns    map[net.Conn]struct{}
	closed   bool
}

// StartProxy listens on a free loopback port and forwards every connection
// to target (host:port). It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: proxy listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: target, released: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hold stops forwarding in the given directions: bytes read from then on
// wait in the proxy, on open connections and new ones alike.
func (p *Proxy) Hold(d Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held |= d
}

// Release forwards again in the given directions, held bytes first.
func (p *Proxy) Release(d Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held &^= d
	close(p.released)
	p.released = make(chan struct{})
}

// CutAll closes every open connection, as a network reset would.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes its connections. Safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.held = 0
	close(p.released)
	p.released = make(chan struct{})
	p.mu.Unlock()
	p.ln.Close()
	p.CutAll()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client, ToTarget) })
	wg.Go(func() { p.pipe(client, server, FromTarget) })
	wg.Wait()
	p.untrack(client)
	p.untrack(server)
}

// pipe copies src to dst, waiting while dir is held, and closes both ends
// when either fails.
func (p *Proxy) pipe(dst, src net.Conn, dir Direction) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitReleased(dir) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: the other side closes too
		}
	}
}

// waitReleased blocks while dir is held; false once the proxy is closed.
func (p *Proxy) waitReleased(dir Direction) bool {
	for {
		p.mu.Lock()
		held, ch, closed := p.held&dir != 0, p.released, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !held {
			return true
		}
		<-ch
	}
}
