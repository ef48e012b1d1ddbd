package harness

import (
	"strconv"
	"strings"
	"testing"
)

// StartGateway starts one gateway in front of c, without a coordinator
// (group calls answer UNAVAILABLE), and waits for its /readyz. Clients
// bootstrap from its URL; StartGroupServices starts one with coordinators.
func StartGateway(t testing.TB, c *Cluster) *Node {
	t.Helper()
	bin := Binary(t, gatewayPkg)
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	api, admin := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	var ctlURLs []string
	for _, n := range c.controllers {
		ctlURLs = append(ctlURLs, n.URL)
	}
	gw := &Node{Service: "gateway", ID: 1, URL: "http://" + api, AdminURL: "http://" + admin, c: c}
	gw.Proc = Start(t, "gateway", []string{bin, "--listen", api, "--admin-listen", admin,
		"--controller", strings.Join(ctlURLs, ","), "--log-format", "text", "--drain-timeout", "2s"})
	gw.WaitReady()
	return gw
}
