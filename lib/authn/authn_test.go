package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/token"
)

const whoAmI = "/strata.test.v1.TestService/WhoAmI"

// whoAmIHandler is a Connect handler that answers with the principal and
// method the middleware attached, "none" when it attached nothing.
func whoAmIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(whoAmI, connect.NewUnaryHandler(whoAmI,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[wrapperspb.StringValue], error) {
			info, ok := FromContext(ctx)
			p, pok := PrincipalFrom(ctx)
			if !ok || !pok || p != info.Principal {
				return connect.NewResponse(wrapperspb.String("none")), nil
			}
			return connect.NewResponse(wrapperspb.String(info.Principal.String() + " " + info.Method.String())), nil
		}))
	return mux
}

// serve starts a loopback server with a in front of the test handler.
func serve(t *testing.T, a *Authenticator) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(a.Wrap(whoAmIHandler()))
	t.Cleanup(srv.Close)
	return srv
}

// call calls WhoAmI with the given Authorization header ("" for none).
func call(t *testing.T, client *http.Client, url, authorization string) (string, error) {
	t.Helper()
	c := connect.NewClient[emptypb.Empty, wrapperspb.StringValue](client, url+whoAmI)
	req := connect.NewRequest(&emptypb.Empty{})
	if authorization != "" {
		req.Header().Set("Authorization", authorization)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.CallUnary(ctx, req)
	if err != nil {
		return "", err
	}
	return res.Msg.GetValue(), nil
}

// wantRefused checks that err is Connect's unauthenticated with one line
// containing "unauthenticated" and want, and none of the secrets.
func wantRefused(t *testing.T, err error, want string, secrets ...string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("err = %v, want code unauthenticated", err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %T %v", err, err)
	}
	msg := ce.Message()
	if !strings.Contains(msg, "unauthenticated") || !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
		t.Fatalf("message %q: want one line with %q and %q", msg, "unauthenticated", want)
	}
	if d := apierr.DetailOf(err); d == nil || d.GetMessage() != msg {
		t.Fatalf("detail %v does not carry the message", d)
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) || strings.Contains(err.Error(), s) {
			t.Fatalf("message %q contains the credential", msg)
		}
	}
}

func newUsers(t *testing.T, names ...string) (*token.Users, map[string]token.Token) {
	t.Helper()
	toks := map[string]token.Token{}
	hashes := map[string]token.Hashed{}
	for _, n := range names {
		tok, err := token.New()
		if err != nil {
			t.Fatal(err)
		}
		toks[n] = tok
		hashes[n] = token.Hash(tok)
	}
	u, err := token.NewUsers(hashes)
	if err != nil {
		t.Fatal(err)
	}
	return u, toks
}

func TestTokens(t *testing.T) {
	users, toks := newUsers(t, "alice", "bob")
	a, err := New(context.Background(), Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, a)
	alice := toks["alice"].Reveal()

	got, err := call(t, srv.Client(), srv.URL, "Bearer "+alice)
	if err != nil || got != "User:alice token" {
		t.Fatalf("alice's token: %q, %v", got, err)
	}
	got, err = call(t, srv.Client(), srv.URL, "bearer "+toks["bob"].Reveal())
	if err != nil || got != "User:bob token" {
		t.Fatalf("bob's token, lower-case scheme: %q, %v", got, err)
	}

	other, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, header, want string
	}{
		{"unknown token", "Bearer " + other.Reveal(), "unknown or revoked token"},
		{"altered token", "Bearer " + alice[:len(alice)-2] + "AA", "unknown or revoked token"},
		{"malformed token", "Bearer " + alice + "x", "malformed Strata token"},
		{"no credentials", "", "no credentials"},
		{"empty bearer", "Bearer ", "empty bearer token"},
		{"basic auth", "Basic " + alice, "not a bearer token"},
		{"a JWT without OIDC", "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl", "accepts no OIDC tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, srv.Client(), srv.URL, tc.header)
			wantRefused(t, err, tc.want, alice, other.Reveal(), alice[len(token.Prefix):len(token.Prefix)+20])
		})
	}

	// The user set is swapped atomically: a revoked user's token stops
	// working at the next request, a new one works at once.
	carolUsers, carolToks := newUsers(t, "carol")
	a.SetUsers(carolUsers)
	if _, err := call(t, srv.Client(), srv.URL, "Bearer "+alice); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("revoked token: %v", err)
	}
	if got, err := call(t, srv.Client(), srv.URL, "Bearer "+carolToks["carol"].Reveal()); err != nil || got != "User:carol token" {
		t.Fatalf("new user's token: %q, %v", got, err)
	}
	if a.Users() != carolUsers {
		t.Fatal("Users does not return the set in force")
	}
}

func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	users, toks := newUsers(t, "alice")
	a, err := New(context.Background(), Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, whoAmI, nil)
	r.Header.Add("Authorization", "Bearer "+toks["alice"].Reveal())
	r.Header.Add("Authorization", "Bearer x")
	if _, err := a.Authenticate(context.Background(), r); err == nil || !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Authenticate = %v", err)
	}
}

