// Package etcdtest gives tests free loopback ports and peer maps for
// embedded etcd members. It is kept out of etcdmember so the controller
// binary does not link the testing package.
package etcdtest

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n distinct free loopback ports, for tests.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// TestPeers returns a peer map of n members on free loopback ports, for tests.
func TestPeers(t testing.TB, n int) map[string]string {
	peers := map[string]string{}
	for i, p := range FreePorts(t, n) {
		peers[fmt.Sprint(i+1)] = fmt.Sprintf("http://127.0.0.1:%d", p)
	}
	return peers
}
