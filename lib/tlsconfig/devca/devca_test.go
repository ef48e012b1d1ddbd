package devca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

func newCA(t *testing.T) *devca.CA {
	t.Helper()
	ca, err := devca.New("Strata dev CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestCA(t *testing.T) {
	ca := newCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA %v, valid %v, MaxPathLen %d (zero %v); want a CA signing leaves only",
			c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA key usage %v lacks cert signing", c.KeyUsage)
	}
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", c.PublicKey)
	}
	if got := c.NotAfter.Sub(c.NotBefore); got != devca.CAValidity+devca.Backdate {
		t.Errorf("CA valid for %v, want %v", got, devca.CAValidity+devca.Backdate)
	}
	if c.Subject.CommonName != "Strata dev CA" {
		t.Errorf("CA subject %q", c.Subject)
	}
	if _, err := devca.New(""); err == nil {
		t.Error("New(\"\") succeeded")
	}
}

func verify(t *testing.T, ca *devca.CA, c *x509.Certificate, usage x509.ExtKeyUsage, host string) error {
	t.Helper()
	_, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: host})
	return err
}

func TestIssueService(t *testing.T) {
	ca := newCA(t)
	id := tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "3"}
	c, err := ca.IssueService(id, "storage-3.strata.svc", "10.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.Cert
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "storage-3.strata.svc", "10.0.0.3"} {
		if err := verify(t, ca, leaf, x509.ExtKeyUsageServerAuth, host); err != nil {
			t.Errorf("as a server for %s: %v", host, err)
		}
	}
	if err := verify(t, ca, leaf, x509.ExtKeyUsageServerAuth, "example.com"); err == nil {
		t.Error("valid for example.com")
	}
	if err := verify(t, ca, leaf, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("as a client: %v", err)
	}
	if err := verify(t, newCA(t), leaf, x509.ExtKeyUsageClientAuth, ""); err == nil {
		t.Error("verified by another CA")
	}
	if got, ok := tlsconfig.IdentityOf(leaf); !ok || got != id {
		t.Errorf("IdentityOf = %v, %v; want %v", got, ok, id)
	}
	if len(leaf.URIs) != 1 {
		t.Errorf("URI SANs %v; want the identity only", leaf.URIs)
	}
	wantIPs := []string{"127.0.0.1", "::1", "10.0.0.3"}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, wantIPs) || !slices.Equal(leaf.DNSNames, []string{"localhost", "storage-3.strata.svc"}) {
		t.Errorf("SANs: IPs %v, DNS %v", ips, leaf.DNSNames)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != devca.CertValidity+devca.Backdate {
		t.Errorf("valid for %v, want %v", got, devca.CertValidity+devca.Backdate)
	}
	if leaf.IsCA {
		t.Error("a service certificate is a CA")
	}

	for _, bad := range []tlsconfig.Identity{{Role: "admin"}, {Role: tlsconfig.RoleStorage}, {Role: tlsconfig.RoleGateway, ID: "a/b"}} {
		if _, err := ca.IssueService(bad); err == nil {
			t.Errorf("IssueService(%+v) succeeded", bad)
		}
	}
	if _, err := ca.IssueService(id, ""); err == nil {
		t.Error("IssueService with an empty host succeeded")
	}
}

func TestIssueClient(t *testing.T) {
	ca := newCA(t)
	c, err := ca.IssueClient("alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, ca, c.Cert, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("as a client: %v", err)
	}
	if err := verify(t, ca, c.Cert, x509.ExtKeyUsageServerAuth, ""); err == nil {
		t.Error("a user's certificate can serve")
	}
	if p, err := tlsconfig.PrincipalOf(c.Cert); err != nil || p.String() != "User:alice" {
		t.Errorf("PrincipalOf = %q, %v; want User:alice", p, err)
	}
	if len(c.Cert.URIs)+len(c.Cert.DNSNames)+len(c.Cert.IPAddresses) != 0 {
		t.Errorf("client certificate has SANs: %v %v %v", c.Cert.URIs, c.Cert.DNSNames, c.Cert.IPAddresses)
	}
	if _, err := ca.IssueClient("a\tb"); err == nil {
		t.Error("IssueClient with a tab in the name succeeded")
	}
}

func TestWriteFilesAndLoad(t *testing.T) {
	// A umask that would widen or narrow the modes must not matter.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	dir := t.TempDir()
	ca := newCA(t)
	caCert, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := ca.WriteFiles(caCert, caKey); err != nil {
		t.Fatal(err)
	}
	svc, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	svcCert, svcKey := filepath.Join(dir, "controller-1.crt"), filepath.Join(dir, "controller-1.key")
	if err := svc.WriteFiles(svcCert, svcKey); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{caCert: 0o644, caKey: 0o600, svcCert: 0o644, svcKey: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), got, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Errorf("directory holds %d entries, want the 4 files (no temporary left)", len(entries))
	}
	b, err := os.ReadFile(svcKey)
	if err != nil || !strings.HasPrefix(string(b), "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("key file: %.40q, %v; want PKCS #8 PEM", b, err)
	}

	// What was written is what lib/tlsconfig reads, and a reloaded CA
	// issues certificates the first one's bundle verifies.
	files := tlsconfig.Files{Cert: svcCert, Key: svcKey, CA: caCert}
	if err := files.Validate(); err != nil {
		t.Errorf("written files do not validate: %v", err)
	}
	again, err := devca.Load(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(ca.Cert) || string(again.CertPEM) != string(ca.CertPEM) {
		t.Error("loaded CA differs from the one written")
	}
	leaf, err := again.IssueClient("bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, ca, leaf.Cert, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("certificate of the loaded CA: %v", err)
	}

	if _, err := devca.Load(svcCert, svcKey); err == nil {
		t.Error("Load accepted a leaf as a CA")
	}
	if _, err := devca.Load(caCert, svcKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Load of a CA with another key: %v", err)
	}
}

func TestIssueFillsTemplate(t *testing.T) {
	ca := newCA(t)
	notAfter := time.Now().Add(time.Hour).Truncate(time.Second)
	tmpl := &x509.Certificate{NotAfter: notAfter, IPAddresses: []net.IP{net.IPv4(10, 1, 1, 1)}}
	c, err := ca.Issue(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cert.NotAfter.Equal(notAfter) || c.Cert.SerialNumber.Sign() <= 0 || c.Cert.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("issued NotAfter %v, serial %v, key usage %v", c.Cert.NotAfter, c.Cert.SerialNumber, c.Cert.KeyUsage)
	}
	if tmpl.SerialNumber != nil || !tmpl.NotBefore.IsZero() {
		t.Error("Issue modified its template")
	}
	other, err := ca.Issue(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if other.Cert.SerialNumber.Cmp(c.Cert.SerialNumber) == 0 {
		t.Error("two certificates with one serial number")
	}
}
