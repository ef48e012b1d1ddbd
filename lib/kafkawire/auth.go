package kafkawire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/audit"
)

// handshakeTimeout bounds a connection's TLS handshake.
const handshakeTimeout = 10 * time.Second

// Auth is how a listener authenticates its connections: a verified TLS
// client certificate, a SASL exchange (SaslHandshake v1, then one or more
// SaslAuthenticate v0 to v2), or neither.
type Auth struct {
	// Connect is called once per connection, after the TLS handshake
	// (state nil on a plain listener). It returns the context the
	// connection's requests run in and whether that context is already
	// authenticated (a verified client certificate naming a principal),
	// or an error that closes the connection. Nil: every connection
	// starts unauthenticated with the server's context.
	Connect func(ctx context.Context, state *tls.ConnectionState) (context.Context, bool, error)
	// Mechanisms are the SASL mechanisms offered, in the order
	// SaslHandshake lists them. None: SaslHandshake and SaslAuthenticate
	// are not served.
	Mechanisms []Mechanism
	// Required refuses every request but ApiVersions, SaslHandshake and
	// SaslAuthenticate on a connection that has not authenticated, and
	// closes it. Default false: unauthenticated connections are served in
	// the context Connect returned.
	Required bool
}

// Mechanism is a SASL mechanism. Its exchange is one message from the
// client (Authenticate: PLAIN, OAUTHBEARER) or several, each answered
// with a challenge (Start: SCRAM); one of the two is set.
type Mechanism struct {
	// Name is the mechanism's name as clients ask for it ("PLAIN").
	Name string
	// Authenticate checks the client's message and returns the context
	// the connection's later requests run in, derived from ctx, or an
	// error whose text is sent to the client as the reason (it must not
	// quote the credential).
	Authenticate func(ctx context.Context, msg []byte) (context.Context, error)
	// Start begins a multi-message exchange for a connection whose
	// SaslHandshake chose this mechanism; the connection's next
	// SaslAuthenticate requests are its steps. Used when Authenticate is
	// nil.
	Start func(ctx context.Context) Exchange
}

// Exchange is one connection's multi-message SASL exchange: each
// SaslAuthenticate request's bytes are the client's next message. It is
// used by one connection's requests only, one at a time.
type Exchange interface {
	// Step takes the client's next message and returns the server's
	// message, sent back in the SaslAuthenticate response. When the
	// exchange has succeeded, done is the context the connection's later
	// requests run in (derived from ctx); while it goes on, done is nil.
	// An error fails the exchange: its text is sent to the client as the
	// reason (it must not quote the credential) and the connection
	// closes.
	Step(ctx context.Context, msg []byte) (reply []byte, done context.Context, err error)
}

// ErrNotAuthenticated is the error a connection closes with when it sends
// a request before authenticating on a listener that requires it.
var ErrNotAuthenticated = errors.New("kafkawire: request before authentication")

// connState is one connection's authentication. It is touched by the
// request handlers only, which run one at a time in arrival order.
type connState struct {
	ctx           context.Context
	authenticated bool
	mechanism     *Mechanism // chosen by SaslHandshake, until the exchange ends
	exchange      Exchange   // a multi-message exchange under way
}

// saslAPIs are the APIs the server serves itself when mechanisms are set.
func (s *Server) saslAPIs() []API {
	return []API{
		// v0 is listed because librdkafka detects SASL support by it,
		// but answered UNSUPPORTED_VERSION: after a v0 handshake the SASL
		// messages travel as raw frames (before KIP-152), which this
		// server does not read. Every client since Kafka 1.0 uses v1.
		{Key: kmsg.SASLHandshake, MinVersion: 0, MaxVersion: 1},
		{Key: kmsg.SASLAuthenticate, MinVersion: 0, MaxVersion: 2},
	}
}

