// Package devca is a small certificate authority for `strata dev --secure`
// and for tests: it creates a CA, issues service certificates that carry a
// Strata identity (see tlsconfig.Identity) and client certificates that
// name a user, and writes them as PEM files that lib/tlsconfig reads. It
// uses the standard library only.
//
// It is not a production CA: it keeps no record of what it issued and
// cannot revoke. In production, certificates come from the operator's CA
// (cert-manager in Kubernetes) with the same SANs.
//
// Choices, all ECDSA P-256 with SHA-256 signatures:
//
//   - The CA is valid for [CAValidity] (10 years), so that a dev
//     directory's CA, and the CA path written in its admin.env, outlive
//     any session; it signs leaves only (path length 0).
//   - Leaves are valid for [CertValidity] (1 year): long enough for a dev
//     cluster to be restarted for months with the same files, short
//     enough that a leaked one expires. A caller that keeps a directory
//     longer issues new leaves from the same CA ([Load]).
//   - Every certificate is valid from [Backdate] before its issue, so a
//     peer whose clock is slightly behind accepts it.
//   - Serial numbers are 128 random bits.
//   - A service certificate is for server and client authentication
//     (services call each other); a client certificate for client
//     authentication only, so a user's certificate cannot serve.
//   - Keys are written in PKCS #8 with mode 0600, certificates with mode
//     0644, each by writing a temporary file and renaming it over the
//     target, so a process reloading them never reads half a file.
//
// A CA is safe for concurrent use once made.
package devca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Validity periods and clock allowance; see the package doc.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
	Backdate     = 5 * time.Minute
)

// File modes of what WriteFiles writes.
const (
	CertFileMode os.FileMode = 0o644
	KeyFileMode  os.FileMode = 0o600
)

// CA is a certificate authority: its certificate and signing key.
type CA struct {
	// Cert is the CA's self-signed certificate.
	Cert *x509.Certificate
	// CertPEM is Cert in PEM, the bundle peers verify against (the file of
	// --tls-client-ca and --tls-ca).
	CertPEM []byte
	key     crypto.Signer
}

// New creates a CA named name (its Subject CN, such as "Strata dev CA")
// with a new key.
func New(name string) (*CA, error) {
	if name == "" {
		return nil, errors.New("devca: empty CA name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Strata"}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devca: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: certPEM(der), key: key}, nil
}

// Load reads a CA written by [CA.WriteFiles], so that a dev directory
// keeps its CA across runs.
func Load(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	block, _ := pem.Decode(cb)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("devca: %s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devca: %s: certificate does not parse", certFile)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("devca: %s: not a CA certificate", certFile)
	}
	block, _ = pem.Decode(kb)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("devca: %s: no PKCS #8 PEM private key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devca: %s: private key does not parse", keyFile)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("devca: %s: not a signing key", keyFile)
	}
	if pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("devca: key %s does not match certificate %s", keyFile, certFile)
	}
	return &CA{Cert: cert, CertPEM: certPEM(cert.Raw), key: key}, nil
}

// WriteFiles writes the CA's certificate to certFile (mode 0644) and its
// key to keyFile (mode 0600). The directory must exist.
func (ca *CA) WriteFiles(certFile, keyFile string) error {
	kb, err := keyPEM(ca.key)
	if err != nil {
		return err
	}
	if err := writeFile(keyFile, kb, KeyFileMode); err != nil {
		return err
	}
	return writeFile(certFile, ca.CertPEM, CertFileMode)
}

// Pool returns a new pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Cert is an issued certificate with its key.
type Cert struct {
	// Cert is the certificate.
	Cert *x509.Certificate
	// CertPEM is the certificate in PEM (the CA is not appended: peers
	// hold it).
	CertPEM []byte
	// KeyPEM is the private key in PKCS #8 PEM. It is a secret.
	KeyPEM []byte
	key    crypto.Signer
}

// TLS returns c as a tls.Certificate, with Leaf set.
func (c *Cert) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.key, Leaf: c.Cert}
}

// WriteFiles writes the certificate to certFile (mode 0644) and the key to
// keyFile (mode 0600), each by rename. A process polling the pair may find
// the new key beside the old certificate for a moment; lib/tlsconfig
// waits a poll before reporting that. The directory must exist.
func (c *Cert) WriteFiles(certFile, keyFile string) error {
	if err := writeFile(keyFile, c.KeyPEM, KeyFileMode); err != nil {
		return err
	}
	return writeFile(certFile, c.CertPEM, CertFileMode)
}

// Issue signs template for a new P-256 key. It fills what template leaves
// zero: SerialNumber (random), NotBefore ([Backdate] ago), NotAfter
// ([CertValidity] from now) and KeyUsage (digital signature). Tests use
// it for certificates IssueService and IssueClient refuse to make (two
// identities, an unknown role, an expired certificate); template is not
// modified.
func (ca *CA) Issue(template *x509.Certificate) (*Cert, error) {
	tmpl := *template
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: key: %w", err)
	}
	now := time.Now()
	if tmpl.SerialNumber == nil {
		if tmpl.SerialNumber, err = newSerial(); err != nil {
			return nil, err
		}
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-Backdate)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(CertValidity)
	}
	if tmpl.KeyUsage == 0 {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("devca: certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: certificate: %w", err)
	}
	kb, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Cert{Cert: cert, CertPEM: certPEM(der), KeyPEM: kb, key: key}, nil
}

// IssueService issues the certificate of the service id: its identity URI
// as the only URI SAN, for server and client authentication, valid for
// localhost, 127.0.0.1 and ::1 and for each of hosts (an IP address or a
// DNS name, such as a Kubernetes service name).
func (ca *CA) IssueService(id tlsconfig.Identity, hosts ...string) (*Cert, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	cn := string(id.Role)
	if id.ID != "" {
		cn += " " + id.ID
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"Strata"}},
		URIs:        []*url.URL{id.URL()},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case h == "":
			return nil, errors.New("devca: empty host name")
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.Issue(tmpl)
}

// IssueClient issues a user's client certificate: Subject CN user (see
// tlsconfig.CheckUserName), no SAN, for client authentication only. A
// server reads it as the principal "User:<user>".
func (ca *CA) IssueClient(user string) (*Cert, error) {
	if err := tlsconfig.CheckUserName(user); err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	return ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("devca: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never 0
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("devca: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFile writes data to path with exactly mode (whatever the umask) by
// renaming a temporary file of the same directory over it.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devca: writing %s: %w", path, err)
	}
	return nil
}
