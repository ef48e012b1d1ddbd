package kafkawire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"reflect"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defaults of Config's zero fields.
const (
	// DefaultMaxRequestBytes is the largest request frame accepted
	// (Kafka's socket.request.max.bytes).
	DefaultMaxRequestBytes = 100 << 20
	// DefaultMaxPreAuthBytes is the largest request frame accepted before
	// authentication on a listener that requires it (Kafka's
	// sasl.server.max.receive.size, added by the fix of CVE-2022-34917).
	DefaultMaxPreAuthBytes = 512 << 10
	// DefaultIdleTimeout closes a silent connection (Kafka's
	// connections.max.idle.ms).
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultLoginTimeout closes a connection that has not authenticated
	// this long after it was accepted, on a listener that requires it.
	DefaultLoginTimeout = 30 * time.Second
	// DefaultMaxInFlight is how many requests of one connection are read
	// ahead of their answers; further ones wait to be read.
	DefaultMaxInFlight = 16
)

// Request is one decoded request as a handler sees it.
type Request struct {
	Header
	// Body is the decoded request, its version set to Header.Version.
	Body kmsg.Request
	// RemoteAddr is the client's address, for logs.
	RemoteAddr string
}

// HandlerFunc answers one request. The response's version is set by the
// server to the request's. A nil response with a nil error sends nothing
// (the client expects no answer, as for Produce with acks=0); an error
// closes the connection. ctx ends when the connection or the server
// closes.
type HandlerFunc func(ctx context.Context, req *Request) (kmsg.Response, error)

// API is one served API key and the versions served for it.
type API struct {
	// Key is the API key (kmsg.Produce, kmsg.Fetch, ...).
	Key kmsg.Key
	// MinVersion and MaxVersion bound the versions served, inclusive.
	// MaxVersion is lowered to what kmsg can encode when it is higher.
	MinVersion, MaxVersion int16
	// Handle answers the requests.
	Handle HandlerFunc
	// Hidden leaves the API out of ApiVersions' answer while still
	// answering it: for APIs a client may send unasked (the transaction
	// APIs) that are refused with an error code. Default false.
	Hidden bool
}

// Config is a Server's configuration.
type Config struct {
	// APIs are the served APIs. ApiVersions is served by the server
	// itself and must not be listed.
	APIs []API
	// Logger receives one line per connection closed on an error. Nil
	// means slog.Default().
	Logger *slog.Logger
	// MaxRequestBytes bounds a request frame; 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int32
	// MaxPreAuthBytes bounds a request frame on a connection that has not
	// authenticated when Auth.Required; 0 means DefaultMaxPreAuthBytes.
	MaxPreAuthBytes int32
	// IdleTimeout closes a connection that has sent nothing for this long
	// while none of its requests is being handled; 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// LoginTimeout closes a connection that has not authenticated this
	// long after it was accepted, when Auth.Required; 0 means
	// DefaultLoginTimeout.
	LoginTimeout time.Duration
	// MaxConnsPerIP bounds the open connections from one client IP
	// address (Kafka's max.connections.per.ip); a connection over it is
	// closed at once. 0, the default, is no limit, as in Kafka.
	MaxConnsPerIP int
	// MaxConnsPerIPOverrides replaces MaxConnsPerIP for the client IP
	// addresses it names (Kafka's max.connections.per.ip.overrides); an
	// override of 0 lets no connection in from that address.
	MaxConnsPerIPOverrides map[string]int
	// ConnCreationRatePerIP bounds the connections one client IP address
	// may open a second (KIP-612's per-IP connection_creation_rate
	// quota): a connection over it is closed at once. 0, the default, is
	// no limit, as in Kafka.
	ConnCreationRatePerIP float64
	// ConnCreationRatePerIPOverrides replaces ConnCreationRatePerIP for
	// the addresses it names; 0 is no limit for that address.
	ConnCreationRatePerIPOverrides map[string]float64
	// MaxConns bounds the server's open connections (Kafka's
	// max.connections); a connection over it is closed at once. 0, the
	// default, is no limit, as in Kafka.
	MaxConns int
	// MaxConnCreationRate bounds the connections accepted per second
	// across the server's listeners (Kafka's max.connection.creation.rate,
	// KIP-612): over it, accepting pauses until the rate allows the next
	// one, as a Kafka broker's acceptor does. 0, the default, is no
	// limit, as in Kafka.
	MaxConnCreationRate float64
	// MaxInFlight bounds the requests of one connection read ahead of
	// their answers; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// Auth authenticates connections (TLS client certificates, SASL).
	// Nil: no SASL, and every connection is served in the server's
	// context.
	Auth *Auth
	// BeginRequest, when set, is called with the connection's context
	// before each request's handler runs (lib/guard's BeginRequest: the
	// request quota, Kafka's request_percentage). It may hold the
	// request back, and with it the connection's later requests, as a
	// Kafka broker mutes a throttled channel; an error (the connection
	// closed meanwhile) closes the connection. It returns the context the
	// handler runs in and done, called once the handler has returned,
	// whose throttle goes into the response's throttle_time_ms when that
	// is shorter. Nil: no request quota.
	BeginRequest func(ctx context.Context) (context.Context, func() time.Duration, error)
}

