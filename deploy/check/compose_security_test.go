package check

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// composeTLSDir is where every compose service mounts its certificate volume.
const composeTLSDir = "/etc/strata/tls"

var composeCertsRun struct {
	once sync.Once
	dir  string
	out  string
	err  error
}

// composeCerts runs deploy/compose/certs.sh once per test binary, as the
// compose cluster's certs service does, into a temporary directory (one
// subdirectory per volume) with the keys owned by this user, and returns
// the directory. It needs Debian's openssl, as the certs image has.
func composeCerts(t *testing.T) string {
	t.Helper()
	r := &composeCertsRun
	r.once.Do(func() {
		if r.dir, r.err = os.MkdirTemp("", "strata-check-certs-"); r.err != nil {
			return
		}
		r.out, r.err = runCerts(r.dir)
	})
	if r.err != nil {
		t.Fatalf("deploy/compose/certs.sh: %v\n%s", r.err, r.out)
	}
	return r.dir
}

// runCerts runs certs.sh issue into dir and returns what it printed.
func runCerts(dir string) (string, error) {
	if _, err := exec.LookPath("openssl"); err != nil {
		return "", fmt.Errorf("openssl is not installed (apt-get install openssl): %w", err)
	}
	cmd := exec.Command("sh", filepath.Join(repoRoot, "deploy", "compose", "certs.sh"), "issue", dir)
	cmd.Env = append(os.Environ(), "STRATA_CERTS_OWNER="+strconv.Itoa(os.Getuid()))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tlsVolumes returns the certificate volumes (tls-*) a service mounts.
func tlsVolumes(svc types.ServiceConfig) []types.ServiceVolumeConfig {
	var out []types.ServiceVolumeConfig
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume && strings.HasPrefix(v.Source, "tls-") {
			out = append(out, v)
		}
	}
	return out
}

