package etcdmember_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
