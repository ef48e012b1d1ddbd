package harness

import (
	"strconv"
	"testing"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// StartGateway starts one gateway in front of c, without a coordinator
// (group calls answer UNAVAILABLE), and waits for its /readyz. Clients
// bootstrap from its URL; StartGroupServices starts one with coordinators.
// In a secure cluster it runs as gateway-1 with the security flags.
func StartGateway(t testing.TB, c *Cluster) *Node {
	t.Helper()
	bin := Binary(t, gatewayPkg)
	ports, err := FreePorts(t, 2)
	if err != nil {
		t.Fatal(err)
	}
	api, admin := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	gw := &Node{Service: "gateway", ID: 1, URL: c.scheme() + api, AdminURL: c.scheme() + admin, c: c}
	c.start(gw, "gateway", launch.Gateway{
		Process:     c.process(bin, api, admin, tlsconfig.RoleGateway, 1),
		Controllers: c.ControllerURLs(),
	}.Argv())
	gw.WaitReady()
	c.services = append(c.services, gw)
	return gw
}