func envOf(svc types.ServiceConfig, name string) string {
	if v := svc.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// TestComposeSecurity checks that the compose cluster runs with TLS and
// authentication on: every Strata service gets its certificate, key and CA
// (STRATA_TLS_CERT, STRATA_TLS_KEY, STRATA_TLS_CLIENT_CA: the environment,
// so that its --probe health check has them too), STRATA_REQUIRE_AUTH and
// User:admin among STRATA_SUPER_USERS; mounts its own certificate volume,
// and no other, read-only; starts after the certs service has filled it;
// and is given and advertises https URLs only. The certs service fills
// every volume and alone holds the CA's.
func TestComposeSecurity(t *testing.T) {
	project := loadCompose(t)
	certs, ok := project.Services["certs"]
	if !ok {
		t.Fatal("compose.yaml has no certs service")
	}
	if b := certs.Build; b == nil || b.Target != "certs" || dockerTargets(t)["certs"] == nil {
		t.Errorf("the certs service must be built from deploy/docker/Dockerfile target certs, is %+v", certs.Build)
	}
	if certs.Restart != "no" || !slices.Equal(certs.Command, []string{"issue", "/tls"}) {
		t.Errorf("the certs service must run certs.sh issue /tls once (restart no), runs %q restart %q", certs.Command, certs.Restart)
	}
	filled := map[string]bool{} // volumes the certs service fills
	for _, v := range tlsVolumes(certs) {
		if want := "/tls/" + strings.TrimPrefix(v.Source, "tls-"); v.Target != want || v.ReadOnly {
			t.Errorf("certs mounts %s at %s (read-only %v); certs.sh writes it at %s", v.Source, v.Target, v.ReadOnly, want)
		}
		filled[v.Source] = true
	}
	for _, v := range []string{"tls-ca", "tls-admin", "tls-lb"} {
		if !filled[v] {
			t.Errorf("the certs service does not fill volume %s", v)
		}
	}

	for name, svc := range project.Services {
		if name == "certs" {
			continue
		}
		vols := tlsVolumes(svc)
		for _, v := range vols {
			if v.Source == "tls-ca" {
				t.Errorf("service %s mounts the CA's volume (its key)", name)
			}
			if !v.ReadOnly {
				t.Errorf("service %s mounts %s writable", name, v.Source)
			}
			if !filled[v.Source] {
				t.Errorf("service %s mounts %s, which the certs service does not fill", name, v.Source)
			}
		}
		bin, ok := binaryFor(svc.Image)
		if !ok {
			continue
		}
		what := "compose service " + name
		want := "tls-" + name
		if bin == "strata" {
			want = "tls-admin" // the CLI runs as the admin
		}
		if len(vols) != 1 || vols[0].Source != want || vols[0].Target != composeTLSDir {
			t.Errorf("%s: must mount its certificate volume %s at %s and no other, mounts %+v", what, want, composeTLSDir, vols)
		}
		for _, u := range urlsOf("gateway", envOf(svc, "STRATA_GATEWAY")) {
			if !strings.HasPrefix(u, "https://") {
				t.Errorf("%s: STRATA_GATEWAY %s is not https", what, u)
			}
		}
		if bin == "strata" {
			// The CLI as the admin: the CA and the admin's certificate.
			for k, v := range map[string]string{
				"STRATA_TLS_CA":   composeTLSDir + "/ca.crt",
				"STRATA_TLS_CERT": composeTLSDir + "/tls.crt",
				"STRATA_TLS_KEY":  composeTLSDir + "/tls.key",
			} {
				if got := envOf(svc, k); got != v {
					t.Errorf("%s: %s is %q, want %q", what, k, got, v)
				}
			}
			continue
		}
		for k, v := range map[string]string{
			"STRATA_TLS_CERT":      composeTLSDir + "/tls.crt",
			"STRATA_TLS_KEY":       composeTLSDir + "/tls.key",
			"STRATA_TLS_CLIENT_CA": composeTLSDir + "/ca.crt",
			"STRATA_REQUIRE_AUTH":  "true",
		} {
			if got := envOf(svc, k); got != v {
				t.Errorf("%s: %s is %q, want %q", what, k, got, v)
			}
		}
		if supers := strings.Split(envOf(svc, "STRATA_SUPER_USERS"), ","); !slices.Contains(supers, superUser) {
			t.Errorf("%s: STRATA_SUPER_USERS %q does not name %s", what, envOf(svc, "STRATA_SUPER_USERS"), superUser)
		}
		if d, ok := svc.DependsOn["certs"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: must start after the certs service completed, depends on %v", what, svc.DependsOn)
		}
		// The ACLs reach every service but the controller through the
		// controllers' metadata stream (the coordinator needs --controller
		// for it with --require-auth).
		if bin != "strata-controller" && flagValue(svc.Command, "controller") == "" {
			t.Errorf("%s: has no --controller, so no ACLs to enforce", what)
		}
		for _, f := range strataURLFlags {
			for _, u := range urlsOf(f, flagValue(svc.Command, f)) {
				if !strings.HasPrefix(u, "https://") {
					t.Errorf("%s: --%s %s is not https", what, f, u)
				}
			}
		}
	}
	lb := project.Services["lb"]
	if v := tlsVolumes(lb); len(v) != 1 || v[0].Source != "tls-lb" {
		t.Errorf("the load balancer must mount tls-lb (the CA of its health checks) and no other certificate volume, mounts %+v", v)
	}
}

// TestComposeCertificates runs certs.sh as the certs service does and
// checks what it makes against compose.yaml: each Strata service's
// certificate chains to the CA, is for server and client auth, names
// exactly its identity (spiffe://strata/<role>/<id> from the service name;
// a storage node's id is its --node-id, a controller's its --id), names
// 127.0.0.1 for its health check, every host it advertises and the name
// every other service calls it at, and its key matches it and is readable
// by its owner only; the admin's certificate is the super user's and for
// client auth only. A second run keeps every certificate.
func TestComposeCertificates(t *testing.T) {
	project := loadCompose(t)
	dir := composeCerts(t)
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca/ca.crt holds no certificate")
	}
	load := func(name string) *x509.Certificate {
		t.Helper()
		d := filepath.Join(dir, name)
		pair, err := tls.LoadX509KeyPair(filepath.Join(d, "tls.crt"), filepath.Join(d, "tls.key"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st, err := os.Stat(filepath.Join(d, "tls.key")); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: tls.key must be readable by its owner only: %v %v", name, st.Mode(), err)
		}
		if ca, err := os.ReadFile(filepath.Join(d, "ca.crt")); err != nil || !bytes.Equal(ca, caPEM) {
			t.Errorf("%s: ca.crt is not the CA (%v)", name, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	verify := func(leaf *x509.Certificate, usage x509.ExtKeyUsage) error {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}

	// Services call each other by their compose names, which each
	// certificate names (below).
	for name, svc := range project.Services {
		var urls []string
		for _, f := range []string{"controller", "coordinator", "gateway", "tiering"} {
			urls = append(urls, urlsOf(f, flagValue(svc.Command, f))...)
		}
		urls = append(urls, urlsOf("gateway", envOf(svc, "STRATA_GATEWAY"))...)
		for _, u := range urls {
			if _, ok := project.Services[hostOf(u)]; !ok {
				t.Errorf("service %s calls %s, whose host is no compose service", name, u)
			}
		}
	}

	// The etcd members' peer hosts, from controller-1's --peers.
	var peerHosts []string
	for _, peer := range strings.Split(flagValue(project.Services["controller-1"].Command, "peers"), ",") {
		_, raw, _ := strings.Cut(peer, "=")
		pu, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("controller-1 --peers %q: %v", peer, err)
		}
		peerHosts = append(peerHosts, pu.Hostname())
	}
	for name, svc := range project.Services {
		bin, ok := binaryFor(svc.Image)
		if !ok || bin == "strata" {
			continue
		}
		role := strings.TrimPrefix(bin, "strata-")
		want := "spiffe://strata/" + role
		if name != role {
			want += "/" + strings.TrimPrefix(name, role+"-")
		}
		switch role {
		case "storage":
			if id := flagValue(svc.Command, "node-id"); want != "spiffe://strata/storage/"+id {
				t.Errorf("service %s: --node-id %s, but its identity is %s", name, id, want)
			}
		case "controller":
			if id := flagValue(svc.Command, "id"); want != "spiffe://strata/controller/"+id {
				t.Errorf("service %s: --id %s, but its identity is %s", name, id, want)
			}
			checkEtcdClient(t, "compose service "+name, svc.Command)
		}
		leaf := load(name)
		// The etcd peer port admits certificates valid for a --peers
		// host: each controller's, and no other service's.
		for _, host := range peerHosts {
			valid := leaf.VerifyHostname(host) == nil
			if mine := role == "controller" && host == name; valid != mine {
				t.Errorf("service %s: certificate valid for etcd peer host %s: %v, want %v", name, host, valid, mine)
			}
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
			t.Errorf("service %s: certificate names %v; want exactly %s", name, leaf.URIs, want)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if err := verify(leaf, u); err != nil {
				t.Errorf("service %s: certificate does not verify for %v: %v", name, u, err)
			}
		}
		if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
			t.Errorf("service %s: certificate does not name 127.0.0.1 (its health check): %v", name, leaf.IPAddresses)
		}
		hosts := []string{name}
		for _, f := range []string{"advertise", "advertise-url", "advertise-listeners"} {
			for _, u := range urlsOf(f, flagValue(svc.Command, f)) {
				hosts = append(hosts, hostOf(u))
			}
		}
		if flagValue(svc.Command, "client-listener") == "external" {
			hosts = append(hosts, "localhost") // behind the load balancer's published port
		}
		for _, h := range hosts {
			if err := leaf.VerifyHostname(h); err != nil {
				t.Errorf("service %s: reached at %s, which its certificate does not name: %v", name, h, err)
			}
		}
	}

	admin := load("admin")
	if "User:"+admin.Subject.CommonName != superUser || len(admin.URIs) > 0 || len(admin.DNSNames) > 0 ||
		!slices.Equal(admin.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("the admin certificate must be CN admin (%s), client auth only, with no SAN: CN %q URIs %v DNS %v EKU %v",
			superUser, admin.Subject.CommonName, admin.URIs, admin.DNSNames, admin.ExtKeyUsage)
	}
	if err := verify(admin, x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("the admin certificate does not verify: %v", err)
	}
	if lb, err := os.ReadFile(filepath.Join(dir, "lb", "ca.crt")); err != nil || !bytes.Equal(lb, caPEM) {
		t.Errorf("lb/ca.crt is not the CA (%v)", err)
	}

	// Running it again (docker compose up again) keeps what is current.
	before, _ := os.ReadFile(filepath.Join(dir, "storage-1", "tls.crt"))
	out, err := runCerts(dir)
	if err != nil {
		t.Fatalf("certs.sh, again: %v\n%s", err, out)
	}
	if strings.Contains(out, "issued") || strings.Contains(out, "new CA") {
		t.Errorf("a second run issued again:\n%s", out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "storage-1", "tls.crt")); !bytes.Equal(before, after) {
		t.Errorf("a second run replaced storage-1's certificate")
	}
}