// Server serves Kafka's protocol on any number of listeners. Safe for
// concurrent use; Close is safe to call twice.
type Server struct {
	cfg  Config
	apis map[kmsg.Key]API
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	perIP     map[string]int     // open connections by client IP
	ipRates   map[string]*ipRate // creation-rate buckets by client IP (connlimit.go)
	rate      *creationRate      // nil without Config.MaxConnCreationRate
	closed    bool
	wg        sync.WaitGroup
}

// NewServer checks cfg and returns a server that serves nothing until
// Serve is called.
func NewServer(cfg Config) (*Server, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxPreAuthBytes <= 0 {
		cfg.MaxPreAuthBytes = DefaultMaxPreAuthBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LoginTimeout <= 0 {
		cfg.LoginTimeout = DefaultLoginTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	apis := map[kmsg.Key]API{}
	for _, a := range cfg.APIs {
		req := a.Key.Request()
		switch {
		case req == nil:
			return nil, fmt.Errorf("kafkawire: unknown API key %d", a.Key)
		case a.Key == kmsg.ApiVersions:
			return nil, errors.New("kafkawire: ApiVersions is served by the server itself")
		case cfg.Auth != nil && len(cfg.Auth.Mechanisms) > 0 && (a.Key == kmsg.SASLHandshake || a.Key == kmsg.SASLAuthenticate):
			return nil, fmt.Errorf("kafkawire: %s is served by the server itself when Auth has mechanisms", a.Key.Name())
		case a.Handle == nil:
			return nil, fmt.Errorf("kafkawire: %s has no handler", a.Key.Name())
		case a.MinVersion < 0 || a.MinVersion > a.MaxVersion:
			return nil, fmt.Errorf("kafkawire: %s: versions %d to %d", a.Key.Name(), a.MinVersion, a.MaxVersion)
		case apis[a.Key].Handle != nil:
			return nil, fmt.Errorf("kafkawire: %s listed twice", a.Key.Name())
		}
		a.MaxVersion = min(a.MaxVersion, req.MaxVersion())
		apis[a.Key] = a
	}
	apis[kmsg.ApiVersions] = API{Key: kmsg.ApiVersions, MinVersion: 0, MaxVersion: min(3, kmsg.NewPtrApiVersionsRequest().MaxVersion())}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, apis: apis, log: log, ctx: ctx, cancel: cancel,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, perIP: map[string]int{}, ipRates: map[string]*ipRate{}}
	if cfg.MaxConnCreationRate > 0 {
		s.rate = &creationRate{perSec: cfg.MaxConnCreationRate}
	}
	if cfg.Auth != nil {
		for _, m := range cfg.Auth.Mechanisms {
			if m.Name == "" || (m.Authenticate == nil) == (m.Start == nil) {
				cancel()
				return nil, errors.New("kafkawire: a SASL mechanism needs a name and one of Authenticate and Start")
			}
		}
		if len(cfg.Auth.Mechanisms) > 0 {
			for _, a := range s.saslAPIs() {
				apis[a.Key] = a
			}
		}
	}
	return s, nil
}

// Versions returns the served API keys and version ranges, sorted by key:
// what ApiVersions answers.
func (s *Server) Versions() []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(s.apis))
	for _, a := range s.apis {
		if a.Hidden {
			continue
		}
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: a.Key.Int16(), MinVersion: a.MinVersion, MaxVersion: a.MaxVersion})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ApiKey < out[j].ApiKey })
	return out
}

