package harness

import (
	"strconv"
	"testing"

	"github.com/strata-mq/strata/lib/launch"
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
	gw := &Node{Service: "gateway", ID: 1, URL: "http://" + api, AdminURL: "http://" + admin, c: c}
	c.start(gw, "gateway", launch.Gateway{
		Process:     processFlags(bin, api, admin),
		Controllers: c.ControllerURLs(),
	}.Argv())
	gw.WaitReady()
	return gw
}
