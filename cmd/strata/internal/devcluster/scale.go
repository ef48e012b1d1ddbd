package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

const scaleUsage = `Usage: strata dev scale --dir DIR --storage-nodes N [--force]

Starts or stops storage nodes of the strata dev running in DIR, which
supervises them like the others: new nodes get the next ids (storage node i
on port P+10+i), their own data directory and log, and appear in
cluster.json; scaling down stops the nodes with the highest ids and removes
them from cluster.json (their data directories stay, so scaling up again
brings them back with their data).

New nodes hold nothing until partitions move to them: the controller
rebalances on its own shortly after a node joins, or run
'strata cluster rebalance'. A node that still holds replicas is not stopped
unless --force: drain it first ('strata node drain ID --wait').

Flags:
`

// scaleOptions are the flags of `strata dev scale`.
type scaleOptions struct {
	dir          string
	storageNodes int
	force        bool
	timeout      time.Duration
}

// scaleMain runs `strata dev scale`: it asks the running strata dev (found
// through DIR/cluster.json) to start or stop storage nodes, printing its
// progress, and returns the exit code.
func scaleMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o scaleOptions
	fs := flag.NewFlagSet("strata dev scale", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.dir, "dir", DefaultDir, "directory of the running strata dev (its cluster.json)")
	fs.IntVar(&o.storageNodes, "storage-nodes", 0, fmt.Sprintf("number of storage nodes wanted, 1..%d (required)", maxStorageNodes))
	fs.BoolVar(&o.force, "force", false, "stop storage nodes even when they still hold replicas")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the nodes to start or stop")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(stdout, scaleUsage)
			fs.VisitAll(func(f *flag.Flag) {
				typ, help := flag.UnquoteUsage(f)
				fmt.Fprintf(stdout, "  --%s %s\n      %s (default %s)\n", f.Name, typ, help, f.DefValue)
			})
			return exitOK
		}
		fmt.Fprintf(stderr, "strata dev scale: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "strata dev scale: unexpected argument %q (see --help)\n", fs.Arg(0))
		return exitUsage
	}
	if o.storageNodes < 1 || o.storageNodes > maxStorageNodes {
		fmt.Fprintf(stderr, "strata dev scale: --storage-nodes %d: must be 1..%d\n", o.storageNodes, maxStorageNodes)
		return exitUsage
	}
	if err := scale(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "strata dev scale: %v\n", err)
		return exitError
	}
	return exitOK
}

func scale(ctx context.Context, o scaleOptions, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, clusterFileName))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no strata dev runs in %s (no %s)", dir, clusterFileName)
	}
	if err != nil {
		return err
	}
	var f clusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%s: %v", filepath.Join(dir, clusterFileName), err)
	}
	if f.Control == "" || !f.Ready {
		return fmt.Errorf("the strata dev in %s is not running (or not ready yet)", dir)
	}
	if !o.force {
		var running []int
		for _, p := range f.Processes {
			if p.Service == serviceStorage && p.ID > o.storageNodes {
				running = append(running, p.ID)
			}
		}
		hc, done, err := gatewayClient(ctx, dir, &f)
		if err != nil {
			return err
		}
		err = checkEmpty(ctx, hc, f.Gateway, running)
		done()
		if err != nil {
			return err
		}
	}
	return sendControl(ctx, f.Control, controlRequest{Op: "scale", StorageNodes: o.storageNodes}, func(line string) {
		fmt.Fprintln(stdout, line)
	})
}

// gatewayClient is the HTTP client scale asks the gateway of the cluster
// in f with: HTTP/2 cleartext, or, for a secure cluster, mutual TLS as the
// admin (DIR/tls's admin certificate, verified against the dev CA). done
// releases it.
func gatewayClient(ctx context.Context, dir string, f *clusterFile) (hc *http.Client, done func(), err error) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	if !f.Secure {
		return &http.Client{Transport: tr}, func() {}, nil
	}
	cert, key := certFiles(dir, adminUser)
	src, err := tlsconfig.Load(ctx, tlsconfig.Files{Cert: cert, Key: key, CA: f.TLSCA}, tlsconfig.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, nil, fmt.Errorf("the admin's credentials: %v", err)
	}
	tr.TLSClientConfig = src.ClientConfig()
	return &http.Client{Transport: tr}, func() { src.Close() }, nil
}

// checkEmpty fails naming the first of nodes that still holds a replica,
// asked from the gateway with hc.
func checkEmpty(ctx context.Context, hc *http.Client, gateway string, nodes []int) error {
	if len(nodes) == 0 {
		return nil
	}
	gw := gatewayv1connect.NewGatewayServiceClient(hc, gateway)
	list, err := gw.ListTopics(ctx, connect.NewRequest(&gatewayv1.ListTopicsRequest{IncludeInternal: true}))
	if err != nil {
		return fmt.Errorf("cannot ask the gateway which nodes hold replicas (%v); pass --force to stop them anyway", oneLine(err.Error()))
	}
	var names []string
	for _, t := range list.Msg.GetTopics() {
		names = append(names, t.GetName())
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := gw.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: names}))
	if err != nil {
		return fmt.Errorf("cannot ask the gateway which nodes hold replicas (%v); pass --force to stop them anyway", oneLine(err.Error()))
	}
	for _, id := range nodes {
		held := 0
		for _, t := range resp.Msg.GetTopics() {
			for _, p := range t.GetPartitions() {
				if slices.Contains(p.GetReplicas(), int32(id)) {
					held++
				}
			}
		}
		if held > 0 {
			return fmt.Errorf("storage-%d holds %d replica(s); drain it first (strata node drain %d --wait) or pass --force",
				id, held, id)
		}
	}
	return nil
}
