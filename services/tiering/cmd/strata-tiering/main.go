// Command strata-tiering runs one tiering instance: it takes sealed
// segments from partition leaders into an S3 bucket, keeps each partition's
// manifest there, serves reads from the tier, and applies total retention.
// With --embedded-s3-listen it also serves an S3-compatible server on a
// directory, so nothing else needs installing. Every flag has a STRATA_*
// environment equivalent (--s3-bucket is STRATA_S3_BUCKET). See
// docs/design/tiering.md.
package main

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/tiering/internal/server"
)

func main() {
	cfg := &server.Config{Base: serve.Base{Listen: server.DefaultListen}}
	serve.Main(serve.Command{
		Name:    "strata-tiering",
		Summary: "Strata tiering: sealed segments to S3, the per-partition manifest, and reads from the tier.",
		Config:  cfg,
		Setup:   server.Setup(cfg),
	})
}
