package kafkawire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

type principalKey struct{}

// whoAPI answers Metadata with the connection's principal (from its
// context) as the cluster id, "" when there is none.
func whoAPI() API {
	return API{Key: kmsg.Metadata, MinVersion: 0, MaxVersion: 12, Handle: func(ctx context.Context, req *Request) (kmsg.Response, error) {
		who, _ := ctx.Value(principalKey{}).(string)
		resp := kmsg.NewPtrMetadataResponse()
		resp.ClusterID = &who
		return resp, nil
	}}
}

// testAuth offers TEST: the message "good:<name>" authenticates <name>.
func testAuth(required bool) *Auth {
	return &Auth{Required: required, Mechanisms: []Mechanism{{Name: "TEST", Authenticate: func(ctx context.Context, msg []byte) (context.Context, error) {
		name, ok := cutPrefix(string(msg), "good:")
		if !ok {
			return nil, errors.New("bad credentials")
		}
		return context.WithValue(ctx, principalKey{}, name), nil
	}}}}
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return "", false
	}
	return s[len(p):], true
}

// roundTrip sends req and decodes the answer (flexible header per the
// response version, as for every API but ApiVersions).
func roundTrip(t *testing.T, c net.Conn, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	if _, err := c.Write(encodeRequest(1, req)); err != nil {
		t.Fatal(err)
	}
	resp.SetVersion(req.GetVersion())
	readResponse(t, c, resp, resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16())
}

func handshake(t *testing.T, c net.Conn, mech string) *kmsg.SASLHandshakeResponse {
	t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.SetVersion(1)
	req.Mechanism = mech
	resp := kmsg.NewPtrSASLHandshakeResponse()
	roundTrip(t, c, req, resp)
	return resp
}

func authenticate(t *testing.T, c net.Conn, version int16, msg string) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SetVersion(version)
	req.SASLAuthBytes = []byte(msg)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	roundTrip(t, c, req, resp)
	return resp
}

func who(t *testing.T, c net.Conn) string {
	t.Helper()
	resp := kmsg.NewPtrMetadataResponse()
	roundTrip(t, c, metadataRequest(12, "x"), resp)
	return *resp.ClusterID
}

// assertClosed waits for the server to close c.
func assertClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("connection not closed cleanly: %v", err)
	}
}

func TestSASLRequired(t *testing.T) {
	cfg := func() Config { return Config{APIs: []API{whoAPI()}, Auth: testAuth(true)} }

	t.Run("ApiVersions lists the SASL APIs", func(t *testing.T) {
		_, c := startServer(t, cfg())
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		resp := kmsg.NewPtrApiVersionsResponse()
		roundTrip(t, c, req, resp)
		var keys []int16
		for _, k := range resp.ApiKeys {
			keys = append(keys, k.ApiKey)
		}
		if !slices.Contains(keys, 17) || !slices.Contains(keys, 36) {
			t.Fatalf("keys %v lack SaslHandshake and SaslAuthenticate", keys)
		}
	})
	t.Run("a request before authentication closes", func(t *testing.T) {
		// Refused from its header, before its body is read: Metadata
		// has no top-level error code, so no answer (an empty one would
		// read as a cluster without topics), as a Kafka broker's SASL
		// listener closes without one.
		_, c := startServer(t, cfg())
		if _, err := c.Write(encodeRequest(1, metadataRequest(12, "x"))); err != nil {
			t.Fatal(err)
		}
		if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
			t.Fatalf("got %d bytes, %v; want the connection closed without an answer", len(rest), err)
		}
		// A response with a top-level error code carries
		// ILLEGAL_SASL_STATE, then the connection closes.
		_, c = startServer(t, cfg())
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.SetVersion(3)
		fc.CoordinatorKey = "g"
		fresp := kmsg.NewPtrFindCoordinatorResponse()
		roundTrip(t, c, fc, fresp)
		if fresp.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("find coordinator before authentication: %+v", fresp)
		}
		assertClosed(t, c)
	})
	t.Run("unknown mechanism, then the right one", func(t *testing.T) {
		_, c := startServer(t, cfg())
		if r := handshake(t, c, "SCRAM-SHA-256"); r.ErrorCode != kerr.UnsupportedSaslMechanism.Code || !slices.Equal(r.SupportedMechanisms, []string{"TEST"}) {
			t.Fatalf("handshake: %+v", r)
		}
		if r := handshake(t, c, "TEST"); r.ErrorCode != 0 {
			t.Fatalf("handshake: %+v", r)
		}
		if r := authenticate(t, c, 2, "good:alice"); r.ErrorCode != 0 {
			t.Fatalf("authenticate: %+v", r)
		}
		if got := who(t, c); got != "alice" {
			t.Fatalf("principal %q, want alice", got)
		}
		// A second exchange (re-authentication) is not offered.
		if r := handshake(t, c, "TEST"); r.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("second handshake: %+v", r)
		}
		assertClosed(t, c)
	})
	for _, v := range []int16{0, 1, 2} {
		t.Run(fmt.Sprintf("wrong credentials fail and close v%d", v), func(t *testing.T) {
			_, c := startServer(t, cfg())
			handshake(t, c, "TEST")
			r := authenticate(t, c, v, "bad")
			if r.ErrorCode != kerr.SaslAuthenticationFailed.Code || r.ErrorMessage == nil || *r.ErrorMessage != "TEST authentication failed: bad credentials" {
				t.Fatalf("v%d: %+v", v, r)
			}
			assertClosed(t, c)
		})
	}
	t.Run("handshake v0 is refused", func(t *testing.T) {
		_, c := startServer(t, cfg())
		req := kmsg.NewPtrSASLHandshakeRequest()
		req.Mechanism = "TEST"
		resp := kmsg.NewPtrSASLHandshakeResponse()
		roundTrip(t, c, req, resp)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("%+v", resp)
		}
		assertClosed(t, c)
	})
	t.Run("authenticate without a handshake", func(t *testing.T) {
		_, c := startServer(t, cfg())
		if r := authenticate(t, c, 1, "good:alice"); r.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("%+v", r)
		}
		assertClosed(t, c)
	})
}

