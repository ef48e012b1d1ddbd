//go:build unix

package devcluster

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// TestDevClusterSecure runs strata dev --secure with fake services that
// serve TLS as the real ones do: every process gets its certificate and
// the security flags, is reached over https, cluster.json says where the
// CA and admin.env are and holds no key, and admin.env is the owner's
// only. A second run in the same directory reuses the CA; a plain run
// there removes admin.env and says the cluster is open.
func TestDevClusterSecure(t *testing.T) {
	fakeBinDir(t)
	dir := t.TempDir()
	r, base := startDevOnFreePortsIn(t, dir, 1, 2, "--storage-nodes", "1", "--secure")
	f, ok := readClusterFile(t, dir)
	if !ok || !f.Ready {
		t.Fatalf("not ready\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	caCert, caKey := caFiles(dir)
	envFile := filepath.Join(dir, adminEnvName)
	if !f.Secure || f.TLSCA != caCert || f.AdminEnv != envFile || f.Gateway != fmt.Sprintf("https://127.0.0.1:%d", base) {
		t.Errorf("cluster.json: secure %v, tls_ca %q, admin_env %q, gateway %q", f.Secure, f.TLSCA, f.AdminEnv, f.Gateway)
	}
	ca, err := devca.Load(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	client := readyClient(ca)
	for _, p := range f.Processes {
		name := fmt.Sprintf("%s-%d", p.Service, p.ID)
		if !strings.HasPrefix(p.URL, "https://") {
			t.Errorf("%s: URL %s", name, p.URL)
		}
		cert, _ := certFiles(dir, name)
		if !slices.Contains(p.Argv, "--require-auth") || !slices.Contains(p.Argv, cert) {
			t.Errorf("%s: argv %q lacks --require-auth or its certificate", name, p.Argv)
		}
		resp, err := client.Get("https://" + p.AdminAddress + "/readyz")
		if err != nil || resp.StatusCode != 200 || resp.TLS == nil {
			t.Errorf("%s: /readyz over TLS: %v", name, err)
		} else {
			resp.Body.Close()
		}
	}

	// No secret in cluster.json: no key, in PEM or in its base64 body.
	cj, err := os.ReadFile(filepath.Join(dir, clusterFileName))
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := filepath.Glob(filepath.Join(tlsDir(dir), "*key.pem"))
	if len(keys) < 7 {
		t.Fatalf("keys in DIR/tls: %q", keys)
	}
	for _, k := range keys {
		b, _ := os.ReadFile(k)
		block, _ := pem.Decode(b)
		body := base64.StdEncoding.EncodeToString(block.Bytes)
		if strings.Contains(string(cj), body[:40]) || strings.Contains(string(cj), "PRIVATE KEY") {
			t.Errorf("cluster.json holds the key of %s", k)
		}
		if m := mode(t, k); m != 0o600 {
			t.Errorf("%s mode %v, want 0600", k, m)
		}
	}
	if m := mode(t, envFile); m != 0o600 {
		t.Errorf("admin.env mode %v, want 0600", m)
	}
	out := r.stdout.String()
	for _, want := range []string{"strata dev: secure: TLS and mutual TLS with the dev CA in " + tlsDir(dir), "  source " + envFile, fmt.Sprintf("https://127.0.0.1:%d", base)} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no authentication") {
		t.Errorf("a secure cluster says it has no authentication:\n%s", out)
	}

	// A storage node scale adds gets its certificate and TLS too.
	if code, _, errOut := scaleRun(t, "--dir", dir, "--storage-nodes", "2"); code != 0 {
		t.Fatalf("scale: exit %d: %s", code, errOut)
	}
	s2, _ := certFiles(dir, "storage-2")
	if id, ok := tlsconfig.IdentityOf(readCert(t, s2)); !ok || id.String() != "spiffe://strata/storage/2" {
		t.Errorf("storage-2 certificate identity %v", id)
	}
	if resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", base+111)); err != nil || resp.StatusCode != 200 {
		t.Errorf("storage-2 /readyz over TLS: %v", err)
	} else {
		resp.Body.Close()
	}

	r.cancel()
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, r.stderr)
	}
	caBefore, _ := os.ReadFile(caCert)

	// Again with --secure in the same directory: the same CA.
	r, _ = startDevOnFreePortsIn(t, dir, 1, 1, "--storage-nodes", "1", "--secure")
	if f, ok := readClusterFile(t, dir); !ok || !f.Ready {
		t.Fatalf("second secure run not ready\nstderr:\n%s", r.stderr)
	}
	if caAfter, _ := os.ReadFile(caCert); string(caAfter) != string(caBefore) {
		t.Error("the second run made a new CA; want the first one reused")
	}
	r.cancel()
	r.wait(t)

	// Plain in the same directory: admin.env is gone, and the cluster
	// says it is open.
	r, _ = startDevOnFreePortsIn(t, dir, 1, 1, "--storage-nodes", "1")
	if f, ok := readClusterFile(t, dir); !ok || !f.Ready || f.Secure || f.TLSCA != "" {
		t.Fatalf("plain run: %+v\nstderr:\n%s", f, r.stderr)
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Errorf("admin.env left by the secure run: %v", err)
	}
	if want := "strata dev: no authentication and no TLS: anyone who can reach these ports may do anything; for local use only (--secure turns them on)\n"; !strings.Contains(r.stdout.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
	}
}
