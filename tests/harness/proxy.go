package harness

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
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
// its life, or a slow network. Each direction can be paused (bytes are
// read and held, not delivered, until Resume), dropped (bytes are read and
// discarded), delayed (each chunk of bytes is delivered a fixed time after
// it was read) and limited in bandwidth, and every connection can be reset
// (TCP RST to both sides) on command. The counters say how far a request
// got: Held(ToServer) > 0 means a request left the client but has not
// reached the server; Held(ToClient) > 0 means the server answered and the
// client has not seen it.
//
// How the faults combine, per direction. Every chunk read is either
// discarded, when the direction is dropped at the moment it is read
// (Dropped counts it), or queued behind the chunks read before it on the
// same connection, due at the time it was read plus the delay set then.
// Queued bytes leave in order: the first chunk goes once it is due, the
// direction is not paused and the bandwidth allows, and the next waits
// behind it even if it is due earlier (it was read after a delay was
// lowered). Held counts the queued bytes, whatever keeps them (Pause, the
// delay, the bandwidth); Forwarded counts those handed to the
// destination. So:
//   - Pause holds delayed bytes too; time paused does not add to the delay
//     (a chunk due during the pause leaves at Resume).
//   - Drop and SetDelay act on bytes read after the call: bytes already
//     queued are still delivered, at the delay they were read with.
//   - The bandwidth limits delivery, after the delay, and is shared by
//     every connection of the direction.
//   - A connection queues at most 4 MiB (proxyQueueLimit) per direction;
//     beyond that the proxy stops reading from the sender, which then
//     feels the slow link as backpressure (and a paused direction holds at
//     most that much).
//
// Connections opened while a direction is paused, dropped, delayed or
// limited start so. When the target refuses a connection the client is
// reset. When either side of a connection closes or fails, what it sent
// before is still delivered (after its delay), then both sides are reset,
// as a client of a dead process sees; bytes held by Pause at that time are
// discarded with the reset. Reset discards every queued byte at once. The
// proxy stops when the test ends. Methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	paused  [2]bool
	dropped [2]bool
	delay   [2]time.Duration
	rate    [2]tokenBucket
	conns   map[*proxyConn]struct{}
	closed  bool
	fwd     [2]int64 // bytes handed to the destination, per direction
	drop    [2]int64 // bytes discarded, per direction
	wg      sync.WaitGroup
}

// proxyQueueLimit is how many bytes one direction of a connection queues
// before the proxy stops reading from its sender.
const proxyQueueLimit = 4 << 20

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client, server net.Conn
	pipes          [2]*proxyPipe
	done           chan struct{} // closed when the pair is reset
	once           sync.Once
}

// proxyPipe is one direction of a proxyConn. Its reader (pump) queues what
// it reads and its writer (deliver) sends the queue on to dst.
type proxyPipe struct {
	d   Direction
	dst net.Conn

	mu     sync.Mutex
	queue  []proxyChunk // read, not yet delivered, in order
	queued int          // bytes in queue
	ended  bool         // the sender closed or failed; reset once queue is sent

	wake  chan struct{} // capacity 1: the writer has something to look at
	space chan struct{} // capacity 1: the queue shrank
}

// proxyChunk is bytes read in one Read, due for delivery at due.
type proxyChunk struct {
	b   []byte
	due time.Time
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
		pc := &proxyConn{client: c, server: s, done: make(chan struct{})}
		pc.pipes[ToServer] = newProxyPipe(ToServer, s)
		pc.pipes[ToClient] = newProxyPipe(ToClient, c)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			resetConn(c)
			resetConn(s)
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(4)
		p.mu.Unlock()
		go p.pump(pc, ToServer, c)
		go p.pump(pc, ToClient, s)
		go p.deliver(pc, ToServer)
		go p.deliver(pc, ToClient)
	}
}

func newProxyPipe(d Direction, dst net.Conn) *proxyPipe {
	return &proxyPipe{d: d, dst: dst, wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// poke wakes whoever waits on c, without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pump reads src into the direction's queue until src ends or fails, or
// the pair is reset.
func (p *Proxy) pump(pc *proxyConn, d Direction, src net.Conn) {
	defer p.wg.Done()
	pp := pc.pipes[d]
	buf := make([]byte, 32<<10)
	for {
		if !pp.waitSpace(pc.done) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			p.mu.Lock()
			dropped, delay := p.dropped[d], p.delay[d]
			if dropped {
				p.drop[d] += int64(n)
			}
			p.mu.Unlock()
			if !dropped {
				pp.push(proxyChunk{b: bytes.Clone(buf[:n]), due: now.Add(delay)})
			}
		}
		if err != nil {
			// The writer resets both sides once what src sent is
			// delivered: the other side sees a reset, as a client of a
			// killed process does.
			pp.mu.Lock()
			pp.ended = true
			pp.mu.Unlock()
			poke(pp.wake)
			return
		}
	}
}

// waitSpace waits until the queue is below proxyQueueLimit, and reports
// false when done closes first.
func (pp *proxyPipe) waitSpace(done <-chan struct{}) bool {
	for {
		pp.mu.Lock()
		full := pp.queued >= proxyQueueLimit
		pp.mu.Unlock()
		if !full {
			return true
		}
		select {
		case <-pp.space:
		case <-done:
			return false
		}
	}
}

func (pp *proxyPipe) push(c proxyChunk) {
	pp.mu.Lock()
	pp.queue = append(pp.queue, c)
	pp.queued += len(c.b)
	pp.mu.Unlock()
	poke(pp.wake)
}

// deliver writes the direction's queue to its destination as the
// direction's state allows, until the pair is reset.
func (p *Proxy) deliver(pc *proxyConn, d Direction) {
	defer p.wg.Done()
	pp := pc.pipes[d]
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		b, wait, end := p.next(pp)
		if end {
			p.resetPair(pc)
			return
		}
		if len(b) > 0 {
			if _, err := pp.dst.Write(b); err != nil {
				p.resetPair(pc)
				return
			}
			continue
		}
		var due <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-pp.wake:
		case <-due:
		case <-pc.done:
			return
		}
		timer.Stop()
	}
}

