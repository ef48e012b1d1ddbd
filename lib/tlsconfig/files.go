package tlsconfig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// Files names the PEM files of one process's TLS setup. Every field may
// be empty; a process with all three empty runs without TLS.
//
// The same files serve both directions: a service presents Cert as a
// server and as a client of other services, and CA verifies its peers in
// both (clients' certificates on its listeners, the servers it calls).
type Files struct {
	// Cert is the certificate chain, leaf first, in PEM (--tls-cert,
	// STRATA_TLS_CERT). Blocks other than CERTIFICATE are skipped, so
	// one file may hold both the chain and the key.
	Cert string
	// Key is the leaf's private key in PEM: PKCS #8, SEC 1 (EC) or PKCS #1
	// (RSA), unencrypted (--tls-key, STRATA_TLS_KEY).
	Key string
	// CA is a PEM bundle of the CA certificates that verify peers
	// (--tls-client-ca on services, STRATA_TLS_CLIENT_CA; --tls-ca on the
	// CLI). Empty: a server asks for no client certificate and a client
	// verifies servers against the system's roots.
	CA string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// flagNames are the flags that set Files' fields, named in Validate's
// problems.
type flagNames struct{ cert, key, ca string }

var (
	serviceFlags = flagNames{cert: "tls-cert", key: "tls-key", ca: "tls-client-ca"}
	clientFlags  = flagNames{cert: "tls-cert", key: "tls-key", ca: "tls-ca"}
)

// ValidationError lists every problem [Files.Validate] found, one short
// line each in lib/serve's style (`--tls-cert "/etc/strata/tls.crt": no
// such file or directory`). It never quotes a file's contents.
type ValidationError struct {
	Problems []string
}

// Error is the problems joined by "; ", on one line.
func (e *ValidationError) Error() string { return strings.Join(e.Problems, "; ") }

// Validate checks the files of a service process at start: the
// certificate and key are given together, a CA bundle comes with them,
// each named file is readable and parses, the leaf certificate has not
// expired and the key matches it. Problems name the service flags
// (--tls-cert, --tls-key, --tls-client-ca). It returns nil or a
// *ValidationError with every problem found.
func (f Files) Validate() error { return f.validate(serviceFlags, true) }

// ValidateClient is [Files.Validate] for a client (the CLI, a load
// program): a CA bundle alone is fine (the client verifies servers but
// presents no certificate), and problems name --tls-ca instead of
// --tls-client-ca.
func (f Files) ValidateClient() error { return f.validate(clientFlags, false) }

func (f Files) validate(names flagNames, server bool) error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	switch {
	case f.Cert != "" && f.Key == "":
		add("--%s: needed with --%s", names.key, names.cert)
	case f.Cert == "" && f.Key != "":
		add("--%s: needed with --%s", names.cert, names.key)
	case server && f.Cert == "" && f.CA != "":
		add("--%s %q: needs --%s and --%s", names.ca, f.CA, names.cert, names.key)
	}
	raw, errs := readFiles(f)
	_, perrs := parseMaterial(f, raw, time.Now())
	errs = append(errs, perrs...)
	for _, e := range errs {
		problems = append(problems, e.flagLine(names))
	}
	if len(problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: problems}
}

// fileKind says which of Files' fields a problem is about.
type fileKind int

const (
	kindCert fileKind = iota
	kindKey
	kindCA
)

func (k fileKind) noun() string {
	return [...]string{"certificate", "key", "CA bundle"}[k]
}

func (k fileKind) flag(n flagNames) string {
	return [...]string{n.cert, n.key, n.ca}[k]
}

// fileError is one problem with one file (or, for a mismatch, the key and
// its certificate). Its text names paths and the problem, never contents.
type fileError struct {
	kind     fileKind
	path     string
	reason   string
	certPath string // set when the key does not match the certificate at certPath
}

func (e *fileError) Error() string {
	if e.certPath != "" {
		return fmt.Sprintf("tlsconfig: key %q does not match certificate %q", e.path, e.certPath)
	}
	return fmt.Sprintf("tlsconfig: %s %q: %s", e.kind.noun(), e.path, e.reason)
}

