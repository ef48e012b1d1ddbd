package kafkawire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/testwait"
)

// assertClosedUnanswered waits for the server to close c without
// writing anything. The connection's deadline (startServer: 30s) turns a
// server that keeps waiting into a failure.
func assertClosedUnanswered(t *testing.T, c net.Conn) {
	t.Helper()
	rest, err := io.ReadAll(c)
	if errors.Is(err, syscall.ECONNRESET) {
		// Closed with the client's unread bytes in its buffer.
		return
	}
	if err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
	if len(rest) != 0 {
		t.Fatalf("got %d bytes; want the connection closed without an answer", len(rest))
	}
}

// sizePrefix is a frame's size prefix announcing n bytes.
func sizePrefix(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestFrameLimitBeforeAuthentication(t *testing.T) {
	cfg := func() Config { return Config{APIs: []API{whoAPI()}, Auth: testAuth(true)} }
	t.Run("a 100 MB announcement closes at once", func(t *testing.T) {
		// CVE-2022-34917: the prefix alone, no body; the server must
		// not wait for (or allocate) 100 MB before it says no.
		_, c := startServer(t, cfg())
		if _, err := c.Write(sizePrefix(100 << 20)); err != nil {
			t.Fatal(err)
		}
		assertClosedUnanswered(t, c)
	})
	t.Run("over sasl.server.max.receive.size closes", func(t *testing.T) {
		_, c := startServer(t, cfg())
		if _, err := c.Write(sizePrefix(DefaultMaxPreAuthBytes + 1)); err != nil {
			t.Fatal(err)
		}
		assertClosedUnanswered(t, c)
	})
	t.Run("a request other than SASL is refused by its header alone", func(t *testing.T) {
		// A Produce announcing 400 KB (under the cap) whose body never
		// comes: refused from the API key, without waiting for the body.
		_, c := startServer(t, cfg())
		hdr := sizePrefix(400 << 10)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(kmsg.Produce))
		hdr = binary.BigEndian.AppendUint16(hdr, 9)
		hdr = binary.BigEndian.AppendUint32(hdr, 7)
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		assertClosedUnanswered(t, c)
	})
	t.Run("after authentication socket.request.max.bytes applies", func(t *testing.T) {
		_, c := startServer(t, cfg())
		handshake(t, c, "TEST")
		if r := authenticate(t, c, 2, "good:alice"); r.ErrorCode != 0 {
			t.Fatalf("authenticate: %+v", r)
		}
		// A 600 KB request, over the cap before login, is served now.
		resp := kmsg.NewPtrMetadataResponse()
		roundTrip(t, c, metadataRequest(12, strings.Repeat("x", 600<<10)), resp)
		if *resp.ClusterID != "alice" {
			t.Fatalf("cluster id %q", *resp.ClusterID)
		}
	})
	t.Run("a SASL request over the cap closes", func(t *testing.T) {
		_, c := startServer(t, cfg())
		handshake(t, c, "TEST")
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SetVersion(2)
		req.SASLAuthBytes = make([]byte, 600<<10)
		if _, err := c.Write(encodeRequest(1, req)); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("write: %v (the server may close first)", err)
		}
		assertClosedUnanswered(t, c)
	})
	t.Run("MaxRequestBytes applies without authentication", func(t *testing.T) {
		_, c := startServer(t, Config{APIs: []API{whoAPI()}, MaxRequestBytes: 1 << 20})
		if _, err := c.Write(sizePrefix(2 << 20)); err != nil {
			t.Fatal(err)
		}
		assertClosedUnanswered(t, c)
	})
}

func TestIdleConnectionCloses(t *testing.T) {
	t.Run("silent", func(t *testing.T) {
		_, c := startServer(t, Config{APIs: []API{whoAPI()}, IdleTimeout: 200 * time.Millisecond})
		who(t, c)
		assertClosedUnanswered(t, c)
	})
	t.Run("not while its own request is handled", func(t *testing.T) {
		// A request held longer than the idle timeout (a long poll) is
		// answered: the connection waiting on it is not idle.
		release := map[string]chan struct{}{"held": make(chan struct{})}
		_, c := startServer(t, Config{APIs: []API{metadataAPI(release)}, IdleTimeout: 100 * time.Millisecond})
		if _, err := c.Write(encodeRequest(1, metadataRequest(12, "held"))); err != nil {
			t.Fatal(err)
		}
		// Several idle periods pass while the request is held: the
		// server's reads time out and wait again.
		time.AfterFunc(time.Second, func() { close(release["held"]) })
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		readResponse(t, c, resp, true)
		if *resp.ClusterID != "held" {
			t.Fatalf("cluster id %q", *resp.ClusterID)
		}
		assertClosedUnanswered(t, c)
	})
}

func TestLoginDeadline(t *testing.T) {
	_, c := startServer(t, Config{APIs: []API{whoAPI()}, Auth: testAuth(true), LoginTimeout: 300 * time.Millisecond})
	// ApiVersions is served, but does not extend the deadline.
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	roundTrip(t, c, req, kmsg.NewPtrApiVersionsResponse())
	assertClosedUnanswered(t, c)
}

func TestConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"per IP", Config{APIs: []API{whoAPI()}, MaxConnsPerIP: 2}},
		{"in total", Config{APIs: []API{whoAPI()}, MaxConns: 2}},
		{"per IP override", Config{APIs: []API{whoAPI()}, MaxConnsPerIP: 10, MaxConnsPerIPOverrides: map[string]int{"127.0.0.1": 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, first := startServer(t, tc.cfg)
			who(t, first)
			addr := first.RemoteAddr().String()
			dial := func() net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				c.SetDeadline(time.Now().Add(30 * time.Second))
				return c
			}
			second := dial()
			who(t, second)
			third := dial()
			assertClosedUnanswered(t, third)
			// Closing one frees its place.
			first.Close()
			waitConns(t, s, 1)
			who(t, dial())
		})
	}
}

// waitConns waits until s has n open connections.
func waitConns(t *testing.T, s *Server, n int) {
	t.Helper()
	testwait.Until(t, 30*time.Second, "the server's open connections to drop", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.conns) != n {
			return fmt.Errorf("%d open, want %d", len(s.conns), n)
		}
		return nil
	})
}

func TestCreationRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &creationRate{perSec: 2}
	// Two in the first second: after the first, half a second to the
	// next token; a burst beyond that pays its debt.
	for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		if got := r.wait(t0); got != want {
			t.Fatalf("connection %d at once: pause %v, want %v", i+1, got, want)
		}
	}
	// 1.5s later the debt is paid: one token, then half a second again.
	if got := r.wait(t0.Add(1500 * time.Millisecond)); got != 500*time.Millisecond {
		t.Fatalf("after the pauses: %v, want 500ms", got)
	}
	// A rate below one a second lets the first through, then waits a
	// whole period.
	slow := &creationRate{perSec: 0.5}
	if got := slow.wait(t0); got != 2*time.Second {
		t.Fatalf("first connection at 0.5/s: pause %v, want 2s", got)
	}
}

func TestCreationRatePausesAccepting(t *testing.T) {
	// At one connection in 1000 seconds, the second waits in the
	// backlog: the server holds one connection while two are dialed,
	// and Close does not wait out the pause.
	s, first := startServer(t, Config{APIs: []API{whoAPI()}, MaxConnCreationRate: 0.001})
	who(t, first)
	second, err := net.Dial("tcp", first.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := second.Write(encodeRequest(1, metadataRequest(12, "x"))); err != nil {
		t.Fatal(err)
	}
	who(t, first) // the first is still served
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections accepted, want 1", n)
	}
	s.Close()
	assertClosedUnanswered(t, second)
}

// An override of 0 lets nothing in from its address; other addresses keep
// the default (none here).
func TestConnectionOverrideOfZeroBlocks(t *testing.T) {
	_, first := startServer(t, Config{APIs: []API{whoAPI()}, MaxConnsPerIPOverrides: map[string]int{"127.0.0.1": 0, "10.0.0.9": 5}})
	assertClosedUnanswered(t, first)
}

// KIP-612's per-IP creation rate: within a second's burst connections are
// served; over it one is closed at once; an override replaces the rate
// for its address.
func TestPerIPCreationRate(t *testing.T) {
	s := &Server{ipRates: map[string]*ipRate{}}
	t0 := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false} {
		if got := s.takeIPToken("10.0.0.1", 2, t0); got != want {
			t.Fatalf("connection %d at once at 2/s: allowed %v, want %v", i+1, got, want)
		}
	}
	if !s.takeIPToken("10.0.0.2", 2, t0) {
		t.Fatal("another address was held to the first's rate")
	}
	if !s.takeIPToken("10.0.0.1", 2, t0.Add(500*time.Millisecond)) {
		t.Fatal("half a second later at 2/s: refused, want one token back")
	}
	// Full buckets are swept once there are many.
	for i := range maxIPRateBuckets {
		s.takeIPToken(fmt.Sprintf("10.1.%d.%d", i/256, i%256), 2, t0)
	}
	s.takeIPToken("10.2.0.1", 2, t0.Add(time.Hour))
	if n := len(s.ipRates); n != 1 {
		t.Fatalf("%d buckets kept after an hour, want only the new one", n)
	}

	// Through a server: the second connection of a slow address is
	// closed unanswered; an override lifts the limit for its address.
	_, first := startServer(t, Config{APIs: []API{whoAPI()}, ConnCreationRatePerIP: 0.001})
	who(t, first)
	c, err := net.Dial("tcp", first.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	assertClosedUnanswered(t, c)

	_, first = startServer(t, Config{APIs: []API{whoAPI()}, ConnCreationRatePerIP: 0.001, ConnCreationRatePerIPOverrides: map[string]float64{"127.0.0.1": 0}})
	who(t, first)
	c2, err := net.Dial("tcp", first.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(30 * time.Second))
	who(t, c2)
}