func TestAnonymousMode(t *testing.T) {
	users, toks := newUsers(t, "alice")
	a, err := New(context.Background(), Config{Users: users, AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, a)
	if got, err := call(t, srv.Client(), srv.URL, ""); err != nil || got != "User:ANONYMOUS anonymous" {
		t.Fatalf("no credentials: %q, %v", got, err)
	}
	if got, err := call(t, srv.Client(), srv.URL, "Bearer "+toks["alice"].Reveal()); err != nil || got != "User:alice token" {
		t.Fatalf("a token still names its user: %q, %v", got, err)
	}
	other, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, srv.Client(), srv.URL, "Bearer "+other.Reveal())
	wantRefused(t, err, "unknown or revoked token", other.Reveal())
}

func TestPlainHTTPRefusal(t *testing.T) {
	a, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Bool
	srv := httptest.NewServer(a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(true)
	})))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/topics/t/records", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer strata_secretsecret")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthenticated"`) ||
		strings.Contains(string(body), "secretsecret") || reached.Load() {
		t.Fatalf("status %d, body %s, handler reached %v", res.StatusCode, body, reached.Load())
	}
	if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Fatalf("WWW-Authenticate = %q", got)
	}
}

func TestContextHelpers(t *testing.T) {
	ctx := context.Background()
	if _, ok := PrincipalFrom(ctx); ok {
		t.Fatal("principal in a bare context")
	}
	if _, ok := FromContext(ctx); ok {
		t.Fatal("info in a bare context")
	}
	ctx = NewContext(ctx, Info{Principal: acl.User("alice"), Method: MethodToken})
	if p, ok := PrincipalFrom(ctx); !ok || p != acl.User("alice") {
		t.Fatalf("PrincipalFrom = %v, %v", p, ok)
	}
	if _, ok := PrincipalFrom(NewContext(context.Background(), Info{})); ok {
		t.Fatal("an empty principal counts")
	}
	if MethodOIDC.String() != "oidc" || Method(0).String() != "" {
		t.Fatal("Method names")
	}
}

// testPKI is a CA and the certificates it signs, for TLS tests.
type testPKI struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	pool  *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{ca: ca, caKey: key, pool: pool}
}

func (p *testPKI) clientCert(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveTLS starts a loopback TLS server that asks for client certificates
// with clientAuth, and returns it with a client presenting cert.
func serveTLS(t *testing.T, a *Authenticator, pki *testPKI, clientAuth tls.ClientAuthType, cert *tls.Certificate) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(a.Wrap(whoAmIHandler()))
	srv.TLS = &tls.Config{ClientAuth: clientAuth, ClientCAs: pki.pool, MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	tr := client.Transport.(*http.Transport)
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	return srv, client
}

func TestCertificateFirst(t *testing.T) {
	pki := newPKI(t)
	users, toks := newUsers(t, "bob")
	var consulted atomic.Int32
	certPrincipal := func(c *x509.Certificate) (string, bool) {
		consulted.Add(1)
		switch c.Subject.CommonName {
		case "nobody":
			return "", false
		case "bad name":
			return "User:bad name", true
		case "anon":
			return acl.Anonymous.String(), true
		case "storage-3":
			return "Service:storage/3", true
		}
		return "User:" + c.Subject.CommonName, true
	}
	a, err := New(context.Background(), Config{CertPrincipal: certPrincipal, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	bob := "Bearer " + toks["bob"].Reveal()
	for _, tc := range []struct {
		name, cn, header, want, refused string
	}{
		{"certificate beats the token", "alice", bob, "User:alice certificate", ""},
		{"certificate alone", "alice", "", "User:alice certificate", ""},
		{"service identity", "storage-3", "", "Service:storage/3 certificate", ""},
		{"certificate naming nobody falls through to the token", "nobody", bob, "User:bob token", ""},
		{"certificate naming nobody without a token", "nobody", "", "", "no credentials"},
		{"certificate naming an invalid principal", "bad name", bob, "", "does not name a valid principal"},
		{"certificate naming the anonymous principal", "anon", bob, "", "does not name a valid principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := pki.clientCert(t, tc.cn)
			srv, client := serveTLS(t, a, pki, tls.VerifyClientCertIfGiven, &cert)
			before := consulted.Load()
			got, err := call(t, client, srv.URL, tc.header)
			if consulted.Load() != before+1 {
				t.Fatalf("certificate function consulted %d times", consulted.Load()-before)
			}
			if tc.refused != "" {
				wantRefused(t, err, tc.refused, toks["bob"].Reveal())
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}

	t.Run("unverified certificate is ignored", func(t *testing.T) {
		other := newPKI(t) // a CA the server does not trust
		cert := other.clientCert(t, "alice")
		srv, client := serveTLS(t, a, pki, tls.RequestClientCert, &cert)
		before := consulted.Load()
		got, err := call(t, client, srv.URL, bob)
		if err != nil || got != "User:bob token" || consulted.Load() != before {
			t.Fatalf("got %q, %v, function consulted %d times", got, err, consulted.Load()-before)
		}
	})
}