func (e *fileError) flagLine(n flagNames) string {
	if e.certPath != "" {
		return fmt.Sprintf("--%s %q does not match the certificate in --%s %q", n.key, e.path, n.cert, e.certPath)
	}
	return fmt.Sprintf("--%s %q: %s", e.kind.flag(n), e.path, e.reason)
}

// rawFiles is the contents of Files' three files, read in one pass so that
// change detection and parsing see the same bytes; nil for a field that is
// empty.
type rawFiles [3][]byte

func readFiles(f Files) (rawFiles, []*fileError) {
	var raw rawFiles
	var errs []*fileError
	for k, path := range [...]string{f.Cert, f.Key, f.CA} {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, &fileError{kind: fileKind(k), path: path, reason: readReason(err)})
			continue
		}
		raw[k] = b
	}
	return raw, errs
}

// readReason is the cause of a failed read without the path, which the
// caller names once.
func readReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, fs.ErrNotExist) {
			return "no such file"
		}
		if errors.Is(pe.Err, fs.ErrPermission) {
			return "permission denied"
		}
		return pe.Err.Error()
	}
	return err.Error()
}

// material is what the files hold once parsed.
type material struct {
	// cert is the certificate and key to present, with Leaf set; nil when
	// Files.Cert is empty.
	cert *tls.Certificate
	// pool verifies peers; nil when Files.CA is empty.
	pool *x509.CertPool
}

// parseMaterial parses raw as f's files. now decides whether the leaf has
// expired. It reports every problem found.
func parseMaterial(f Files, raw rawFiles, now time.Time) (*material, []*fileError) {
	m := &material{}
	var errs []*fileError
	fail := func(k fileKind, path, format string, args ...any) {
		errs = append(errs, &fileError{kind: k, path: path, reason: fmt.Sprintf(format, args...)})
	}
	var chain []*x509.Certificate
	var der [][]byte
	if raw[kindCert] != nil {
		var err error
		chain, der, err = parseCerts(raw[kindCert])
		switch {
		case err != nil:
			fail(kindCert, f.Cert, "%v", err)
		case now.After(chain[0].NotAfter):
			fail(kindCert, f.Cert, "expired at %s", chain[0].NotAfter.UTC().Format(time.RFC3339))
		}
	}
	var key crypto.Signer
	if raw[kindKey] != nil {
		var err error
		if key, err = parseKey(raw[kindKey]); err != nil {
			fail(kindKey, f.Key, "%v", err)
		}
	}
	if chain != nil && key != nil {
		if !publicKeysEqual(chain[0].PublicKey, key.Public()) {
			errs = append(errs, &fileError{kind: kindKey, path: f.Key, certPath: f.Cert})
		} else {
			m.cert = &tls.Certificate{Certificate: der, PrivateKey: key, Leaf: chain[0]}
		}
	}
	if raw[kindCA] != nil {
		certs, _, err := parseCerts(raw[kindCA])
		if err != nil {
			fail(kindCA, f.CA, "%v", err)
		} else {
			m.pool = x509.NewCertPool()
			for _, c := range certs {
				m.pool.AddCert(c)
			}
		}
	}
	return m, errs
}

// parseCerts parses every CERTIFICATE block of a PEM file, in order,
// skipping other blocks. The error is a few words, without the contents.
func parseCerts(b []byte) ([]*x509.Certificate, [][]byte, error) {
	var certs []*x509.Certificate
	var der [][]byte
	for n := 1; ; {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate %d does not parse", n)
		}
		certs = append(certs, c)
		der = append(der, block.Bytes)
		n++
	}
	if len(certs) == 0 {
		return nil, nil, errors.New("no PEM certificate")
	}
	return certs, der, nil
}

// parseKey parses the first private key block of a PEM file. Its errors
// never include the file's bytes, nor the parsers' messages (which could
// echo parts of them).
func parseKey(b []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM private key")
		}
		switch {
		case block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "":
			return nil, errors.New("encrypted private keys are not supported")
		case block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY"):
			continue
		}
		var key any
		var err error
		switch block.Type {
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%s does not parse", strings.ToLower(block.Type))
		}
		switch k := key.(type) {
		case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
			return k.(crypto.Signer), nil
		}
		return nil, fmt.Errorf("unsupported private key type %T", key)
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
