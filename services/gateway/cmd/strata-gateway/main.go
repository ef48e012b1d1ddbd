// Command strata-gateway runs one gateway: the address clients bootstrap
// from (Metadata, FindCoordinator), admin pass-through to the controller and
// coordinators, and the JSON produce/fetch proxy. Stateless; run as many as
// needed behind one load balancer. See docs/design/gateway.md.
package main

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/gateway/internal/server"
)

func main() {
	cfg := &server.Config{Base: serve.Base{Listen: server.DefaultListen, AdminListen: server.DefaultAdminListen}}
	serve.Main(serve.Command{
		Name:    "strata-gateway",
		Summary: "Strata gateway: metadata, admin pass-through and the JSON produce/fetch proxy.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
