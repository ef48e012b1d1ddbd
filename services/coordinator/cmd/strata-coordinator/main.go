// Command strata-coordinator runs one coordinator instance: consumer groups
// with server-side assignment and committed offsets in Postgres (or an
// embedded SQLite file when no --dsn is given). Run as many as needed
// against one database; each group is owned by one instance at a time. See
// docs/design/coordinator.md.
package main

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/coordinator/internal/server"
)

func main() {
	cfg := &server.Config{Base: serve.Base{Listen: server.DefaultListen, AdminListen: server.DefaultAdminListen}}
	serve.Main(serve.Command{
		Name:    "strata-coordinator",
		Summary: "Strata coordinator: consumer groups, server-side assignment and committed offsets.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
