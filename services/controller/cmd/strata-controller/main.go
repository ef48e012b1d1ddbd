// Command strata-controller runs one member of the controller quorum: an
// embedded etcd member, the election of the active controller and the
// ControllerService Connect API. See docs/design/controller.md.
package main

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/controller/internal/server"
)

func main() {
	cfg := &server.ProcessConfig{Base: serve.Base{Listen: server.DefaultListen, AdminListen: server.DefaultAdminListen}}
	serve.Main(serve.Command{
		Name:    "strata-controller",
		Summary: "Strata controller: embedded etcd member, active-controller election, ControllerService API.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