// Serve accepts connections on ln until ln fails or the server closes; it
// then returns nil after Close and the accept error otherwise. ln is
// closed by Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			delete(s.listeners, ln)
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		ip := clientIP(c.RemoteAddr())
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		if err := s.overLimit(ip, time.Now()); err != nil {
			s.mu.Unlock()
			s.log.Debug("kafka: connection refused", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.perIP[ip]++
		s.wg.Add(1)
		var pause time.Duration
		if s.rate != nil {
			pause = s.rate.wait(time.Now())
		}
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			if s.perIP[ip]--; s.perIP[ip] == 0 {
				delete(s.perIP, ip)
			}
			s.mu.Unlock()
		}()
		if pause > 0 {
			// Over the creation rate: the next connection waits in the
			// kernel's backlog until the rate allows it.
			s.log.Debug("kafka: connection creation rate reached", "pause", pause)
			select {
			case <-time.After(pause):
			case <-s.ctx.Done():
			}
		}
	}
}

// Close stops every listener and connection and waits for the
// connections' goroutines to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// outcome is what one request produced: a frame to write (nil for none)
// and whether the connection closes after it.
type outcome struct {
	frame []byte
	close bool
	err   error
}

func (s *Server) serveConn(c net.Conn) {
	accepted := time.Now()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	defer c.Close()
	remote := c.RemoteAddr().String()
	st, err := s.startConn(ctx, c)
	if err != nil {
		s.log.Debug("kafka: connection refused", "remote", remote, "err", err)
		return
	}
	pending := make(chan chan outcome, s.cfg.MaxInFlight)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		defer cancel()
		w := bufio.NewWriter(c)
		for slot := range pending {
			o := <-slot
			if o.frame != nil {
				if _, err := w.Write(o.frame); err != nil {
					c.Close()
					return
				}
			}
			if len(pending) == 0 || o.close {
				if err := w.Flush(); err != nil {
					c.Close()
					return
				}
			}
			if o.close {
				if o.err != nil {
					s.log.Warn("kafka: closing connection", "remote", remote, "err", o.err)
				}
				c.Close()
				return
			}
		}
	}()
	fr := &frameReader{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	// prev is closed when the previous request's handler has returned:
	// requests are handled one at a time in arrival order, as a Kafka
	// broker does, so an idempotent producer's pipelined batches reach the
	// log in sequence order.
	prev := make(chan struct{})
	close(prev)
	authed := s.cfg.Auth == nil || !s.cfg.Auth.Required || st.authenticated
	busy := func() bool {
		select {
		case <-prev:
			return false
		default:
			return true
		}
	}
	// The bounds on the next frame, set once: open once the connection
	// may send anything (idle after IdleTimeout of silence), login
	// before it has authenticated (closed at LoginTimeout from accept).
	open := frameLimits{max: s.cfg.MaxRequestBytes, busy: busy,
		deadline: func() time.Time { return time.Now().Add(s.cfg.IdleTimeout) }}
	loginBy := accepted.Add(s.cfg.LoginTimeout)
	login := frameLimits{max: s.cfg.MaxPreAuthBytes, preAuth: true, busy: busy,
		deadline: func() time.Time { return loginBy }}
	for {
		if !authed {
			// Before authentication a request is read only once the
			// previous one's handler has returned, as Kafka's
			// SaslServerAuthenticator takes one request at a time: its
			// outcome decides the next frame's limits.
			select {
			case <-prev:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			authed = st.authenticated
		}
		limits := open
		if !authed {
			limits = login
		}
		h, frame, err := fr.next(limits)
		if errors.Is(err, ErrNotAuthenticated) {
			// Refused by its API key before its body was read: answered
			// ILLEGAL_SASL_STATE where the response has a top-level
			// error code, and closed, as the SASL listener of a Kafka
			// broker closes it.
			o := outcome{close: true, err: fmt.Errorf("%w: %s", ErrNotAuthenticated, h.Key.Name())}
			if resp := errorResponse(h, kerr.IllegalSaslState.Code); resp != nil {
				o.frame = encodeResponse(h, h.Version, resp.IsFlexible() && h.Key != kmsg.ApiVersions, resp)
			}
			s.push(ctx, pending, o)
			break
		}
		if errors.Is(err, errIdle) {
			s.log.Debug("kafka: closing idle connection", "remote", remote, "authenticated", authed)
			break
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.push(ctx, pending, outcome{close: true, err: err})
			}
			break
		}
		slot := make(chan outcome, 1)
		if !s.pushSlot(ctx, pending, slot) {
			break
		}
		req, o := s.decode(frame, remote)
		if o != nil {
			slot <- *o
			if o.close {
				break
			}
			continue
		}
		done := make(chan struct{})
		go func(prev <-chan struct{}) {
			defer close(done)
			<-prev
			slot <- s.handle(st, req)
		}(prev)
		prev = done
	}
	close(pending)
	<-writerDone
}

