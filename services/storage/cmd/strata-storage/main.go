// Command strata-storage runs one Strata storage node: it registers with
// the controller, hosts the partition replicas assigned to it and serves
// the StorageService Connect API. Every flag has a STRATA_* environment
// equivalent (--node-id is STRATA_NODE_ID).
package main

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/storage/internal/server"
)

func main() {
	cfg := &server.ProcessConfig{Base: serve.Base{Listen: server.DefaultListen}}
	serve.Main(serve.Command{
		Name:    "strata-storage",
		Summary: "Strata storage node: partition logs, replication, produce and fetch.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
