package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// waitServerSerial waits until a new connection to port is served with
// the certificate whose serial is want.
func waitServerSerial(t *testing.T, port string, client *tls.Config, want *big.Int) {
	t.Helper()
	testwait.Until(t, waitTimeout, "the server to present serial "+want.Text(16), func() error {
		res, err := dial("127.0.0.1", port, client)
		if err != nil {
			return err
		}
		if res.serial.Cmp(want) != 0 {
			return fmt.Errorf("serial %s", res.serial.Text(16))
		}
		return nil
	})
}

func TestReloadRenamedFiles(t *testing.T) {
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	first := issueService(t, ca, tlsconfig.RoleStorage, "1")
	certPath, keyPath := writePair(t, dir, "tls", first)
	src := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath})
	port := startTLSServer(t, serverConfig(t, src, tlsconfig.VerifyClientCertIfGiven))
	client := plainClient(ca)

	if res, err := dial("127.0.0.1", port, client); err != nil || res.serial.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("first connection: %+v, %v; want serial %s", res, err, first.Cert.SerialNumber.Text(16))
	}
	second := issueService(t, ca, tlsconfig.RoleStorage, "1")
	writePair(t, dir, "tls", second) // key then certificate, each renamed over the old one
	waitServerSerial(t, port, client, second.Cert.SerialNumber)
	testwait.Until(t, waitTimeout, "the reload to settle without an error", func() error { return src.Err() })
	if got := src.Certificate().Leaf.SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("Certificate() serial %s, want %s", got.Text(16), second.Cert.SerialNumber.Text(16))
	}
}

// k8sVolume lays out files as a Kubernetes secret volume does (and
// cert-manager's certificates arrive in one): each name is a symlink into
// ..data, itself a symlink to a timestamped directory that an update
// replaces by renaming a new ..data link over the old.
type k8sVolume struct {
	t       *testing.T
	dir     string
	version int
}

func (v *k8sVolume) update(files map[string][]byte) {
	t := v.t
	v.version++
	gen := fmt.Sprintf("..gen_%d", v.version)
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, gen, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestReloadSymlinkSwap(t *testing.T) {
	ca := newCA(t, "test CA")
	vol := &k8sVolume{t: t, dir: t.TempDir()}
	secret := func(c *devca.Cert, cas ...*devca.CA) map[string][]byte {
		var bundle []byte
		for _, ca := range cas {
			bundle = append(bundle, ca.CertPEM...)
		}
		return map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM, "ca.crt": bundle}
	}
	first := issueService(t, ca, tlsconfig.RoleController, "1")
	vol.update(secret(first, ca))
	src := load(t, tlsconfig.Files{
		Cert: filepath.Join(vol.dir, "tls.crt"),
		Key:  filepath.Join(vol.dir, "tls.key"),
		CA:   filepath.Join(vol.dir, "ca.crt"),
	})
	port := startTLSServer(t, serverConfig(t, src, tlsconfig.RequireClientCert))
	client := plainClient(ca, issueClient(t, ca, "alice"))
	waitServerSerial(t, port, client, first.Cert.SerialNumber)

	// A new certificate from a new CA, with the bundle trusting both, as a
	// CA rotation delivers it.
	next := newCA(t, "next CA")
	second := issueService(t, next, tlsconfig.RoleController, "1")
	vol.update(secret(second, ca, next))
	both := plainClient(ca, issueClient(t, ca, "alice"))
	both.RootCAs.AddCert(next.Cert)
	waitServerSerial(t, port, both, second.Cert.SerialNumber)
	if err := src.Err(); err != nil {
		t.Errorf("Err() after a clean swap: %v", err)
	}
}