// next takes the bytes to write now off the front of pp's queue and counts
// them as forwarded. With none, it returns how long until some may be due
// (0: until woken), or end when the pair is to be reset: the sender ended
// and its bytes are delivered, or are held by Pause.
func (p *Proxy) next(pp *proxyPipe) (b []byte, wait time.Duration, end bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	d := pp.d
	switch {
	case pp.ended && (len(pp.queue) == 0 || p.paused[d]):
		return nil, 0, true
	case len(pp.queue) == 0 || p.paused[d]:
		return nil, 0, false
	}
	head := &pp.queue[0]
	now := time.Now()
	if w := head.due.Sub(now); w > 0 {
		return nil, w, false
	}
	n, w := p.rate[d].take(len(head.b), now)
	if n == 0 {
		return nil, w, false
	}
	b, head.b = head.b[:n], head.b[n:]
	if len(head.b) == 0 {
		pp.queue[0] = proxyChunk{}
		pp.queue = pp.queue[1:]
	}
	pp.queued -= n
	p.fwd[d] += int64(n)
	poke(pp.space)
	return b, 0, false
}

// tokenBucket limits one direction's delivery to rate bytes a second, in
// bursts of at most a tenth of a second's worth. The zero value is
// unlimited. Its owner serializes access.
type tokenBucket struct {
	rate   int64 // bytes per second; 0 is unlimited
	tokens float64
	last   time.Time
}

// take returns how many of want bytes may be sent at now (at most a burst),
// or 0 and how long until a burst's worth, or want if less, may be.
func (b *tokenBucket) take(want int, now time.Time) (int, time.Duration) {
	if b.rate <= 0 {
		return want, 0
	}
	burst := max(b.rate/10, 1)
	b.tokens = min(float64(burst), b.tokens+now.Sub(b.last).Seconds()*float64(b.rate))
	b.last = now
	need := min(int64(want), burst)
	if b.tokens >= float64(need) {
		b.tokens -= float64(need)
		return int(need), 0
	}
	wait := time.Duration((float64(need) - b.tokens) / float64(b.rate) * float64(time.Second))
	return 0, max(wait, time.Millisecond)
}

// resetPair resets both sides of pc and ends its goroutines.
func (p *Proxy) resetPair(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.reset()
}

// reset closes both sides with a TCP RST and ends pc's goroutines. Safe to
// call twice.
func (pc *proxyConn) reset() {
	pc.once.Do(func() {
		close(pc.done)
		resetConn(pc.client)
		resetConn(pc.server)
	})
}

// resetConn closes c with a TCP RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Pause stops delivering bytes in direction d: they are read (up to
// 4 MiB a connection) and held until Resume, or discarded by
// Reset or when a side of their connection closes. A write already under
// way when Pause is called completes.
func (p *Proxy) Pause(d Direction) {
	p.t.Logf("harness: proxy %s: pause %s", p.Addr(), d)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[d] = true
}

// Resume delivers what Pause held in direction d (each chunk once its
// delay has passed) and forwards again.
func (p *Proxy) Resume(d Direction) {
	p.t.Logf("harness: proxy %s: resume %s", p.Addr(), d)
	p.mu.Lock()
	p.paused[d] = false
	p.mu.Unlock()
	p.wake(d)
}

// wake makes the writers of direction d look at their queues again.
func (p *Proxy) wake(d Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		poke(pc.pipes[d].wake)
	}
}

// SetDelay delivers every chunk of bytes read in direction d from now on
// dly after it was read (0, the default, turns the delay off; a negative
// dly is 0). Bytes already queued keep the delay they were read with, and
// order is kept: a chunk waits behind the ones read before it.
func (p *Proxy) SetDelay(d Direction, dly time.Duration) {
	p.t.Logf("harness: proxy %s: delay %s %v", p.Addr(), d, dly)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[d] = max(dly, 0)
}

// SetBandwidth limits direction d to bytesPerSec, shared by all its
// connections, in bursts of at most a tenth of a second's worth (0, the
// default, is unlimited; so is a negative rate). The limit applies at once
// to queued bytes too.
func (p *Proxy) SetBandwidth(d Direction, bytesPerSec int64) {
	p.t.Logf("harness: proxy %s: bandwidth %s %d B/s", p.Addr(), d, bytesPerSec)
	p.mu.Lock()
	p.rate[d] = tokenBucket{rate: max(bytesPerSec, 0), last: time.Now()}
	p.mu.Unlock()
	p.wake(d)
}

// Drop discards bytes read in direction d from now on (on) or forwards
// them again (off). Bytes already queued (held by Pause, delayed) are
// still delivered.
func (p *Proxy) Drop(d Direction, on bool) {
	p.t.Logf("harness: proxy %s: drop %s %v", p.Addr(), d, on)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped[d] = on
}

// Reset closes every open connection with a TCP RST to both sides,
// discarding queued bytes: the client sees "connection reset by peer", as
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
		pc.reset()
	}
}

// Held returns the bytes read in direction d and not delivered yet: held
// by Pause, waiting out a delay, or waiting for bandwidth.
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
		n += int64(pp.queued)
		pp.mu.Unlock()
	}
	return n
}

// Forwarded returns the bytes handed to the destination in direction d so
// far.
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
