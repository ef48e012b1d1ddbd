package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

const (
	whoamiProcedure = "/strata.test.v1.WhoamiService/Whoami"
	echoProcedure   = "/strata.test.v1.WhoamiService/Echo"
)

type principalKey struct{}

// withPrincipal reads the client's principal from the TLS connection, as
// an authentication middleware would, and refuses a refused certificate.
func withPrincipal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := tlsconfig.PeerPrincipal(r.TLS)
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

func principalFrom(ctx context.Context) string {
	p := ctx.Value(principalKey{}).(tlsconfig.Principal)
	if p.IsZero() {
		return "none"
	}
	return p.String()
}

// startConnectServer serves a unary Whoami (the caller's principal and
// the request's protocol) and a bidirectional Echo stream, which Connect
// can carry over HTTP/2 only, on cfg over TLS. It returns the port.
func startConnectServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(whoamiProcedure, connect.NewUnaryHandler(whoamiProcedure,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String(principalFrom(ctx) + " " + req.Header().Get("X-Proto"))), nil
		}))
	mux.Handle(echoProcedure, connect.NewBidiStreamHandler(echoProcedure,
		func(ctx context.Context, s *connect.BidiStream[wrapperspb.StringValue, wrapperspb.StringValue]) error {
			for {
				msg, err := s.Receive()
				if errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.Send(wrapperspb.String(principalFrom(ctx) + ": " + msg.Value)); err != nil {
					return err
				}
			}
		}))
	protoHeader := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Proto", r.Proto)
		withPrincipal(mux).ServeHTTP(w, r)
	})

	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	srv := &http.Server{Handler: protoHeader, TLSConfig: cfg, Protocols: &protos,
		ErrorLog: log.New(io.Discard, "", 0)} // refused handshakes are expected
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// httpClient is what lib/serve's NewHTTPClient makes, with TLS: HTTP/2
// only, so a connection that does not negotiate h2 fails. With http1 it
// is what curl does without flags instead.
func httpClient(cfg *tls.Config, http1 bool) *http.Client {
	var protos http.Protocols
	if http1 {
		protos.SetHTTP1(true)
		cfg.NextProtos = []string{"http/1.1"} // http.Transport leaves ALPN alone without HTTP/2
	} else {
		protos.SetHTTP2(true)
	}
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: &protos, ForceAttemptHTTP2: !http1}
	return &http.Client{Transport: tr}
}

func TestConnectOverHTTP2WithMutualTLS(t *testing.T) {
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.crt")
	writeBundle(t, caPath, ca)
	serverCert, serverKey := writePair(t, dir, "controller", issueService(t, ca, tlsconfig.RoleController, "1"))
	server := load(t, tlsconfig.Files{Cert: serverCert, Key: serverKey, CA: caPath})
	port := startConnectServer(t, serverConfig(t, server, tlsconfig.VerifyClientCertIfGiven))

	clientCert, clientKey := writePair(t, dir, "storage", issueService(t, ca, tlsconfig.RoleStorage, "5"))
	service := load(t, tlsconfig.Files{Cert: clientCert, Key: clientKey, CA: caPath})
	user := load(t, tlsconfig.Files{CA: caPath})

	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		client *http.Client
		host   string
		want   string
	}{
		{"service by address", httpClient(service.ClientConfig(tlsconfig.RoleController), false), "127.0.0.1", "spiffe://strata/storage/5 HTTP/2.0"},
		{"service by name", httpClient(service.ClientConfig(tlsconfig.RoleController), false), "localhost", "spiffe://strata/storage/5 HTTP/2.0"},
		{"token user, no certificate", httpClient(user.ClientConfig(), false), "localhost", "none HTTP/2.0"},
		{"HTTP/1.1", httpClient(user.ClientConfig(), true), "localhost", "none HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.CloseIdleConnections()
			base := fmt.Sprintf("https://%s", net.JoinHostPort(tc.host, port))
			whoami := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](tc.client, base+whoamiProcedure)
			resp, err := whoami.CallUnary(ctx, connect.NewRequest(wrapperspb.String("")))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.Value; got != tc.want {
				t.Errorf("Whoami = %q, want %q", got, tc.want)
			}
		})
	}

	// A bidirectional stream, which needs HTTP/2 end to end.
	c := httpClient(service.ClientConfig(), false)
	defer c.CloseIdleConnections()
	echo := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](c, "https://127.0.0.1:"+port+echoProcedure)
	stream := echo.CallBidiStream(ctx)
	for _, m := range []string{"one", "two"} {
		if err := stream.Send(wrapperspb.String(m)); err != nil {
			t.Fatalf("Send: %v", err)
		}
		got, err := stream.Receive()
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if want := "spiffe://strata/storage/5: " + m; got.Value != want {
			t.Errorf("Echo = %q, want %q", got.Value, want)
		}
	}
	if err := stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Receive(); !errors.Is(err, io.EOF) {
		t.Errorf("Receive after CloseRequest: %v, want io.EOF", err)
	}
	if err := stream.CloseResponse(); err != nil {
		t.Fatal(err)
	}

	// A client that does not trust the server's CA gets no answer.
	foreign := newCA(t, "another CA")
	foreignCA := filepath.Join(dir, "foreign.crt")
	writeBundle(t, foreignCA, foreign)
	stranger := load(t, tlsconfig.Files{CA: foreignCA})
	c2 := httpClient(stranger.ClientConfig(), false)
	whoami := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](c2, "https://localhost:"+port+whoamiProcedure)
	if resp, err := whoami.CallUnary(ctx, connect.NewRequest(wrapperspb.String(""))); err == nil {
		t.Errorf("client trusting another CA got an answer: %q", resp.Msg.Value)
	}
}
