package devcluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// `strata dev --secure` runs the cluster as a deployment with security on
// would: TLS on every listener, mutual TLS between the services, every
// request authenticated and ACLs enforced. Its files (docs/design/
// dev-cluster.md, "Secure mode"):
//
//	DIR/tls/ca.pem, ca-key.pem       the dev CA (lib/tlsconfig/devca); the key 0600
//	DIR/tls/<service>-<id>.pem, -key.pem   each process's certificate: spiffe://strata/<service>/<id>
//	DIR/tls/admin.pem, admin-key.pem the admin's client certificate, CN admin (User:admin)
//	DIR/admin.env                    export lines for the CLI, 0600
//	DIR/logs/<service>-<id>.audit.log each process's audit log (lib/audit), 0600
//
// A later run with the same DIR reuses the CA and every certificate that is
// still good (signed by that CA, the right identity, valid for a day
// more), so a process restarted from cluster.json's argv finds its files,
// and a sourced admin.env stays valid. cluster.json names these files,
// never their contents.

// Names in DIR.
const (
	tlsDirName   = "tls"
	adminEnvName = "admin.env"
	// adminUser is the admin's certificate CN: every service takes
	// User:admin as a super user.
	adminUser = "admin"
	caName    = "Strata dev CA"
)

// renewBefore is how long a reused certificate must still be valid; one
// expiring sooner is issued anew.
const renewBefore = 24 * time.Hour

func tlsDir(dir string) string { return filepath.Join(dir, tlsDirName) }

// caFiles are the dev CA's certificate (the bundle every process and the
// CLI verify peers with) and key.
func caFiles(dir string) (cert, key string) {
	return filepath.Join(tlsDir(dir), "ca.pem"), filepath.Join(tlsDir(dir), "ca-key.pem")
}

// certFiles are the certificate and key of name ("storage-2", "admin").
func certFiles(dir, name string) (cert, key string) {
	return filepath.Join(tlsDir(dir), name+".pem"), filepath.Join(tlsDir(dir), name+"-key.pem")
}

// identity is the service identity of a planned process:
// spiffe://strata/<service>/<id>.
func identity(s procSpec) tlsconfig.Identity {
	return tlsconfig.Identity{Role: tlsconfig.Role(s.service), ID: strconv.Itoa(s.id)}
}

// processSecurity is the security flags of process s in a secure cluster
// in dir.
func processSecurity(dir string, s procSpec) launch.Security {
	cert, key := certFiles(dir, s.name())
	ca, _ := caFiles(dir)
	return launch.Security{
		TLSCert:     cert,
		TLSKey:      key,
		TLSClientCA: ca,
		RequireAuth: true,
		SuperUsers:  []string{"User:" + adminUser},
		AuditLog:    auditLogFile(dir, s),
	}
}

// auditLogFile is where process s of a secure cluster in dir writes its
// audit log: DIR/logs/<service>-<id>.audit.log, next to its log.
func auditLogFile(dir string, s procSpec) string {
	return filepath.Join(dir, "logs", s.name()+".audit.log")
}

// openCA loads dir's dev CA, or creates it (and DIR/tls, mode 0700) when
// there is none. A CA whose files exist but do not load is an error, not
// replaced: every certificate and admin.env issued from it would silently
// stop working.
func openCA(dir string) (*devca.CA, error) {
	if err := os.MkdirAll(tlsDir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("--secure: %v", err)
	}
	if err := os.Chmod(tlsDir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("--secure: %v", err)
	}
	certFile, keyFile := caFiles(dir)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if certErr == nil || keyErr == nil {
		ca, err := devca.Load(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--secure: the dev CA in %s does not load (%v); delete %s to start over with a new one", tlsDir(dir), err, tlsDir(dir))
		}
		return ca, nil
	}
	ca, err := devca.New(caName)
	if err != nil {
		return nil, fmt.Errorf("--secure: %v", err)
	}
	if err := ca.WriteFiles(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("--secure: %v", err)
	}
	return ca, nil
}

