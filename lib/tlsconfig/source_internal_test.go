package tlsconfig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned returns a self-signed certificate with serial and its key,
// in PEM. (The external tests use devca, which this package's own tests
// cannot import.)
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestPollSettlesBeforeReporting drives the watcher's reload step by hand:
// a pair caught half-replaced is not reported, and contents that stay
// broken for two polls are.
func TestPollSettlesBeforeReporting(t *testing.T) {
	dir := t.TempDir()
	f := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	certA, keyA := selfSigned(t, 1)
	certB, keyB := selfSigned(t, 2)
	write(f.Cert, certA)
	write(f.Key, keyA)

	var reported []error
	s, err := Load(context.Background(), f,
		WithPollInterval(time.Hour), // no polls but the ones below
		WithLogger(slog.New(slog.DiscardHandler)),
		WithOnReload(func(err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	serial := func() int64 { return s.Certificate().Leaf.SerialNumber.Int64() }

	// The certificate is renamed into place; the poll lands before its key.
	write(f.Cert, certB)
	if tried, err := s.reload(true); tried || err != nil || s.Err() != nil || serial() != 1 {
		t.Fatalf("poll between certificate and key: tried %v, err %v, Err() %v, serial %d; want nothing done", tried, err, s.Err(), serial())
	}
	write(f.Key, keyB)
	if tried, err := s.reload(true); !tried || err != nil || serial() != 2 {
		t.Fatalf("poll after the key: tried %v, err %v, serial %d; want serial 2 loaded", tried, err, serial())
	}

	// Contents that stay broken are reported at the second poll, once.
	write(f.Key, keyA)
	if tried, _ := s.reload(true); tried || s.Err() != nil {
		t.Fatalf("first poll of a mismatched pair: tried %v, Err() %v; want it left to settle", tried, s.Err())
	}
	for i := 0; i < 3; i++ {
		s.reload(true)
	}
	if s.Err() == nil || serial() != 2 {
		t.Fatalf("after polls of a mismatched pair: Err() %v, serial %d; want the error and serial 2", s.Err(), serial())
	}
	if len(reported) != 2 || reported[0] != nil || reported[1] == nil {
		t.Errorf("OnReload saw %v; want the load of serial 2, then one error", reported)
	}

	// Reload, called by hand, reports at once.
	write(f.Cert, []byte("garbage"))
	if err := s.Reload(); err == nil {
		t.Error("Reload of a garbage certificate returned nil")
	}
}
