package tlsconfig_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// serveCert starts a server presenting cert (issued by ca) that requires
// client certificates from ca, and returns its port.
func serveCert(t *testing.T, ca *devca.CA, cert *devca.Cert) string {
	t.Helper()
	dir := t.TempDir()
	certPath, keyPath := writePair(t, dir, "server", cert)
	caPath := filepath.Join(dir, "ca.crt")
	writeBundle(t, caPath, ca)
	src := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath, CA: caPath})
	return startTLSServer(t, serverConfig(t, src, tlsconfig.RequireClientCert))
}

func TestClientConfigVerifiesServer(t *testing.T) {
	ca := newCA(t, "test CA")
	other := newCA(t, "another CA")
	controller := serveCert(t, ca, issueService(t, ca, tlsconfig.RoleController, "1"))
	storage := serveCert(t, ca, issueService(t, ca, tlsconfig.RoleStorage, "4"))
	// A server certificate valid for its names but naming no identity.
	plain, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "plain"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	noIdentity := serveCert(t, ca, plain)
	foreign := serveCert(t, ca, issueService(t, other, tlsconfig.RoleController, "1"))

	dir := t.TempDir()
	certPath, keyPath := writePair(t, dir, "client", issueService(t, ca, tlsconfig.RoleStorage, "7"))
	caPath := filepath.Join(dir, "ca.crt")
	writeBundle(t, caPath, ca)
	src := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath, CA: caPath})

	// want is the server's line (the principal it read from the client's
	// certificate), or the refusal's text after "!".
	for _, tc := range []struct {
		name  string
		host  string
		port  string
		roles []tlsconfig.Role
		want  string
	}{
		{"by name", "localhost", controller, nil, "spiffe://strata/storage/7"},
		{"by address", "127.0.0.1", controller, nil, "spiffe://strata/storage/7"},
		{"by name, right role", "localhost", controller, []tlsconfig.Role{tlsconfig.RoleController}, "spiffe://strata/storage/7"},
		{"by address, one of the roles", "127.0.0.1", storage, []tlsconfig.Role{tlsconfig.RoleController, tlsconfig.RoleStorage}, "spiffe://strata/storage/7"},
		{"wrong role", "127.0.0.1", storage, []tlsconfig.Role{tlsconfig.RoleController}, "!server is spiffe://strata/storage/4; want a controller"},
		{"wrong role by name", "localhost", storage, []tlsconfig.Role{tlsconfig.RoleController, tlsconfig.RoleGateway}, "!want a controller or gateway"},
		{"no identity by name", "localhost", noIdentity, nil, "spiffe://strata/storage/7"},
		{"no identity by address", "127.0.0.1", noIdentity, nil, "!server reached by IP address: its certificate must name a strata service identity"},
		{"no identity, role wanted", "localhost", noIdentity, []tlsconfig.Role{tlsconfig.RoleController}, "!certificate names no strata identity"},
		{"another CA", "localhost", foreign, nil, "!certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := dial(tc.host, tc.port, src.ClientConfig(tc.roles...))
			if refusal, ok := strings.CutPrefix(tc.want, "!"); ok {
				if err == nil || !strings.Contains(err.Error(), refusal) {
					t.Fatalf("got %q, %v; want a refusal containing %q", res.reply, err, refusal)
				}
				return
			}
			if err != nil || res.reply != tc.want {
				t.Fatalf("got %q, %v; want %q", res.reply, err, tc.want)
			}
		})
	}

	// A server name set on the config, as a caller may, is checked.
	cfg := src.ClientConfig()
	cfg.ServerName = "elsewhere.example"
	if res, err := dial("localhost", controller, cfg); err == nil || !strings.Contains(err.Error(), "not elsewhere.example") {
		t.Errorf("server name not in the certificate: got %q, %v; want a refusal naming it", res.reply, err)
	}
}

func TestClientConfigWithoutCertificate(t *testing.T) {
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	certPath, keyPath := writePair(t, dir, "server", issueService(t, ca, tlsconfig.RoleGateway, ""))
	caPath := filepath.Join(dir, "ca.crt")
	writeBundle(t, caPath, ca)
	server := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath, CA: caPath})
	ifGiven := startTLSServer(t, serverConfig(t, server, tlsconfig.VerifyClientCertIfGiven))
	required := startTLSServer(t, serverConfig(t, server, tlsconfig.RequireClientCert))

	// A CLI with --tls-ca only.
	cli := load(t, tlsconfig.Files{CA: caPath})
	if res, err := dial("localhost", ifGiven, cli.ClientConfig()); err != nil || res.reply != "none" {
		t.Errorf("verify-if-given server: %q, %v; want none", res.reply, err)
	}
	if res, err := dial("localhost", required, cli.ClientConfig()); err == nil {
		t.Errorf("server requiring a certificate answered %q to a client without one", res.reply)
	}
}

func TestClientConfigReloads(t *testing.T) {
	ca := newCA(t, "test CA")
	next := newCA(t, "next CA")
	port := serveCert(t, next, issueService(t, next, tlsconfig.RoleController, ""))

	dir := t.TempDir()
	certPath, keyPath := writePair(t, dir, "client", issueService(t, ca, tlsconfig.RoleStorage, "1"))
	caPath := filepath.Join(dir, "ca.crt")
	writeBundle(t, caPath, ca)
	src := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath, CA: caPath})
	cfg := src.ClientConfig(tlsconfig.RoleController) // made once, as a long-lived http.Transport's

	if res, err := dial("localhost", port, cfg); err == nil {
		t.Fatalf("server of an untrusted CA answered %q", res.reply)
	}
	// The client learns the new CA and gets a certificate from it.
	writeBundle(t, caPath, ca, next)
	writePair(t, dir, "client", issueService(t, next, tlsconfig.RoleStorage, "2"))
	testwait.Until(t, waitTimeout, "the server to accept the client's new certificate", func() error {
		res, err := dial("localhost", port, cfg)
		if err != nil {
			return err
		}
		if res.reply != "spiffe://strata/storage/2" {
			return fmt.Errorf("server saw %q", res.reply)
		}
		return nil
	})
}