// ensureCert makes sure name's certificate and key in DIR/tls are good
// (see reusable), issuing them with issue when they are not.
func ensureCert(dir, name string, ca *devca.CA, want func(*x509.Certificate) bool, issue func() (*devca.Cert, error)) error {
	certFile, keyFile := certFiles(dir, name)
	if reusable(certFile, keyFile, ca, want) {
		return nil
	}
	c, err := issue()
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	if err := c.WriteFiles(certFile, keyFile); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

// reusable reports whether certFile and keyFile hold a pair signed by ca,
// valid for renewBefore more, that want accepts.
func reusable(certFile, keyFile string, ca *devca.CA, want func(*x509.Certificate) bool) bool {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil || pair.Leaf == nil {
		return false
	}
	leaf := pair.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return false
	}
	if time.Until(leaf.NotAfter) < renewBefore {
		return false
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm()&0o077 != 0 {
		return false // a key others can read is not kept
	}
	return want(leaf)
}

// ensureServiceCert makes sure process s has its certificate.
func ensureServiceCert(dir string, ca *devca.CA, s procSpec) error {
	id := identity(s)
	return ensureCert(dir, s.name(), ca,
		func(c *x509.Certificate) bool { got, ok := tlsconfig.IdentityOf(c); return ok && got == id },
		func() (*devca.Cert, error) { return ca.IssueService(id) })
}

// prepareSecure opens the dev CA, makes sure the admin's certificate and
// every planned process's certificate are there, and writes DIR/admin.env
// for gateway.
func prepareSecure(dir string, pl plan, gateway string) (*devca.CA, error) {
	ca, err := openCA(dir)
	if err != nil {
		return nil, err
	}
	err = ensureCert(dir, adminUser, ca,
		func(c *x509.Certificate) bool {
			p, err := tlsconfig.PrincipalOf(c)
			return err == nil && !p.IsService() && p.User == adminUser
		},
		func() (*devca.Cert, error) { return ca.IssueClient(adminUser) })
	if err != nil {
		return nil, fmt.Errorf("--secure: %v", err)
	}
	for _, s := range pl.all() {
		if err := ensureServiceCert(dir, ca, s); err != nil {
			return nil, fmt.Errorf("--secure: %v", err)
		}
	}
	if err := writeAdminEnv(dir, gateway); err != nil {
		return nil, err
	}
	return ca, nil
}

// adminEnv is the content of DIR/admin.env: after `source DIR/admin.env`
// the CLI is the admin of the cluster whose gateway is gateway.
func adminEnv(dir, gateway string) string {
	ca, _ := caFiles(dir)
	cert, key := certFiles(dir, adminUser)
	var b strings.Builder
	b.WriteString("# strata dev --secure: the admin's credentials for the strata CLI. source this file.\n")
	for _, kv := range [][2]string{
		{"STRATA_GATEWAY", gateway},
		{"STRATA_TLS_CA", ca},
		{"STRATA_TLS_CERT", cert},
		{"STRATA_TLS_KEY", key},
	} {
		fmt.Fprintf(&b, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
	return b.String()
}

// writeAdminEnv writes DIR/admin.env with mode 0600, by rename, so a
// reader never sees half of it.
func writeAdminEnv(dir, gateway string) error {
	tmp, err := os.CreateTemp(dir, "."+adminEnvName+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.WriteString(adminEnv(dir, gateway)); err != nil {
		tmp.Close()
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, adminEnvName)); err != nil {
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	return nil
}

// removeAdminEnv deletes an admin.env an earlier secure run left: this run
// is plain, and the file would point the CLI at https:// URLs.
func removeAdminEnv(dir string) error {
	if err := os.Remove(filepath.Join(dir, adminEnvName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %v", adminEnvName, err)
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// characters that are safe bare.
func shellQuote(s string) string {
	safe := s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:+,=@%", r))
	})
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// readyClient is the client /readyz is asked with: plain, or, in a secure
// cluster, TLS verifying the processes against the dev CA (the admin
// listeners ask for no client certificate).
func readyClient(ca *devca.CA) *http.Client {
	if ca == nil {
		return &http.Client{Timeout: time.Second}
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13},
	}}
}