func (s *Server) push(ctx context.Context, pending chan chan outcome, o outcome) {
	slot := make(chan outcome, 1)
	slot <- o
	s.pushSlot(ctx, pending, slot)
}

func (s *Server) pushSlot(ctx context.Context, pending chan chan outcome, slot chan outcome) bool {
	select {
	case pending <- slot:
		return true
	case <-ctx.Done():
		return false
	}
}

// Decode parses one request frame (without its size prefix) as the
// server does: the header, the version check against the served APIs,
// and the body. On an error after the header was read, the returned
// request holds the header alone. It never panics (FuzzDecode).
func (s *Server) Decode(frame []byte) (*Request, error) {
	h, rest, err := parseHeader(frame)
	if err != nil {
		return nil, err
	}
	a, ok := s.apis[h.Key]
	if !ok {
		return &Request{Header: h}, fmt.Errorf("kafkawire: API key %d is not served", h.Key)
	}
	if h.Version < a.MinVersion || h.Version > a.MaxVersion {
		return &Request{Header: h}, errUnsupportedVersion{h}
	}
	body := h.Key.Request()
	body.SetVersion(h.Version)
	if body.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return &Request{Header: h}, err
		}
	}
	if err := readBody(body, rest); err != nil {
		return &Request{Header: h}, fmt.Errorf("kafkawire: %s v%d does not decode: %w", h.Key.Name(), h.Version, err)
	}
	return &Request{Header: h, Body: body}, nil
}

// readBody decodes with the panic of a decoder bug turned into an error.
func readBody(body kmsg.Request, b []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panic: %v", r)
		}
	}()
	return body.ReadFrom(b)
}

type errUnsupportedVersion struct{ h Header }

func (e errUnsupportedVersion) Error() string {
	return fmt.Sprintf("kafkawire: %s version %d is not served", e.h.Key.Name(), e.h.Version)
}

// decode returns the request, or the outcome that answers and closes.
func (s *Server) decode(frame []byte, remote string) (*Request, *outcome) {
	req, err := s.Decode(frame)
	if err == nil {
		req.RemoteAddr = remote
		return req, nil
	}
	if req == nil {
		return nil, &outcome{close: true, err: err}
	}
	h := req.Header
	var uv errUnsupportedVersion
	if errors.As(err, &uv) && h.Key == kmsg.ApiVersions {
		// KIP-511: answer at v0 with the served ranges, so the client
		// retries with a version we speak. The connection stays open.
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ApiKeys = s.Versions()
		return nil, &outcome{frame: encodeResponse(h, 0, false, resp)}
	}
	code := kerr.InvalidRequest.Code
	if errors.As(err, &uv) {
		code = kerr.UnsupportedVersion.Code
	}
	o := &outcome{close: true, err: err}
	if resp := errorResponse(h, code); resp != nil {
		o.frame = encodeResponse(h, h.Version, resp.IsFlexible(), resp)
	}
	return nil, o
}

