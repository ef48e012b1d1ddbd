package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTP/2 flow-control windows used by both [StartServer] and
// [NewHTTPClient]. Go's server default is 1 MiB per connection, shared by
// every stream on it, so all produce and replication traffic on one
// connection moves at most 1 MiB per round trip (about 500 MB/s at a 2 ms
// cross-zone RTT). Go's client default is 1 GiB per connection, which lets
// a peer park up to a GiB in a slow reader's memory. Both sides use these
// instead: fast enough for disk-speed streams, bounded in memory. They are
// limits on data buffered, not allocations.
const (
	ConnReceiveWindow   = 16 << 20 // bytes per connection
	StreamReceiveWindow = 4 << 20  // bytes per stream
)

// Timeouts applied by [StartServer] and [NewHTTPClient].
const (
	// readHeaderTimeout bounds how long a client may take to send request
	// headers, so idle half-open connections do not pile up. Bodies and
	// streams have no timeout: Fetch long-polls and watch streams are long.
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes keep-alive connections nobody uses.
	idleTimeout = 5 * time.Minute
	// pingAfter sends an HTTP/2 PING on a connection that has been silent
	// this long, and pingTimeout closes it when the PING is not answered, so
	// a dead peer (a node powered off, a network partition) fails the calls
	// on it within about 30s instead of waiting for TCP to give up.
	pingAfter   = 15 * time.Second
	pingTimeout = 15 * time.Second
	dialTimeout = 5 * time.Second
)

func http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxReceiveBufferPerConnection: ConnReceiveWindow,
		MaxReceiveBufferPerStream:     StreamReceiveWindow,
		SendPingTimeout:               pingAfter,
		PingTimeout:                   pingTimeout,
	}
}

// Server serves one http.Handler on one listener over HTTP/2 cleartext
// (h2c with prior knowledge, what Connect clients from [NewHTTPClient]
// speak) and HTTP/1.1 (what curl and browsers speak without flags).
//
// Its methods are safe for concurrent use. Shutdown and Close may each be
// called any number of times, in any order.
type Server struct {
	srv      *http.Server
	ln       net.Listener
	draining chan struct{} // closed when Shutdown or Close starts
	done     chan struct{} // closed when Serve has returned
	err      error         // Serve's error, other than http.ErrServerClosed; read after done

	drainOnce sync.Once
	stopBase  context.CancelFunc
}

// StartServer serves h on ln in a background goroutine and returns at once.
// The server owns ln from then on. Request contexts are canceled only when
// the server is closed (by Close, or by Shutdown running out of time), not
// when a shutdown starts: long streams should watch [Server.Draining].
func StartServer(ln net.Listener, h http.Handler) *Server { return StartServerTLS(ln, h, nil) }

// StartServerTLS is StartServer speaking TLS with cfg (HTTP/2 and HTTP/1.1
// by ALPN) instead of h2c; a nil cfg is StartServer.
func StartServerTLS(ln net.Listener, h http.Handler, cfg *tls.Config) *Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	if cfg != nil {
		protos.SetHTTP2(true)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	baseCtx, stopBase := context.WithCancel(context.Background())
	s := &Server{
		ln:       ln,
		draining: make(chan struct{}),
		done:     make(chan struct{}),
		stopBase: stopBase,
	}
	s.srv = &http.Server{
		Handler:           h,
		Protocols:         &protos,
		HTTP2:             http2Config(),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		// Recovered handler panics and connection errors go to the slog
		// default (the process logger under Main), so they are JSON too.
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
	s.srv.TLSConfig = cfg
	serveLn := ln
	if cfg == nil {
		serveLn = bufferedListener{ln} // bufconn.go
	}
	go func() {
		defer close(s.done)
		var err error
		if cfg != nil {
			err = s.srv.ServeTLS(ln, "", "") // the certificate comes from cfg
		} else {
			err = s.srv.Serve(serveLn)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Addr is the address the server listens on, with the real port when the
// listen address asked for port 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the base URL a client on this host uses to reach the server, for
// example "http://127.0.0.1:9092". An unspecified host (":9092",
// "0.0.0.0:9092", "[::]:9092") is given as 127.0.0.1.
func (s *Server) URL() string { return baseURL(s.ln.Addr()) }

func baseURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Draining is closed when the server begins to shut down. Handlers of
// long-lived streams (watches, long polls) select on it and return, so that
// Shutdown does not wait for them until its deadline.
func (s *Server) Draining() <-chan struct{} { return s.draining }

// Done is closed when the server has stopped serving, whether by Shutdown,
// Close or a failure of the listener (see Err).
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why the server stopped on its own (for example the listener
// failed), or nil when it is still serving or was stopped by Shutdown or Close.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

func (s *Server) startDrain() {
	s.drainOnce.Do(func() { close(s.draining) })
}

// Shutdown stops accepting connections, closes idle ones and waits for
// in-flight requests to finish. When ctx ends first it closes every
// connection, cancels the remaining requests' contexts and returns
// ctx.Err(). It returns once the server has stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.startDrain()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.stopBase()
		s.srv.Close()
	}
	<-s.done
	return err
}

// Close stops the server at once: listener and connections closed,
// in-flight requests' contexts canceled. It returns once the server has
// stopped and always returns nil.
func (s *Server) Close() error {
	s.startDrain()
	s.stopBase()
	s.srv.Close()
	<-s.done
	return nil
}

// NewHTTPClient returns the HTTP client for Connect calls from one Strata
// service to another: HTTP/2 cleartext with prior knowledge on http:// URLs
// (no HTTP/1.1, which cannot carry bidirectional streams), HTTP/2 over TLS
// on https:// URLs, the same large flow-control windows as [StartServer],
// and PINGs that notice a dead peer in about 30 seconds. It has no overall
// timeout, since streams are long: bound calls with their context.
//
// A client is safe for concurrent use and should be shared: it keeps one
// connection per peer and multiplexes calls on it. Each call returns a new
// client with its own connection pool.
func NewHTTPClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	return &http.Client{
		Transport: &http.Transport{
			Protocols: &protos,
			HTTP2:     http2Config(),
			DialContext: (&net.Dialer{
				Timeout:   dialTimeout,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			IdleConnTimeout:     idleTimeout,
			TLSHandshakeTimeout: 10 * time.Second,
			ForceAttemptHTTP2:   true,
		},
	}
}
