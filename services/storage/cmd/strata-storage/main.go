// Command strata-storage runs one Strata storage node: it registers with
// the controller, hosts the partition replicas assigned to it and serves
// the StorageService Connect API. Every flag has a STRATA_* environment
// equivalent (--node-id is STRATA_NODE_ID).
package main

import (
	"os"
	"runtime/debug"

	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/storage/internal/server"
)

// defaultGCPercent is the storage node's GOGC unless the environment sets
// one. A node's live heap is small (indexes, producer state, in-flight
// answers) while it moves record bytes at a high rate, so Go's default of
// 100 runs the collector far more often than memory requires; 400 trades a
// larger heap between collections for fewer of them.
const defaultGCPercent = 400

// setGCPercent applies defaultGCPercent when GOGC is unset: the
// environment wins. It reports the percentage in force.
func setGCPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

func main() {
	setGCPercent(os.Getenv)
	cfg := &server.ProcessConfig{Base: serve.Base{Listen: server.DefaultListen}}
	serve.Main(serve.Command{
		Name:    "strata-storage",
		Summary: "Strata storage node: partition logs, replication, produce and fetch.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
