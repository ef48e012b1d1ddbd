package etcdmember_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember/etcdtest"
)

// TestClientSocketOwnerOnly checks the default client listener: a Unix
// socket in the data directory that only the member's user may open, and
// no TCP listener, so no other user of the host reaches etcd's secrets.
func TestClientSocketOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: dir, Peers: etcdtest.TestPeers(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sock := filepath.Join(dir, etcdmember.SocketName)
	if m.Endpoint != "unix://"+sock {
		t.Fatalf("endpoint %q; want unix://%s", m.Endpoint, sock)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client socket mode %v; want a socket of mode 0600", fi.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Client().Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through the socket: %v", err)
	}
	// A data directory whose socket path does not fit sun_path is one
	// clear line, not etcd's bind error.
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	_, err = etcdmember.Start(etcdmember.Config{Name: "1", Dir: long, Peers: etcdtest.TestPeers(t, 1)})
	if err == nil || !strings.Contains(err.Error(), "--etcd-client") {
		t.Fatalf("start with a socket path too long: %v; want the refusal naming --etcd-client", err)
	}
	// Without TLS there is no TCP client listener to ask for.
	_, err = etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: etcdtest.TestPeers(t, 1), ClientPort: etcdtest.FreePorts(t, 1)[0]})
	if err == nil || !strings.Contains(err.Error(), "no TLS") {
		t.Fatalf("start with a client port and no TLS: %v; want a refusal", err)
	}
}

// lockPKI is a CA with a certificate per controller and one user's.
type lockPKI struct {
	ca         *devca.CA
	caFile     string
	user       *devca.Cert
	storage    *devca.Cert
	tlsOf      map[string]*etcdmember.PeerTLS
	controller map[string]*devca.Cert
}

func newLockPKI(t *testing.T, ids ...string) *lockPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := devca.New("test")
	if err != nil {
		t.Fatal(err)
	}
	p := &lockPKI{ca: ca, caFile: filepath.Join(dir, "ca.pem"), tlsOf: map[string]*etcdmember.PeerTLS{}, controller: map[string]*devca.Cert{}}
	if err := ca.WriteFiles(p.caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem")
		if err := c.WriteFiles(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		p.tlsOf[id] = &etcdmember.PeerTLS{CertFile: certFile, KeyFile: keyFile, CAFile: p.caFile}
		p.controller[id] = c
	}
	if p.user, err = ca.IssueClient("admin"); err != nil {
		t.Fatal(err)
	}
	if p.storage, err = ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "1"}, "storage-1.strata.invalid"); err != nil {
		t.Fatal(err)
	}
	return p
}

// get GETs url presenting cert, trusting the CA; a refused handshake is
// an error.
func (p *lockPKI) get(url string, cert *devca.Cert) error {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{cert.TLS()}}}}
	defer c.CloseIdleConnections()
	r, err := c.Get(url)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	_, _ = io.Copy(io.Discard, r.Body)
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, r.Status)
	}
	return nil
}

// TestPeerPortRefusesUserCertificate checks that the peer port of a
// secured member takes controller certificates only: a user's
// certificate signed by the same CA, which today's members accepted, is
// refused at the handshake, and so is another service's certificate not
// valid for the controllers' peer hosts (names given by PeerNames).
func TestPeerPortRefusesUserCertificate(t *testing.T) {
	p := newLockPKI(t, "1")
	peers := etcdtest.TestPeers(t, 1)
	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: peers, PeerTLS: p.tlsOf["1"]})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	version := "https://" + strings.TrimPrefix(peers["1"], "http://") + "/version"
	if err := p.get(version, p.controller["1"]); err != nil {
		t.Fatalf("a controller's certificate on the peer port: %v", err)
	}
	if err := p.get(version, p.user); err == nil {
		t.Fatal("a user's certificate from the cluster's CA was served on the peer port")
	}
}

// TestPeerNamesRefuseOtherServices: with PeerNames naming the controllers'
// hosts (as the deploy manifests' names do), a storage node's certificate
// from the same CA is refused on the peer port too.
func TestPeerNamesRefuseOtherServices(t *testing.T) {
	p := newLockPKI(t)
	dir := t.TempDir()
	c, err := p.ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "1"}, "controller-1.strata.invalid")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "c-key.pem")
	if err := c.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	peers := etcdtest.TestPeers(t, 1)
	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: peers,
		PeerNames: []string{"controller-1.strata.invalid"},
		PeerTLS:   &etcdmember.PeerTLS{CertFile: certFile, KeyFile: keyFile, CAFile: p.caFile}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	version := "https://" + strings.TrimPrefix(peers["1"], "http://") + "/version"
	if err := p.get(version, c); err != nil {
		t.Fatalf("the controller's certificate on the peer port: %v", err)
	}
	if err := p.get(version, p.storage); err == nil {
		t.Fatal("a storage node's certificate was served on the peer port")
	}
}

// TestClientHTTPSControllersOnly checks the https client listener: the
// member's own client works over it with the controller's certificate,
// and a user's certificate from the same CA is refused.
func TestClientHTTPSControllersOnly(t *testing.T) {
	p := newLockPKI(t, "1")
	port := etcdtest.FreePorts(t, 1)[0]
	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: etcdtest.TestPeers(t, 1),
		ClientURL: fmt.Sprintf("https://127.0.0.1:%d", port), PeerTLS: p.tlsOf["1"]})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if want := fmt.Sprintf("https://127.0.0.1:%d", port); m.Endpoint != want {
		t.Fatalf("endpoint %q; want %q", m.Endpoint, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Client().Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put over mutual TLS: %v", err)
	}
	if err := p.get(m.Endpoint+"/version", p.controller["1"]); err != nil {
		t.Fatalf("the controller's certificate on the client port: %v", err)
	}
	err = p.get(m.Endpoint+"/version", p.user)
	if err == nil {
		t.Fatal("a user's certificate was served on the client port")
	}
	var plain error
	if r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/version", port)); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			plain = errors.New("plain HTTP answered 200")
		}
	}
	if plain != nil {
		t.Fatal(plain)
	}
}
