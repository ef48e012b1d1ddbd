package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
)

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, func() error { return testwait.True(cond()) })
}

// TestProxyPauseResumeReset: paused bytes are held (and counted) until
// Resume delivers them; Reset makes the client read a connection reset.
func TestProxyPauseResumeReset(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 5)
	roundTrip := func(msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil || string(buf[:len(msg)]) != msg {
			t.Fatalf("echo %q: got %q, %v", msg, buf[:len(msg)], err)
		}
	}
	roundTrip("hello")

	p.Pause(ToServer)
	if _, err := c.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 bytes held to the server", func() bool { return p.Held(ToServer) == 3 })
	fwd := p.Forwarded(ToServer)
	p.Resume(ToServer)
	if _, err := io.ReadFull(c, buf[:3]); err != nil || !bytes.Equal(buf[:3], []byte("abc")) {
		t.Fatalf("after resume: %q, %v", buf[:3], err)
	}
	if p.Forwarded(ToServer) != fwd+3 || p.Held(ToServer) != 0 {
		t.Fatalf("forwarded %d held %d", p.Forwarded(ToServer), p.Held(ToServer))
	}

	p.Pause(ToClient)
	if _, err := c.Write([]byte("xyz")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the echo held to the client", func() bool { return p.Held(ToClient) == 3 })
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after reset: %v, want a connection reset", err)
	}

	// New connections work after a reset; a dropped direction loses bytes.
	p.Resume(ToClient)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c = c2
	roundTrip("again")
	p.Drop(ToServer, true)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "4 bytes dropped", func() bool { return p.Dropped(ToServer) == 4 })
	p.Drop(ToServer, false)
	roundTrip("kept")
}

// dialProxy connects to p, closing the connection when the test ends.
func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo writes msg to c and reads it back.
func echo(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes: got %q, %v", len(msg), got, err)
	}
}

// writeChunks writes data to c in n writes.
func writeChunks(c net.Conn, data []byte, n int) error {
	step := max((len(data)+n-1)/n, 1)
	for b := data; len(b) > 0; {
		k := min(step, len(b))
		if _, err := c.Write(b[:k]); err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// readBack reads n bytes from c in a goroutine of its own (so that writes
// to c never wait on a full echo), delivering them, or the error, on the
// channel.
func readBack(c net.Conn, n int) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		k, err := io.ReadFull(c, b)
		if err != nil {
			b = append(b[:k:k], fmt.Sprintf(" [read: %v]", err)...)
		}
		out <- b
	}()
	return out
}

// stream writes data to c in writes writes while reading it back, and
// returns what came back (with the read error appended, if any).
func stream(c net.Conn, data []byte, writes int) ([]byte, error) {
	got := readBack(c, len(data))
	if err := writeChunks(c, data, writes); err != nil {
		return nil, err
	}
	return <-got, nil
}

// pattern is n bytes that differ from any shift of themselves by less
// than 251, so a lost, repeated or reordered chunk shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// TestProxyDelay: a delay holds each chunk at least that long in its
// direction, keeps the order of bytes when it is lowered with bytes in
// flight, and once off no longer applies to new bytes.
func TestProxyDelay(t *testing.T) {
	const delay = 200 * time.Millisecond
	for _, d := range []Direction{ToServer, ToClient} {
		t.Run(d.String(), func(t *testing.T) {
			p := StartProxy(t, echoServer(t))
			c := dialProxy(t, p)
			echo(t, c, []byte("warm"))

			p.SetDelay(d, delay)
			start := time.Now()
			echo(t, c, []byte("ping"))
			if rtt := time.Since(start); rtt < delay {
				t.Fatalf("round trip with a %v delay %s took %v", delay, d, rtt)
			}

			// Lower the delay to 0 while the first half of many writes
			// is queued: the second half waits behind it.
			data := pattern(64 << 10)
			half := len(data) / 2
			fwd := p.Forwarded(d)
			got := readBack(c, len(data))
			if err := writeChunks(c, data[:half], 200); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the first half read by the proxy", func() bool {
				return p.Held(d)+p.Forwarded(d)-fwd == int64(half)
			})
			p.SetDelay(d, 0)
			if err := writeChunks(c, data[half:], 200); err != nil {
				t.Fatal(err)
			}
			if b := <-got; !bytes.Equal(b, data) {
				t.Fatalf("bytes changed in order or content through a delay lowered mid-stream (first difference at %d)", firstDiff(b, data))
			}

			// Off: a chunk read now is due at once (the pause keeps it
			// queued where it can be looked at).
			p.Pause(d)
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the byte held", func() bool { return p.Held(d) == 1 })
			if due := queuedDue(p, d); due.After(time.Now()) {
				t.Fatalf("a byte read with the delay off is due at %v, in the future", due)
			}
			p.Resume(d)
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			echo(t, c, []byte("pong"))
			waitFor(t, "nothing held", func() bool { return p.Held(d) == 0 })
		})
	}
}

