package netcut

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// peerEnv makes the test binary run as a peer instead of the tests.
const peerEnv = "NETCUT_TEST_PEER"

// TestMain runs the test binary as a peer when the tests start it as one.
func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) == "1" {
		if err := runPeer(); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// runPeer is the process the tests cut: an HTTP server on a loopback port
// (printed as "listening PORT") that answers /ping and, told to by the
// test, connects to other ports from inside its own cgroup:
//
//	/dial?port=P&timeout=D  opens a new connection to P, asks /ping, closes
//	/open?port=P&id=K       opens connection K to P and keeps it
//	/use?id=K&timeout=D     asks /ping over connection K
//	/pings                  says how many /ping it has answered
//
// A failure is answered with status 502 and a body "timeout: ERR" when
// the deadline passed, "error: ERR" otherwise.
func runPeer() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	var (
		mu    sync.Mutex
		conns = map[string]*peerConn{}
		pings atomic.Int64
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {
		pings.Add(1)
		fmt.Fprint(w, "pong")
	})
	mux.HandleFunc("/pings", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, pings.Load()) })
	mux.HandleFunc("/dial", func(w http.ResponseWriter, r *http.Request) {
		c, err := dialPeer(r.FormValue("port"), r.FormValue("timeout"))
		if err == nil {
			err = c.ping(r.FormValue("timeout"))
			c.Close()
		}
		answer(w, err)
	})
	mux.HandleFunc("/open", func(w http.ResponseWriter, r *http.Request) {
		c, err := dialPeer(r.FormValue("port"), r.FormValue("timeout"))
		if err == nil {
			mu.Lock()
			conns[r.FormValue("id")] = c
			mu.Unlock()
		}
		answer(w, err)
	})
	mux.HandleFunc("/use", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := conns[r.FormValue("id")]
		mu.Unlock()
		if c == nil {
			http.Error(w, "no connection "+r.FormValue("id"), http.StatusNotFound)
			return
		}
		answer(w, c.ping(r.FormValue("timeout")))
	})
	return http.Serve(ln, mux)
}

// peerConn is a connection a peer opened to another peer's HTTP server.
type peerConn struct {
	net.Conn
	r *bufio.Reader
}

func dialPeer(port, timeout string) (*peerConn, error) {
	d, err := time.ParseDuration(timeout)
	if err != nil {
		return nil, err
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), d)
	if err != nil {
		return nil, err
	}
	return &peerConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// ping sends GET /ping over the connection and reads the answer.
func (c *peerConn) ping(timeout string) error {
	d, err := time.ParseDuration(timeout)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("GET /ping HTTP/1.1\r\nHost: peer\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, body); err != nil || string(body) != "pong" {
		return fmt.Errorf("answer %q, %v", body, err)
	}
	return nil
}

func answer(w http.ResponseWriter, err error) {
	var ne net.Error
	switch {
	case err == nil:
		fmt.Fprint(w, "ok")
	case errors.As(err, &ne) && ne.Timeout():
		http.Error(w, "timeout: "+err.Error(), http.StatusBadGateway)
	default:
		http.Error(w, "error: "+err.Error(), http.StatusBadGateway)
	}
}
