package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// readCert parses the PEM certificate in path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestPrepareSecure: the dev CA, a certificate per process with its
// identity and the admin's, keys and admin.env readable by the owner only,
// and admin.env's export lines.
func TestPrepareSecure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my dev") // a space, for admin.env's quoting
	if err := prepareDir(dir, false); err != nil {
		t.Fatal(err)
	}
	pl := makePlan(dir, 9092, 3, 2, 2, map[string]string{}, true)
	ca, err := prepareSecure(dir, pl, pl.gatewayURLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, tlsDir(dir)); m != 0o700 {
		t.Errorf("%s mode %v, want 0700", tlsDir(dir), m)
	}
	caCert, caKey := caFiles(dir)
	if m := mode(t, caKey); m != 0o600 {
		t.Errorf("CA key mode %v, want 0600", m)
	}
	if got := readCert(t, caCert); !got.IsCA || !got.Equal(ca.Cert) {
		t.Errorf("ca.pem is not the CA prepareSecure returned")
	}
	for _, s := range pl.all() {
		cert, key := certFiles(dir, s.name())
		c := readCert(t, cert)
		id, ok := tlsconfig.IdentityOf(c)
		if want := "spiffe://strata/" + s.service + "/" + strings.TrimPrefix(s.name(), s.service+"-"); !ok || id.String() != want {
			t.Errorf("%s: identity %v, want %s", s.name(), id, want)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: not a server certificate of the dev CA: %v", s.name(), err)
		}
		if m := mode(t, key); m != 0o600 {
			t.Errorf("%s key mode %v, want 0600", s.name(), m)
		}
	}
	adminCert, adminKey := certFiles(dir, adminUser)
	if p, err := tlsconfig.PrincipalOf(readCert(t, adminCert)); err != nil || p.String() != "User:admin" {
		t.Errorf("admin certificate is %v (%v), want User:admin", p, err)
	}
	if m := mode(t, adminKey); m != 0o600 {
		t.Errorf("admin key mode %v, want 0600", m)
	}

	envFile := filepath.Join(dir, adminEnvName)
	if m := mode(t, envFile); m != 0o600 {
		t.Errorf("admin.env mode %v, want 0600", m)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	q := func(p string) string { return "'" + p + "'" }
	want := "# strata dev --secure: the admin's credentials for the strata CLI. source this file.\n" +
		"export STRATA_GATEWAY=https://127.0.0.1:9092\n" +
		"export STRATA_TLS_CA=" + q(caCert) + "\n" +
		"export STRATA_TLS_CERT=" + q(adminCert) + "\n" +
		"export STRATA_TLS_KEY=" + q(adminKey) + "\n"
	if string(b) != want {
		t.Errorf("admin.env:\n%s\nwant:\n%s", b, want)
	}
}

// TestPrepareSecureReuses: a later run with the same DIR keeps the CA and
// every certificate that is still good, and issues again one that is not
// (another identity, a key others can read).
func TestPrepareSecureReuses(t *testing.T) {
	dir := t.TempDir()
	pl := makePlan(dir, 9092, 1, 2, 1, map[string]string{}, true)
	if _, err := prepareSecure(dir, pl, pl.gatewayURLs()[0]); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(tlsDir(dir), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := map[string]string{}
	for _, f := range []string{"ca.pem", "ca-key.pem", "admin.pem", "storage-1.pem", "storage-2.pem", "gateway-1.pem"} {
		before[f] = read(f)
	}
	// storage-2 holds storage-1's certificate; gateway-1's key became
	// readable by others.
	s1cert, s1key := certFiles(dir, "storage-1")
	s2cert, s2key := certFiles(dir, "storage-2")
	for from, to := range map[string]string{s1cert: s2cert, s1key: s2key} {
		b, _ := os.ReadFile(from)
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, gwKey := certFiles(dir, "gateway-1")
	if err := os.Chmod(gwKey, 0o644); err != nil {
		t.Fatal(err)
	}

	// A bigger cluster on the second run: storage-3 is new.
	pl = makePlan(dir, 9092, 1, 3, 1, map[string]string{}, true)
	if _, err := prepareSecure(dir, pl, pl.gatewayURLs()[0]); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "admin.pem", "storage-1.pem"} {
		if read(f) != before[f] {
			t.Errorf("%s issued again; want it reused", f)
		}
	}
	for _, f := range []string{"storage-2.pem", "gateway-1.pem"} {
		if read(f) == before[f] {
			t.Errorf("%s reused; want it issued again", f)
		}
	}
	if id, _ := tlsconfig.IdentityOf(readCert(t, s2cert)); id.String() != "spiffe://strata/storage/2" {
		t.Errorf("storage-2 identity %v after the second run", id)
	}
	if m := mode(t, gwKey); m != 0o600 {
		t.Errorf("gateway-1 key mode %v after the second run, want 0600", m)
	}
	if _, err := os.Stat(filepath.Join(tlsDir(dir), "storage-3.pem")); err != nil {
		t.Errorf("no certificate for the new storage-3: %v", err)
	}

	// A CA that does not load is reported, never replaced.
	_, caKey := caFiles(dir)
	if err := os.WriteFile(caKey, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := prepareSecure(dir, pl, pl.gatewayURLs()[0])
	if err == nil || !strings.Contains(err.Error(), "does not load") || !strings.Contains(err.Error(), "to start over") {
		t.Errorf("broken CA: %v", err)
	}
	if read("ca.pem") != before["ca.pem"] {
		t.Error("a CA that did not load was replaced")
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/home/a/strata-dev/tls/ca.pem": "/home/a/strata-dev/tls/ca.pem",
		"https://127.0.0.1:9092":        "https://127.0.0.1:9092",
		"/my dev/ca.pem":                "'/my dev/ca.pem'",
		"/it's/ca.pem":                  `'/it'\''s/ca.pem'`,
		"/a/$HOME":                      "'/a/$HOME'",
		"":                              "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestScaleAsksTheSecureGatewayAsAdmin: strata dev scale asks a secure
// cluster's gateway over mutual TLS with the admin's certificate.
func TestScaleAsksTheSecureGatewayAsAdmin(t *testing.T) {
	dir := t.TempDir()
	pl := makePlan(dir, 9092, 1, 1, 1, map[string]string{}, true)
	if _, err := prepareSecure(dir, pl, pl.gatewayURLs()[0]); err != nil {
		t.Fatal(err)
	}
	caCert, caKey := caFiles(dir)
	ca, err := devca.Load(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	gwCert, gwKey := certFiles(dir, "gateway-1")
	pair, err := tls.LoadX509KeyPair(gwCert, gwKey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var callers []string
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(emptyGateway{}))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		callers = append(callers, r.TLS.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	defer srv.Close()

	f := &clusterFile{Secure: true, TLSCA: caCert, Gateway: srv.URL}
	hc, done, err := gatewayClient(context.Background(), dir, f)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := checkEmpty(context.Background(), hc, f.Gateway, []int{2}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(callers) != 1 || callers[0] != adminUser {
		t.Errorf("gateway called by %q; want once by the admin", callers)
	}
}

// emptyGateway answers ListTopics with no topic.
type emptyGateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
}

func (emptyGateway) ListTopics(context.Context, *connect.Request[gatewayv1.ListTopicsRequest]) (*connect.Response[gatewayv1.ListTopicsResponse], error) {
	return connect.NewResponse(&gatewayv1.ListTopicsResponse{}), nil
}
