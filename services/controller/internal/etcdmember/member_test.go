package etcdmember_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember/etcdtest"
)

// TestPeerListenWithDNSPeers checks what containers and Kubernetes need:
// a member whose peer URL is a DNS name cannot bind it (etcd binds IPs
// only) unless PeerListen gives the address to bind, while the name stays
// the advertised peer URL.
func TestPeerListenWithDNSPeers(t *testing.T) {
	port := etcdtest.FreePorts(t, 1)[0]
	peers := map[string]string{"1": fmt.Sprintf("http://controller-1.strata.invalid:%d", port)}

	_, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: peers})
	if err == nil || !strings.Contains(err.Error(), "expected IP") {
		t.Fatalf("start with a DNS peer URL and no PeerListen: %v; want etcd's 'expected IP' refusal", err)
	}

	m, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: peers, PeerListen: fmt.Sprintf("127.0.0.1:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := m.Client().MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Members[0].PeerURLs; len(got) != 1 || got[0] != peers["1"] {
		t.Errorf("advertised peer URLs %v; want %s", got, peers["1"])
	}
}

// With PeerTLS the members of a quorum talk mutual TLS with their
// certificates: a three-member quorum forms and serves, and the peer port
// refuses a plain-text connection.
func TestPeerTLSQuorum(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.New("test")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := ca.WriteFiles(caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	peers := etcdtest.TestPeers(t, 3) // http:// URLs: taken as https:// with TLS
	var members []*etcdmember.Member
	for id := range peers {
		c, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem")
		if err := c.WriteFiles(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		m, err := etcdmember.Start(etcdmember.Config{Name: id, Dir: t.TempDir(), Peers: peers,
			PeerTLS: &etcdmember.PeerTLS{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		members = append(members, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, m := range members {
		if err := m.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := members[0].Client().Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := members[2].Client().Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read through another member: %v %v", resp, err)
	}
	list, err := members[0].Client().MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range list.Members {
		if len(mb.PeerURLs) != 1 || !strings.HasPrefix(mb.PeerURLs[0], "https://") {
			t.Fatalf("member %s advertises %v, want https", mb.Name, mb.PeerURLs)
		}
	}
	// Plain text to a peer port gets no etcd answer.
	plain := peers["1"] + "/version"
	if r, err := http.Get(plain); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Fatalf("plain-text GET %s answered 200", plain)
		}
	}
	// A member without TLS refuses https peers.
	if _, err := etcdmember.Start(etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: map[string]string{"1": "https://127.0.0.1:1"}}); err == nil {
		t.Fatal("https peers accepted without PeerTLS")
	}
}