// queuedDue returns when the first chunk queued in direction d is due.
func queuedDue(p *Proxy, d Direction) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pp := pc.pipes[d]
		pp.mu.Lock()
		defer pp.mu.Unlock()
		if len(pp.queue) > 0 {
			return pp.queue[0].due
		}
	}
	return time.Time{}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestProxyBandwidth: a bandwidth limit is shared by every connection of
// its direction, so two connections together take at least the time the
// limit allows for the sum of their bytes; without it they are done at
// once.
func TestProxyBandwidth(t *testing.T) {
	const (
		rate    = 128 << 10 // bytes a second
		perConn = 128 << 10
	)
	p := StartProxy(t, echoServer(t))
	conns := []net.Conn{dialProxy(t, p), dialProxy(t, p)}
	for _, c := range conns {
		echo(t, c, []byte("warm"))
	}
	p.SetBandwidth(ToClient, rate)
	data := pattern(perConn)
	start := time.Now()
	var wg sync.WaitGroup
	results := make([][]byte, len(conns))
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Go(func() { results[i], errs[i] = stream(c, data, 64) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, b := range results {
		if !bytes.Equal(b, data) {
			t.Fatalf("connection %d: bytes changed through the limit (first difference at %d)", i, firstDiff(b, data))
		}
	}
	// Tokens start at none, so the whole transfer cannot beat rate; the
	// slack covers the moment between SetBandwidth and start.
	if minimum := time.Duration(len(conns)*perConn) * time.Second / rate; elapsed < minimum*3/4 {
		t.Fatalf("%d KiB at %d KiB/s took %v, less than %v", len(conns)*perConn>>10, rate>>10, elapsed, minimum)
	}

	p.SetBandwidth(ToClient, 0)
	for _, c := range conns {
		if b, err := stream(c, data, 4); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("once unlimited: %v, or bytes changed (first difference at %d)", err, firstDiff(b, data))
		}
	}
}

// TestProxyCloseAfterDelay: when the target writes and closes, the client
// gets what was delayed before the reset; what Pause held is lost with it.
func TestProxyCloseAfterDelay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    func(p *Proxy)
		wantData bool
	}{
		{"delayed", func(p *Proxy) { p.SetDelay(ToClient, 200*time.Millisecond) }, true},
		{"paused", func(p *Proxy) { p.Pause(ToClient) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := []byte("goodbye")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write(msg)
				c.Close()
			}()
			p := StartProxy(t, ln.Addr().String())
			tc.fault(p)
			// The proxy may reset a paused connection before the
			// client's connect has finished: the dial then reports the
			// reset itself, which is the outcome this case wants.
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				if !tc.wantData && errors.Is(err, syscall.ECONNRESET) {
					return
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c)
			if tc.wantData && !bytes.Equal(got, msg) {
				t.Fatalf("read %q before %v, want %q", got, err, msg)
			}
			if !tc.wantData && len(got) > 0 {
				t.Fatalf("read %q of what was held, want nothing", got)
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read ended with %v, want a connection reset", err)
			}
		})
	}
}