// handle runs a request's handler and encodes what it returns.
func (s *Server) handle(st *connState, req *Request) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("kafka: handler panic", "api", req.Key.Name(), "panic", r, "stack", string(debug.Stack()))
			o = outcome{close: true, err: fmt.Errorf("kafkawire: %s handler failed", req.Key.Name())}
		}
	}()
	var resp kmsg.Response
	var err error
	if !s.admit(st, req) {
		// Refused before authentication: answered ILLEGAL_SASL_STATE
		// where the response can say so (ErrorResponse), and closed.
		// Where it cannot (Metadata before v13 for every topic, for
		// one), the connection closes without an answer, as a Kafka
		// broker's SASL listener does: any response would read as
		// success.
		o := outcome{close: true, err: fmt.Errorf("%w: %s", ErrNotAuthenticated, req.Key.Name())}
		if resp := ErrorResponse(req, kerr.IllegalSaslState.Code); resp != nil {
			o.frame = encodeResponse(req.Header, req.Version, resp.IsFlexible() && req.Key != kmsg.ApiVersions, resp)
		}
		return o
	}
	ctx, done := st.ctx, func() time.Duration { return 0 }
	if s.cfg.BeginRequest != nil {
		if ctx, done, err = s.cfg.BeginRequest(ctx); err != nil {
			return outcome{close: true, err: fmt.Errorf("%s held back for its principal's request quota: %w", req.Key.Name(), err)}
		}
	}
	switch req.Key {
	case kmsg.ApiVersions:
		r := kmsg.NewPtrApiVersionsResponse()
		r.ApiKeys = s.Versions()
		resp = r
	case kmsg.SASLHandshake:
		if s.apis[req.Key].Handle == nil {
			var closeAfter bool
			resp, closeAfter = s.saslHandshake(st, req.Body.(*kmsg.SASLHandshakeRequest))
			if closeAfter {
				err = errors.New("kafkawire: SaslHandshake after authentication (re-authentication is not offered)")
			}
			break
		}
		resp, err = s.apis[req.Key].Handle(ctx, req)
	case kmsg.SASLAuthenticate:
		if s.apis[req.Key].Handle == nil {
			resp, err = s.saslAuthenticate(st, req.Body.(*kmsg.SASLAuthenticateRequest))
			break
		}
		resp, err = s.apis[req.Key].Handle(ctx, req)
	default:
		resp, err = s.apis[req.Key].Handle(ctx, req)
	}
	setThrottle(resp, done())
	if err != nil {
		o := outcome{close: true, err: fmt.Errorf("%s: %w", req.Key.Name(), err)}
		if resp != nil {
			resp.SetVersion(req.Version)
			o.frame = encodeResponse(req.Header, req.Version, resp.IsFlexible(), resp)
		}
		return o
	}
	if resp == nil {
		return outcome{}
	}
	resp.SetVersion(req.Version)
	// ApiVersions answers with response header v0 at every version, so
	// a client that does not yet know our versions can read it.
	flexHeader := resp.IsFlexible() && req.Key != kmsg.ApiVersions
	return outcome{frame: encodeResponse(req.Header, req.Version, flexHeader, resp)}
}

// encodeResponse frames resp at version with the response header
// (correlation id, and an empty tag section for header v1).
func encodeResponse(h Header, version int16, flexHeader bool, resp kmsg.Response) []byte {
	resp.SetVersion(version)
	b := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(b[4:], uint32(h.CorrelationID))
	if flexHeader {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// errorResponse is the response to h's request, whose body was not
// decoded, with code in its top-level error code, or nil when the
// response has none at h's version (then the connection is closed without
// an answer: a response without the error would read as success).
func errorResponse(h Header, code int16) kmsg.Response {
	resp := h.Key.Response()
	if resp == nil || !topLevelErrorAt(resp, h.Version) {
		return nil
	}
	resp.SetVersion(h.Version)
	SetErrorCode(resp, code)
	return resp
}

// SetErrorCode sets resp's top-level ErrorCode field to code and reports
// whether it has one.
func SetErrorCode(resp kmsg.Response, code int16) bool {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 || !f.CanSet() {
		return false
	}
	f.SetInt(int64(code))
	return true
}

// setThrottle raises resp's throttle_time_ms to d, rounded up to whole
// milliseconds so that a client that waits it out never comes back early,
// when resp has the field (kmsg's SetThrottleResponse) and holds less. A
// nil resp (Produce with acks=0) has nowhere to say it; the next request
// is held back all the same.
func setThrottle(resp kmsg.Response, d time.Duration) {
	if resp == nil || d <= 0 {
		return
	}
	tr, ok := resp.(kmsg.ThrottleResponse)
	str, ok2 := resp.(kmsg.SetThrottleResponse)
	if !ok || !ok2 {
		return
	}
	ms := int32(min((d+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
	if cur, _ := tr.Throttle(); cur < ms {
		str.SetThrottle(ms)
	}
}
