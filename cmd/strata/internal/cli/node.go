package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// parseNodeID reads a node id argument.
func parseNodeID(s string) (int32, error) {
	id, err := strconv.ParseInt(s, 10, 32)
	if err != nil || id < 0 {
		return 0, usagef("node id %q: want a whole number, 0 or more", s)
	}
	return int32(id), nil
}

func nodeDrain(ctx context.Context, e *Env, args []string) error {
	var mf moveFlags
	f := newFlags(e, "strata node drain ID [--wait] [--throttle BYTES/S]",
		`Drain a storage node before taking it away: it receives no new replicas, the
partitions it leads get another in-sync leader at once, and its replicas move
to the other nodes (each new replica copies the partition, joins the in-sync
replicas, then the drained one is deleted). The node keeps serving until then.
--wait prints progress until the node holds nothing; then it is safe to stop.
A drained node stays drained across restarts; 'strata node undrain ID' undoes
it.`,
		"strata node drain 4 --wait --throttle 50MB")
	mf.add(f, "the node holds nothing")
	pos, err := f.parse(args, "ID")
	if err != nil {
		return err
	}
	id, err := parseNodeID(pos[0])
	if err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	rctx, cancel := withTimeout(ctx)
	resp, err := e.gateway().DrainNode(rctx, connect.NewRequest(&gatewayv1.DrainNodeRequest{NodeId: id, ThrottleBytesPerSecond: mf.rate}))
	cancel()
	if err != nil {
		return err
	}
	m := resp.Msg
	if e.Output == "json" {
		if err := writeJSON(e.Stdout, map[string]any{"node": id, "drained": true, "replicas": m.GetReplicas(), "moves": movesJSON(m.GetMoves())}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "node %d drained: it takes no new replicas; %d replica(s) on it, %d move(s) started\n", id, m.GetReplicas(), len(m.GetMoves()))
		if len(m.GetMoves()) > 0 {
			printMoves(e, m.GetMoves())
		}
	}
	if !mf.wait {
		return nil
	}
	involves := func(pc *controllerv1.PartitionChange) bool {
		return slices.Contains(pc.GetPartition().GetReplicas(), id)
	}
	holdsNothing := func(ctx context.Context) (bool, error) {
		rows, err := nodeRows(ctx, e)
		if err != nil {
			return false, err
		}
		for _, r := range rows {
			if r.ID == id {
				return r.Replicas == 0 && r.Leaders == 0, nil
			}
		}
		return true, nil
	}
	if err := waitMoves(ctx, e, involves, holdsNothing, mf.interval, mf.timeout); err != nil {
		return err
	}
	if e.Output != "json" {
		fmt.Fprintf(e.Stdout, "node %d holds nothing: safe to stop\n", id)
	}
	return nil
}

func nodeUndrain(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata node undrain ID",
		`Undo 'strata node drain': the node takes replicas again. With the controller's
automatic rebalance (on by default), replicas move back onto it shortly after.`,
		"strata node undrain 4")
	pos, err := f.parse(args, "ID")
	if err != nil {
		return err
	}
	id, err := parseNodeID(pos[0])
	if err != nil {
		return err
	}
	rctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DrainNode(rctx, connect.NewRequest(&gatewayv1.DrainNodeRequest{NodeId: id, Undrain: true}))
	if err != nil {
		return err
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, map[string]any{"node": id, "drained": false, "replicas": resp.Msg.GetReplicas()})
	}
	fmt.Fprintf(e.Stdout, "node %d undrained: it takes replicas again\n", id)
	return nil
}
