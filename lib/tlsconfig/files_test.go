package tlsconfig_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

func TestFilesValidate(t *testing.T) {
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	write := func(name string, b []byte) string {
		if err := os.WriteFile(path(name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path(name)
	}
	good := issueService(t, ca, tlsconfig.RoleStorage, "1")
	cert, key := writePair(t, dir, "good", good)
	_, otherKey := writePair(t, dir, "other", issueService(t, ca, tlsconfig.RoleStorage, "1"))
	caFile := write("ca.crt", ca.CertPEM)
	expired, err := ca.Issue(&x509.Certificate{
		Subject:   pkix.Name{CommonName: "late"},
		NotBefore: time.Now().Add(-48 * time.Hour),
		NotAfter:  time.Now().Add(-24 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey := writePair(t, dir, "expired", expired)
	// The same key in SEC 1 form ("EC PRIVATE KEY"), as openssl writes it.
	block, _ := pem.Decode(good.KeyPEM)
	pk, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(pk.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	sec1 := write("sec1.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	combined := write("combined.pem", append(append([]byte(nil), good.CertPEM...), good.KeyPEM...))
	secretGarbage := "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49c2VjcmV0LWtleS1tYXRlcmlhbA=="
	garbageKey := write("garbage.key", []byte("-----BEGIN PRIVATE KEY-----\n"+secretGarbage+"\n-----END PRIVATE KEY-----\n"))
	encrypted := write("encrypted.key", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")}))
	notPEM := write("notpem", []byte("hello\n"))
	missing := path("missing.crt")

	for _, tc := range []struct {
		name   string
		files  tlsconfig.Files
		client bool     // ValidateClient instead of Validate
		want   []string // the problems, in order
	}{
		{name: "nothing", files: tlsconfig.Files{}},
		{name: "all good", files: tlsconfig.Files{Cert: cert, Key: key, CA: caFile}},
		{name: "cert and key only", files: tlsconfig.Files{Cert: cert, Key: key}},
		{name: "SEC 1 key", files: tlsconfig.Files{Cert: cert, Key: sec1}},
		{name: "one file", files: tlsconfig.Files{Cert: combined, Key: combined, CA: caFile}},
		{name: "CA only, client", files: tlsconfig.Files{CA: caFile}, client: true},
		{name: "CA only, service", files: tlsconfig.Files{CA: caFile},
			want: []string{fmt.Sprintf("--tls-client-ca %q: needs --tls-cert and --tls-key", caFile)}},
		{name: "cert without key", files: tlsconfig.Files{Cert: cert},
			want: []string{"--tls-key: needed with --tls-cert"}},
		{name: "key without cert", files: tlsconfig.Files{Key: key}, client: true,
			want: []string{"--tls-cert: needed with --tls-key"}},
		{name: "missing cert", files: tlsconfig.Files{Cert: missing, Key: key},
			want: []string{fmt.Sprintf("--tls-cert %q: no such file", missing)}},
		{name: "not PEM", files: tlsconfig.Files{Cert: notPEM, Key: notPEM, CA: notPEM},
			want: []string{
				fmt.Sprintf("--tls-cert %q: no PEM certificate", notPEM),
				fmt.Sprintf("--tls-key %q: no PEM private key", notPEM),
				fmt.Sprintf("--tls-client-ca %q: no PEM certificate", notPEM),
			}},
		{name: "bad CA, client", files: tlsconfig.Files{CA: notPEM}, client: true,
			want: []string{fmt.Sprintf("--tls-ca %q: no PEM certificate", notPEM)}},
		{name: "key of another cert", files: tlsconfig.Files{Cert: cert, Key: otherKey, CA: caFile},
			want: []string{fmt.Sprintf("--tls-key %q does not match the certificate in --tls-cert %q", otherKey, cert)}},
		{name: "garbage key", files: tlsconfig.Files{Cert: cert, Key: garbageKey},
			want: []string{fmt.Sprintf("--tls-key %q: private key does not parse", garbageKey)}},
		{name: "encrypted key", files: tlsconfig.Files{Cert: cert, Key: encrypted},
			want: []string{fmt.Sprintf("--tls-key %q: encrypted private keys are not supported", encrypted)}},
		{name: "expired", files: tlsconfig.Files{Cert: expiredCert, Key: expiredKey},
			want: []string{fmt.Sprintf("--tls-cert %q: expired at %s", expiredCert, expired.Cert.NotAfter.UTC().Format(time.RFC3339))}},
		{name: "everything wrong", files: tlsconfig.Files{Cert: missing, Key: garbageKey, CA: notPEM},
			want: []string{
				fmt.Sprintf("--tls-cert %q: no such file", missing),
				fmt.Sprintf("--tls-key %q: private key does not parse", garbageKey),
				fmt.Sprintf("--tls-client-ca %q: no PEM certificate", notPEM),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			validate := tc.files.Validate
			if tc.client {
				validate = tc.files.ValidateClient
			}
			err := validate()
			var got []string
			var ve *tlsconfig.ValidationError
			switch {
			case err == nil:
			case errors.As(err, &ve):
				got = ve.Problems
			default:
				t.Fatalf("error %T %v; want a *ValidationError", err, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if err != nil && err.Error() != strings.Join(tc.want, "; ") {
				t.Errorf("Error() = %q; want the problems joined by \"; \"", err)
			}
			if err != nil && strings.Contains(err.Error(), secretGarbage[:20]) {
				t.Errorf("error quotes the key file: %v", err)
			}
		})
	}
}
