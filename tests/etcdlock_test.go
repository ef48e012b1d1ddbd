package tests

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/harness"
)

// TestDevSecureEtcdLocked checks, against a real `strata dev --secure`
// with three controllers, that etcd (every token hash, SCRAM key and ACL)
// is reachable by the controllers only:
//   - each controller's cluster.json entry names its etcd client endpoint
//     (etcd_client), a Unix socket only the controller's user may open,
//     and the old TCP client port P+210+i takes no connection;
//   - the etcd peer port refuses the admin's certificate, signed by the
//     same CA, and accepts another controller's.
//
// The three-member quorum forming over the restricted peer ports is
// proved by strata dev becoming ready.
func TestDevSecureEtcdLocked(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--secure", "--controllers", "3", "--storage-nodes", "1")
	checkEtcdClientSockets(t, d, 3)

	tlsDir := filepath.Join(d.Dir, "tls")
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.pem")
	}
	peerVersion := fmt.Sprintf("https://127.0.0.1:%d/version", d.BasePort+200+1)
	get := func(name string) error {
		cert, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, name+".pem"), filepath.Join(tlsDir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
		defer c.CloseIdleConnections()
		r, err := c.Get(peerVersion)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		_, _ = io.Copy(io.Discard, r.Body)
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", r.Status)
		}
		return nil
	}
	if err := get("controller-2"); err != nil {
		t.Fatalf("controller-2's certificate on controller-1's etcd peer port: %v", err)
	}
	if err := get("admin"); err == nil {
		t.Fatal("the admin's certificate was served on controller-1's etcd peer port")
	}
}

// checkEtcdClientSockets checks that each of the want controllers of d
// names its etcd client endpoint in cluster.json (etcd_client), that it is
// a Unix socket of mode 0600, and that the old TCP client port P+210+i
// takes no connection.
func checkEtcdClientSockets(t *testing.T, d *harness.Dev, want int) {
	t.Helper()
	var controllers int
	for _, p := range d.File.Processes {
		if p.Service != "controller" {
			continue
		}
		controllers++
		sock, ok := strings.CutPrefix(p.EtcdClient, "unix://")
		if !ok {
			t.Fatalf("controller-%d etcd_client %q; want a unix:// socket", p.ID, p.EtcdClient)
		}
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatalf("controller-%d etcd socket: %v", p.ID, err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("controller-%d etcd socket %s mode %v; want a socket of mode 0600", p.ID, sock, fi.Mode())
		}
		old := net.JoinHostPort("127.0.0.1", fmt.Sprint(d.BasePort+210+p.ID))
		if c, err := net.DialTimeout("tcp", old, 5*time.Second); err == nil {
			c.Close()
			t.Errorf("controller-%d: the old etcd client port %s takes connections", p.ID, old)
		}
	}
	if controllers != want {
		t.Fatalf("cluster.json lists %d controllers, want %d", controllers, want)
	}
}
