package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// cluster is a CA, a server certificate it issued, and the files of both
// in a test directory.
type cluster struct {
	ca    *devca.CA
	dir   string
	files tlsconfig.Files
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	certPath, keyPath := writePair(t, dir, "server", issueService(t, ca, tlsconfig.RoleGateway, ""))
	caPath := dir + "/ca.crt"
	writeBundle(t, caPath, ca)
	return &cluster{ca: ca, dir: dir, files: tlsconfig.Files{Cert: certPath, Key: keyPath, CA: caPath}}
}

func TestServerClientAuth(t *testing.T) {
	c := newCluster(t)
	other := newCA(t, "another CA")
	twoIDs, err := c.ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "mallory"},
		URIs:        []*url.URL{{Scheme: "spiffe", Host: "strata", Path: "/storage/1"}, {Scheme: "spiffe", Host: "strata", Path: "/controller"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	unknownRole, err := c.ca.Issue(&x509.Certificate{
		URIs:        []*url.URL{{Scheme: "spiffe", Host: "strata", Path: "/admin/1"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	serverOnly, err := c.ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "eve"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}

	src := load(t, c.files)
	ports := map[tlsconfig.ClientAuth]string{
		tlsconfig.RequireClientCert:       startTLSServer(t, serverConfig(t, src, tlsconfig.RequireClientCert)),
		tlsconfig.VerifyClientCertIfGiven: startTLSServer(t, serverConfig(t, src, tlsconfig.VerifyClientCertIfGiven)),
	}

	// want is the server's line, "" when the connection must fail.
	for _, tc := range []struct {
		name   string
		auth   tlsconfig.ClientAuth
		client *tls.Config
		want   string
	}{
		{"require/no certificate", tlsconfig.RequireClientCert, plainClient(c.ca), ""},
		{"require/another CA", tlsconfig.RequireClientCert, plainClient(c.ca, issueClient(t, other, "alice")), ""},
		{"require/service", tlsconfig.RequireClientCert, plainClient(c.ca, issueService(t, c.ca, tlsconfig.RoleStorage, "3")), "spiffe://strata/storage/3"},
		{"require/stateless service", tlsconfig.RequireClientCert, plainClient(c.ca, issueService(t, c.ca, tlsconfig.RoleGateway, "")), "spiffe://strata/gateway"},
		{"require/user", tlsconfig.RequireClientCert, plainClient(c.ca, issueClient(t, c.ca, "alice")), "User:alice"},
		{"require/two identities", tlsconfig.RequireClientCert, plainClient(c.ca, twoIDs), "refused: tlsconfig: certificate names 2 strata identities; want one"},
		{"require/unknown role", tlsconfig.RequireClientCert, plainClient(c.ca, unknownRole), `refused: tlsconfig: identity "spiffe://strata/admin/1": unknown role "admin"`},
		{"require/not for client auth", tlsconfig.RequireClientCert, plainClient(c.ca, serverOnly), ""},
		{"if given/no certificate", tlsconfig.VerifyClientCertIfGiven, plainClient(c.ca), "none"},
		{"if given/user", tlsconfig.VerifyClientCertIfGiven, plainClient(c.ca, issueClient(t, c.ca, "bob")), "User:bob"},
		{"if given/service", tlsconfig.VerifyClientCertIfGiven, plainClient(c.ca, issueService(t, c.ca, tlsconfig.RoleTiering, "t1")), "spiffe://strata/tiering/t1"},
		{"if given/another CA", tlsconfig.VerifyClientCertIfGiven, plainClient(c.ca, issueClient(t, other, "bob")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := dial("127.0.0.1", ports[tc.auth], tc.client)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("connection accepted, server answered %q; want it refused", res.reply)
			case tc.want != "" && err != nil:
				t.Fatalf("connection refused: %v; want %q", err, tc.want)
			case tc.want != "" && res.reply != tc.want:
				t.Fatalf("server answered %q, want %q", res.reply, tc.want)
			}
		})
	}
}

func TestServerProtocolVersions(t *testing.T) {
	c := newCluster(t)
	tls12 := func() *tls.Config {
		cfg := plainClient(c.ca)
		cfg.MaxVersion = tls.VersionTLS12
		return cfg
	}

	def := startTLSServer(t, serverConfig(t, load(t, c.files), tlsconfig.VerifyClientCertIfGiven))
	if res, err := dial("127.0.0.1", def, tls12()); err == nil {
		t.Errorf("default server accepted a TLS 1.2 client (answered %q)", res.reply)
	} else if !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.2 client refused with %v; want a protocol version error", err)
	}
	if _, err := dial("127.0.0.1", def, plainClient(c.ca)); err != nil {
		t.Errorf("default server refused a TLS 1.3 client: %v", err)
	}

	old := startTLSServer(t, serverConfig(t, load(t, c.files, tlsconfig.WithMinVersion(tls.VersionTLS12)), tlsconfig.RequireClientCert))
	res, err := dial("127.0.0.1", old, func() *tls.Config {
		cfg := tls12()
		cfg.GetClientCertificate = plainClient(c.ca, issueClient(t, c.ca, "carol")).GetClientCertificate
		return cfg
	}())
	if err != nil || res.reply != "User:carol" {
		t.Errorf("server allowing 1.2: TLS 1.2 client got %q, %v; want User:carol", res.reply, err)
	}
}

func TestServerConfigRefusals(t *testing.T) {
	c := newCluster(t)
	noCA := load(t, tlsconfig.Files{Cert: c.files.Cert, Key: c.files.Key})
	caOnly := load(t, tlsconfig.Files{CA: c.files.CA})
	full := load(t, c.files)
	for _, tc := range []struct {
		name string
		src  *tlsconfig.Source
		auth tlsconfig.ClientAuth
		want string
	}{
		{"require without a CA", noCA, tlsconfig.RequireClientCert, "needs a CA bundle"},
		{"no certificate", caOnly, tlsconfig.VerifyClientCertIfGiven, "needs a certificate and key"},
		{"unknown mode", full, 0, "unknown client auth mode"},
	} {
		if _, err := tc.src.ServerConfig(tc.auth); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ServerConfig error %v, want one containing %q", tc.name, err, tc.want)
		}
	}

	// Without a CA bundle a server asks for no certificate: a client that
	// has one is served as one without.
	port := startTLSServer(t, serverConfig(t, noCA, tlsconfig.VerifyClientCertIfGiven))
	res, err := dial("127.0.0.1", port, plainClient(c.ca, issueClient(t, c.ca, "dave")))
	if err != nil || res.reply != "none" {
		t.Errorf("server without CA: got %q, %v; want none", res.reply, err)
	}
}
