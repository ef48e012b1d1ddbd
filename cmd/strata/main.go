// Command strata is the Strata command line: topics, produce, consume,
// groups and cluster status. The commands live in internal/cli; see
// docs/cli.md for the reference.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-mq/strata/cmd/strata/internal/cli"
	"github.com/strata-mq/strata/cmd/strata/internal/devcluster"
)

func main() {
	cli.Register(&cli.Command{
		Name:    "dev",
		Summary: "run a local cluster, every service as its own process",
		Main:    devcluster.Main,
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
