package harness

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

// TestClusterSecurityFiles: a secure cluster's files carry the identities
// strata dev --secure gives (the service's URI SAN, the admin's CN), keys
// are private, and asking again gives the same files.
func TestClusterSecurityFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	s, err := newClusterSecurity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("tls dir: %v, err %v; want mode 0700", st, err)
	}
	load := func(cr Credentials) *tls.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(cr.Cert, cr.Key)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(cr.Key); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, err %v; want mode 0600", cr.Key, st, err)
		}
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: s.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s is not signed by the cluster's CA: %v", cr.Cert, err)
		}
		return &pair
	}

	if want := filepath.Join(dir, "admin.pem"); s.admin.Cert != want || s.admin.Principal != "User:admin" || s.admin.CA != filepath.Join(dir, "ca.pem") {
		t.Errorf("admin credentials %+v; want %s, User:admin and the CA", s.admin, want)
	}
	p, err := tlsconfig.PrincipalOf(load(s.admin).Leaf)
	if err != nil || p.IsService() || p.User != AdminUser {
		t.Errorf("admin certificate's principal %v (err %v), want User:admin", p, err)
	}

	id := tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "3"}
	node, err := s.service(id)
	if err != nil {
		t.Fatal(err)
	}
	if node.Cert != filepath.Join(dir, "storage-3.pem") || node.Principal != "Service:storage/3" {
		t.Errorf("storage 3 credentials %+v", node)
	}
	if got, ok := tlsconfig.IdentityOf(load(node).Leaf); !ok || got != id {
		t.Errorf("storage 3 certificate names %v (%v), want %v", got, ok, id)
	}
	again, err := s.service(id)
	if err != nil || again != node {
		t.Errorf("second ask for storage 3: %+v, err %v; want the same files %+v", again, err, node)
	}
	sec, err := s.processSecurity(id)
	if err != nil || sec.TLSCert != node.Cert || sec.TLSKey != node.Key || sec.TLSClientCA != s.caFile ||
		!sec.RequireAuth || !slices.Equal(sec.SuperUsers, []string{"User:admin"}) {
		t.Errorf("storage 3 flags %+v, err %v", sec, err)
	}
}

func TestCredentialsFlagsAndOptions(t *testing.T) {
	for _, tc := range []struct {
		cr   Credentials
		want []string
		opts int // client options: TLSCA, ClientCertificate, Token
	}{
		{Credentials{}, nil, 0},
		{Credentials{CA: "/ca.pem"}, []string{"--tls-ca", "/ca.pem"}, 1},
		{Credentials{CA: "/ca.pem", Cert: "/u.pem", Key: "/u-key.pem"}, []string{"--tls-ca", "/ca.pem", "--tls-cert", "/u.pem", "--tls-key", "/u-key.pem"}, 2},
		{Credentials{CA: "/ca.pem", Token: "strata_x"}, []string{"--tls-ca", "/ca.pem", "--token", "strata_x"}, 2},
	} {
		if got := tc.cr.CLIArgs(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: CLIArgs %q, want %q", tc.cr, got, tc.want)
		}
		if got := len(tc.cr.ClientOpts()); got != tc.opts {
			t.Errorf("%+v: %d client options, want %d", tc.cr, got, tc.opts)
		}
	}
}