func TestSASLOptional(t *testing.T) {
	base := func(ctx context.Context, _ *tls.ConnectionState) (context.Context, bool, error) {
		return context.WithValue(ctx, principalKey{}, "ANONYMOUS"), false, nil
	}
	a := testAuth(false)
	a.Connect = base
	_, c := startServer(t, Config{APIs: []API{whoAPI()}, Auth: a})
	if got := who(t, c); got != "ANONYMOUS" {
		t.Fatalf("before SASL: %q", got)
	}
	handshake(t, c, "TEST")
	authenticate(t, c, 1, "good:bob")
	if got := who(t, c); got != "bob" {
		t.Fatalf("after SASL: %q", got)
	}
}

// TestTLSClientCertificate serves over TLS: Connect sees the verified
// client certificate and authenticates the connection with it, so no
// SASL is needed on a listener that requires authentication; a client
// without a certificate is refused its first request.
func TestTLSClientCertificate(t *testing.T) {
	ca, err := devca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cliCert, err := ca.IssueClient("carol")
	if err != nil {
		t.Fatal(err)
	}
	a := testAuth(true)
	a.Connect = func(ctx context.Context, st *tls.ConnectionState) (context.Context, bool, error) {
		if st == nil || len(st.VerifiedChains) == 0 {
			return ctx, false, nil
		}
		return context.WithValue(ctx, principalKey{}, st.VerifiedChains[0][0].Subject.CommonName), true, nil
	}
	s, err := NewServer(Config{APIs: []API{whoAPI()}, Auth: a, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := srvCert.TLS()
	go s.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{sc}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}))
	t.Cleanup(func() { s.Close() })
	dial := func(certs ...tls.Certificate) net.Conn {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: certs, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	}
	if got := who(t, dial(cliCert.TLS())); got != "carol" {
		t.Fatalf("with a certificate: %q", got)
	}
	c := dial()
	if _, err := c.Write(encodeRequest(1, metadataRequest(12, "x"))); err != nil {
		t.Fatal(err)
	}
	assertClosed(t, c)
}

// stepAuth offers STEPS, a two-message exchange: "hello:<name>" is
// answered "prove:<name>", and "proof:<name>" then authenticates <name>
// with the reply "welcome".
func stepAuth() *Auth {
	return &Auth{Required: true, Mechanisms: []Mechanism{{Name: "STEPS", Start: func(context.Context) Exchange {
		return &stepExchange{}
	}}}}
}

