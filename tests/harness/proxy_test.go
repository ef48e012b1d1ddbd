package harness

import (
	"bytes"
	"errors"
	"io"
	"net"
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