// startConn runs the TLS handshake (when c is a TLS connection) and
// Auth.Connect.
func (s *Server) startConn(ctx context.Context, c net.Conn) (*connState, error) {
	var state *tls.ConnectionState
	if tc, ok := c.(*tls.Conn); ok {
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kafkawire: TLS handshake: %w", err)
		}
		cs := tc.ConnectionState()
		state = &cs
	}
	// The connection's requests carry its client's address, for the
	// audit lines of refusals.
	ctx = audit.WithSource(ctx, c.RemoteAddr().String())
	st := &connState{ctx: ctx}
	if a := s.cfg.Auth; a != nil && a.Connect != nil {
		c, ok, err := a.Connect(ctx, state)
		if err != nil {
			return nil, err
		}
		st.ctx, st.authenticated = c, ok
	}
	return st, nil
}

// admit reports whether req may run on a connection in state st; a
// refused request closes the connection.
func (s *Server) admit(st *connState, req *Request) bool {
	if s.cfg.Auth == nil || !s.cfg.Auth.Required || st.authenticated {
		return true
	}
	switch req.Key {
	case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return true
	}
	return false
}

// saslHandshake answers SaslHandshake: the mechanism the client asks for,
// remembered for its SaslAuthenticate, and the mechanisms offered.
func (s *Server) saslHandshake(st *connState, req *kmsg.SASLHandshakeRequest) (kmsg.Response, bool) {
	resp := kmsg.NewPtrSASLHandshakeResponse()
	for _, m := range s.cfg.Auth.Mechanisms {
		resp.SupportedMechanisms = append(resp.SupportedMechanisms, m.Name)
	}
	if req.Version < 1 {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp, true
	}
	if s.saslDone(st) {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp, true
	}
	st.mechanism, st.exchange = nil, nil
	for i, m := range s.cfg.Auth.Mechanisms {
		if m.Name == req.Mechanism {
			st.mechanism = &s.cfg.Auth.Mechanisms[i]
			return resp, false
		}
	}
	resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	return resp, false
}

// saslDone reports whether the connection already finished a SASL
// exchange (a second one, Kafka's re-authentication, is not offered).
func (s *Server) saslDone(st *connState) bool { return st.ctx.Value(saslDoneKey{}) != nil }

type saslDoneKey struct{}

// saslAuthenticate runs the chosen mechanism on the client's message: the
// whole exchange for a one-message mechanism, the next step of a
// multi-message one. A failure is answered SASL_AUTHENTICATION_FAILED and
// closes the connection.
func (s *Server) saslAuthenticate(st *connState, req *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	if st.mechanism == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate without a SaslHandshake naming an offered mechanism"
		resp.ErrorMessage = &msg
		return resp, errors.New("kafkawire: " + msg)
	}
	m := st.mechanism
	var (
		ctx   context.Context
		reply []byte
		err   error
	)
	if m.Authenticate != nil {
		ctx, err = m.Authenticate(st.ctx, req.SASLAuthBytes)
	} else {
		if st.exchange == nil {
			st.exchange = m.Start(st.ctx)
		}
		reply, ctx, err = st.exchange.Step(st.ctx, req.SASLAuthBytes)
		if err == nil && ctx == nil {
			// The exchange goes on: the client answers the challenge in
			// its next SaslAuthenticate.
			resp.SASLAuthBytes = reply
			if resp.SASLAuthBytes == nil {
				resp.SASLAuthBytes = []byte{}
			}
			return resp, nil
		}
	}
	st.mechanism, st.exchange = nil, nil
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := fmt.Sprintf("%s authentication failed: %v", m.Name, err)
		resp.ErrorMessage = &msg
		return resp, errors.New("kafkawire: " + msg)
	}
	st.ctx = context.WithValue(ctx, saslDoneKey{}, m.Name)
	st.authenticated = true
	resp.SASLAuthBytes = reply
	if resp.SASLAuthBytes == nil {
		resp.SASLAuthBytes = []byte{}
	}
	return resp, nil
}