type stepExchange struct{ name string }

func (e *stepExchange) Step(ctx context.Context, msg []byte) ([]byte, context.Context, error) {
	if e.name == "" {
		name, ok := cutPrefix(string(msg), "hello:")
		if !ok || name == "" {
			return nil, nil, errors.New("bad first message")
		}
		e.name = name
		return []byte("prove:" + name), nil, nil
	}
	if string(msg) != "proof:"+e.name {
		return nil, nil, errors.New("bad proof")
	}
	return []byte("welcome"), context.WithValue(ctx, principalKey{}, e.name), nil
}

// TestSASLMultiStep: a multi-message mechanism's challenges travel in the
// SaslAuthenticate responses, the connection stays unauthenticated until
// the last step, and a failed step closes it.
func TestSASLMultiStep(t *testing.T) {
	cfg := func() Config { return Config{APIs: []API{whoAPI()}, Auth: stepAuth()} }
	t.Run("two steps authenticate", func(t *testing.T) {
		_, c := startServer(t, cfg())
		if r := handshake(t, c, "STEPS"); r.ErrorCode != 0 || !slices.Equal(r.SupportedMechanisms, []string{"STEPS"}) {
			t.Fatalf("handshake: %+v", r)
		}
		if r := authenticate(t, c, 2, "hello:carol"); r.ErrorCode != 0 || string(r.SASLAuthBytes) != "prove:carol" {
			t.Fatalf("first step: %+v", r)
		}
		if r := authenticate(t, c, 2, "proof:carol"); r.ErrorCode != 0 || string(r.SASLAuthBytes) != "welcome" {
			t.Fatalf("last step: %+v", r)
		}
		if got := who(t, c); got != "carol" {
			t.Fatalf("principal %q, want carol", got)
		}
	})
	t.Run("a request between the steps closes", func(t *testing.T) {
		_, c := startServer(t, cfg())
		handshake(t, c, "STEPS")
		authenticate(t, c, 1, "hello:carol")
		// Half an exchange is not authentication: the request is refused
		// as any before authentication is, and the connection closes.
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.SetVersion(3)
		fc.CoordinatorKey = "g"
		resp := kmsg.NewPtrFindCoordinatorResponse()
		roundTrip(t, c, fc, resp)
		if resp.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("find coordinator between the steps: %+v", resp)
		}
		assertClosed(t, c)
	})
	t.Run("a failed step fails and closes", func(t *testing.T) {
		_, c := startServer(t, cfg())
		handshake(t, c, "STEPS")
		authenticate(t, c, 1, "hello:carol")
		r := authenticate(t, c, 1, "proof:mallory")
		if r.ErrorCode != kerr.SaslAuthenticationFailed.Code || r.ErrorMessage == nil || *r.ErrorMessage != "STEPS authentication failed: bad proof" {
			t.Fatalf("%+v", r)
		}
		assertClosed(t, c)
	})
	t.Run("a new handshake restarts the exchange", func(t *testing.T) {
		_, c := startServer(t, cfg())
		handshake(t, c, "STEPS")
		authenticate(t, c, 1, "hello:carol")
		handshake(t, c, "STEPS")
		if r := authenticate(t, c, 1, "hello:dave"); r.ErrorCode != 0 || string(r.SASLAuthBytes) != "prove:dave" {
			t.Fatalf("first step again: %+v", r)
		}
		authenticate(t, c, 1, "proof:dave")
		if got := who(t, c); got != "dave" {
			t.Fatalf("principal %q, want dave", got)
		}
	})
}

func TestMechanismNeedsOneOfAuthenticateAndStart(t *testing.T) {
	for _, m := range []Mechanism{
		{Name: "NONE"},
		{Name: "BOTH", Authenticate: testAuth(false).Mechanisms[0].Authenticate, Start: stepAuth().Mechanisms[0].Start},
	} {
		if _, err := NewServer(Config{Auth: &Auth{Mechanisms: []Mechanism{m}}}); err == nil || !strings.Contains(err.Error(), "one of Authenticate and Start") {
			t.Errorf("%s: NewServer = %v", m.Name, err)
		}
	}
}