func TestReloadFailureKeepsPrevious(t *testing.T) {
	ca := newCA(t, "test CA")
	dir := t.TempDir()
	first := issueService(t, ca, tlsconfig.RoleStorage, "2")
	certPath, keyPath := writePair(t, dir, "tls", first)

	var logs lockedBuffer
	var mu sync.Mutex
	var reported []error
	var self atomic.Pointer[tlsconfig.Source]
	src := load(t, tlsconfig.Files{Cert: certPath, Key: keyPath},
		tlsconfig.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		tlsconfig.WithOnReload(func(err error) {
			if s := self.Load(); s != nil {
				s.Err() // the callback may use the Source (it would deadlock under its lock)
			}
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, err)
		}))
	self.Store(src)
	port := startTLSServer(t, serverConfig(t, src, tlsconfig.VerifyClientCertIfGiven))
	client := plainClient(ca)

	other := issueService(t, ca, tlsconfig.RoleStorage, "2")
	steps := []struct {
		name    string
		write   func()
		wantErr string
	}{
		{"garbage certificate", func() { replaceFile(t, certPath, []byte("not a certificate\n")) },
			fmt.Sprintf("tlsconfig: certificate %q: no PEM certificate", certPath)},
		{"half-written key", func() {
			replaceFile(t, certPath, first.CertPEM)
			replaceFile(t, keyPath, first.KeyPEM[:len(first.KeyPEM)/2])
		}, fmt.Sprintf("tlsconfig: key %q: no PEM private key", keyPath)},
		{"key of another certificate", func() { replaceFile(t, keyPath, other.KeyPEM) },
			fmt.Sprintf("tlsconfig: key %q does not match certificate %q", keyPath, certPath)},
		{"certificate removed", func() { os.Remove(certPath) },
			fmt.Sprintf("tlsconfig: certificate %q: no such file", certPath)},
	}
	for _, step := range steps {
		step.write()
		testwait.Until(t, waitTimeout, step.name+" to be reported", func() error {
			if err := src.Err(); err == nil || err.Error() != step.wantErr {
				return fmt.Errorf("Err() = %v", err)
			}
			return nil
		})
		res, err := dial("127.0.0.1", port, client)
		if err != nil || res.serial.Cmp(first.Cert.SerialNumber) != 0 {
			t.Fatalf("after %s: connection %+v, %v; want the first certificate, serial %s",
				step.name, res, err, first.Cert.SerialNumber.Text(16))
		}
	}

	// A good pair loads again, and clears the error.
	writePair(t, dir, "tls", other)
	waitServerSerial(t, port, client, other.Cert.SerialNumber)
	testwait.Until(t, waitTimeout, "Err() to clear", func() error { return src.Err() })

	mu.Lock()
	got := append([]error(nil), reported...)
	mu.Unlock()
	if len(got) < len(steps)+1 || got[len(got)-1] != nil {
		t.Errorf("OnReload saw %v; want an error per failed step, then nil", got)
	}
	out := logs.String()
	if n := strings.Count(out, "did not load"); n < len(steps) {
		t.Errorf("%d warn lines for %d failed reloads; log:\n%s", n, len(steps), out)
	}
	if !strings.Contains(out, "tls files reloaded") || !strings.Contains(out, "principal=spiffe://strata/storage/2") {
		t.Errorf("no reload line naming the principal in the log:\n%s", out)
	}
	// Secrets never reach the log: no key material, whole or in part.
	keyBody := strings.Split(string(first.KeyPEM), "\n")[1]
	for _, secret := range []string{"PRIVATE KEY", keyBody[:16], strings.Split(string(other.KeyPEM), "\n")[1][:16]} {
		if strings.Contains(out, secret) {
			t.Errorf("log contains key material %q:\n%s", secret, out)
		}
	}
}

func TestReloadCABundle(t *testing.T) {
	c := newCluster(t)
	next := newCA(t, "next CA")
	src := load(t, c.files)
	port := startTLSServer(t, serverConfig(t, src, tlsconfig.RequireClientCert))

	// The old CA's client keeps a session cache, so that it would resume
	// a session rather than present its certificate again.
	oldClient := plainClient(c.ca, issueClient(t, c.ca, "old"))
	oldClient.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	newClient := plainClient(c.ca, issueClient(t, next, "new"))

	if res, err := dial("127.0.0.1", port, oldClient); err != nil || res.reply != "User:old" {
		t.Fatalf("old CA's client before the rotation: %q, %v", res.reply, err)
	}
	res, err := dial("127.0.0.1", port, oldClient)
	if err != nil || !res.didResume {
		t.Fatalf("old CA's client did not resume its session (%+v, %v); the check below would not test resumption", res, err)
	}
	if _, err := dial("127.0.0.1", port, newClient); err == nil {
		t.Fatal("new CA's client accepted before the rotation")
	}

	writeBundle(t, c.files.CA, next)
	testwait.Until(t, waitTimeout, "the new CA's client to be accepted", func() error {
		res, err := dial("127.0.0.1", port, newClient)
		if err != nil {
			return err
		}
		if res.reply != "User:new" {
			return fmt.Errorf("answer %q", res.reply)
		}
		return nil
	})
	if res, err := dial("127.0.0.1", port, oldClient); err == nil {
		t.Errorf("old CA's client accepted after the rotation (resumed: %v, answer %q)", res.didResume, res.reply)
	}
}

func TestLoadRefusals(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		name  string
		files tlsconfig.Files
		opts  []tlsconfig.Option
		want  string
	}{
		{"nothing", tlsconfig.Files{}, nil, "no certificate, key or CA bundle"},
		{"certificate without key", tlsconfig.Files{Cert: c.files.Cert}, nil, "go together"},
		{"bad version", c.files, []tlsconfig.Option{tlsconfig.WithMinVersion(tls.VersionTLS11)}, "want TLS 1.2 or 1.3"},
		{"missing file", tlsconfig.Files{Cert: c.files.Cert, Key: c.dir + "/nope.key"}, nil, "nope.key\": no such file"},
	} {
		s, err := tlsconfig.Load(context.Background(), tc.files, tc.opts...)
		if err == nil {
			s.Close()
			t.Errorf("%s: Load succeeded", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load error %q, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestSourceCloseAndReload(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	src, err := tlsconfig.Load(ctx, c.files, tlsconfig.WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the watcher stops with ctx; Close still works
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// Reload still reads the files on demand after Close (a SIGHUP
	// handler needs no watcher).
	next := issueService(t, c.ca, tlsconfig.RoleGateway, "")
	if err := next.WriteFiles(c.files.Cert, c.files.Key); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := src.Certificate().Leaf.SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Errorf("after Reload, serial %s; want %s", got.Text(16), next.Cert.SerialNumber.Text(16))
	}
	if err := src.Reload(); err != nil {
		t.Errorf("Reload of unchanged files: %v", err)
	}
}

func TestParseMinVersion(t *testing.T) {
	for in, want := range map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13, "1.1": 0, "": 0, "TLS1.3": 0} {
		got, err := tlsconfig.ParseMinVersion(in)
		if got != want || (err == nil) != (want != 0) {
			t.Errorf("ParseMinVersion(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
}
