package cli

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// nodeRowJSON is one line of `strata cluster nodes --output json`.
type nodeRowJSON struct {
	ID       int32  `json:"id"`
	Address  string `json:"address"`
	Rack     string `json:"rack"`
	State    string `json:"state"`
	Drain    string `json:"drain"`
	Replicas int    `json:"replicas"`
	Leaders  int    `json:"leaders"`
	Adding   int    `json:"adding"`
	Removing int    `json:"removing"`
	Bytes    *int64 `json:"bytes"`
}

// allTopics describes every topic, internal ones included.
func allTopics(ctx context.Context, e *Env) ([]*controllerv1.TopicDescription, error) {
	rctx, cancel := withTimeout(ctx)
	defer cancel()
	gw := e.gateway()
	list, err := gw.ListTopics(rctx, connect.NewRequest(&gatewayv1.ListTopicsRequest{IncludeInternal: true}))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range list.Msg.GetTopics() {
		names = append(names, t.GetName())
	}
	if len(names) == 0 {
		return nil, nil
	}
	resp, err := gw.DescribeTopics(rctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: names}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetTopics(), nil
}

// nodeRows counts what each registered node holds.
func nodeRows(ctx context.Context, e *Env) ([]nodeRowJSON, error) {
	addrs, nodes, err := nodeAddrs(ctx, e)
	if err != nil {
		return nil, err
	}
	topics, err := allTopics(ctx, e)
	if err != nil {
		return nil, err
	}
	var live []int32
	for _, n := range nodes {
		if n.GetState() != controllerv1.NodeState_NODE_STATE_DEAD {
			live = append(live, n.GetNode().GetNodeId())
		}
	}
	logs := describeLogs(ctx, e, addrs, live)
	rows := []nodeRowJSON{}
	for _, n := range nodes {
		id := n.GetNode().GetNodeId()
		r := nodeRowJSON{ID: id, Address: n.GetNode().GetAddress(), Rack: n.GetNode().GetRack(), State: nodeState(n.GetState())}
		for _, t := range topics {
			for _, p := range t.GetPartitions() {
				if slices.Contains(p.GetReplicas(), id) {
					r.Replicas++
				}
				if p.GetLeaderId() == id {
					r.Leaders++
				}
				if slices.Contains(p.GetAddingReplicas(), id) {
					r.Adding++
				}
				if slices.Contains(p.GetRemovingReplicas(), id) {
					r.Removing++
				}
			}
		}
		if n.GetDrained() {
			r.Drain = "draining"
			if r.Replicas == 0 && r.Leaders == 0 {
				r.Drain = "drained"
			}
		}
		if res, ok := logs[id]; ok {
			var b int64
			for _, p := range res {
				b += p.GetLocalSizeBytes()
			}
			r.Bytes = &b
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func clusterNodes(ctx context.Context, e *Env) error {
	rows, err := nodeRows(ctx, e)
	if err != nil {
		return err
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, rows)
	}
	var out [][]string
	for _, r := range rows {
		state := r.State
		if r.Drain != "" {
			state += ", " + r.Drain
		}
		bytes := "-"
		if r.Bytes != nil {
			bytes = humanBytes(*r.Bytes)
		}
		replicas := fmt.Sprint(r.Replicas)
		if r.Adding+r.Removing > 0 {
			replicas += fmt.Sprintf(" (+%d -%d)", r.Adding, r.Removing)
		}
		out = append(out, []string{fmt.Sprint(r.ID), r.Address, r.Rack, state, replicas, fmt.Sprint(r.Leaders), bytes})
	}
	table(e.Stdout, []string{"ID", "ADDRESS", "RACK", "STATE", "REPLICAS", "LEADERS", "BYTES"}, out)
	return nil
}

func clusterNodesCmd(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata cluster nodes",
		`List the storage nodes: id, address, rack, state (alive, dead; draining or drained),
the replicas each holds (with those being added and removed by moves), the
partitions it leads, and the bytes of its partition logs on disk. A drained
node that holds nothing can be stopped for good.`,
		"strata cluster nodes --output json")
	if _, err := f.parse(args); err != nil {
		return err
	}
	return clusterNodes(ctx, e)
}

type moveJSON struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	From      []int32 `json:"from"`
	To        []int32 `json:"to"`
	SizeBytes int64   `json:"size_bytes"`
}

type loadJSON struct {
	Node     int32 `json:"node"`
	Replicas int32 `json:"replicas"`
	Leaders  int32 `json:"leaders"`
	Eligible bool  `json:"eligible"`
}

func movesJSON(moves []*controllerv1.PlannedMove) []moveJSON {
	out := []moveJSON{}
	for _, m := range moves {
		out = append(out, moveJSON{m.GetTopic(), m.GetPartition(), int32s(m.GetFromReplicas()), int32s(m.GetToReplicas()), m.GetSizeBytes()})
	}
	return out
}

func loadsJSON(loads []*controllerv1.NodeLoad) []loadJSON {
	out := []loadJSON{}
	for _, l := range loads {
		out = append(out, loadJSON{l.GetNodeId(), l.GetReplicas(), l.GetLeaders(), l.GetEligible()})
	}
	return out
}

// printMoves prints planned moves as a table.
func printMoves(e *Env, moves []*controllerv1.PlannedMove) {
	var rows [][]string
	for _, m := range moves {
		size := "-"
		if m.GetSizeBytes() >= 0 {
			size = humanBytes(m.GetSizeBytes())
		}
		copies := false
		for _, r := range m.GetToReplicas() {
			copies = copies || !slices.Contains(m.GetFromReplicas(), r)
		}
		if !copies {
			size = "leader only"
		}
		rows = append(rows, []string{"  " + m.GetTopic(), fmt.Sprint(m.GetPartition()), joinInt32(m.GetFromReplicas()), joinInt32(m.GetToReplicas()), size})
	}
	table(e.Stdout, []string{"  TOPIC", "PARTITION", "FROM", "TO", "SIZE"}, rows)
}

func clusterRebalance(ctx context.Context, e *Env, args []string) error {
	var dryRun bool
	var mf moveFlags
	f := newFlags(e, "strata cluster rebalance [--dry-run] [--wait] [--throttle BYTES/S]",
		`Move replicas so that every live, undrained node holds within one replica and
one preferred leader of an even share, moving as few replicas (and bytes) as it
can, and every replica off drained nodes. Moves run in the background: added
replicas copy the partition from its leader, join the in-sync replicas, then
leadership moves to each partition's preferred replica and the old replicas are
deleted. Partitions already being moved are left as they are.

--throttle limits the replication of the moves on every node (bytes per
second, as 50MB, 512KiB or 1048576) so producers keep their bandwidth; it is
lifted when no move runs. --wait prints progress (bytes copied, rate, time
left) until every move is done.`,
		"strata cluster rebalance --dry-run\nstrata cluster rebalance --wait --throttle 50MB")
	f.Bool(&dryRun, "", "dry-run", "show the plan; move nothing")
	mf.add(f, "every move is done")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	rctx, cancel := withTimeout(ctx)
	resp, err := e.gateway().Rebalance(rctx, connect.NewRequest(&gatewayv1.RebalanceRequest{DryRun: dryRun, ThrottleBytesPerSecond: mf.rate}))
	cancel()
	if err != nil {
		return err
	}
	m := resp.Msg
	if e.Output == "json" {
		if err := writeJSON(e.Stdout, map[string]any{
			"moves": movesJSON(m.GetMoves()), "before": loadsJSON(m.GetBefore()), "after": loadsJSON(m.GetAfter()),
			"started": m.GetStarted(), "in_progress": m.GetInProgress(), "dry_run": dryRun,
		}); err != nil {
			return err
		}
	} else {
		var bytes int64
		copies := 0
		for _, mv := range m.GetMoves() {
			for _, r := range mv.GetToReplicas() {
				if !slices.Contains(mv.GetFromReplicas(), r) {
					copies++
					bytes += max(mv.GetSizeBytes(), 0)
				}
			}
		}
		if len(m.GetMoves()) == 0 {
			fmt.Fprintln(e.Stdout, "balanced: nothing to move")
		} else {
			fmt.Fprintf(e.Stdout, "plan: %d partition(s) move, %d replica(s) copied (%s)\n", len(m.GetMoves()), copies, humanBytes(bytes))
			printMoves(e, m.GetMoves())
			var rows [][]string
			after := map[int32]*controllerv1.NodeLoad{}
			for _, l := range m.GetAfter() {
				after[l.GetNodeId()] = l
			}
			for _, l := range m.GetBefore() {
				a := after[l.GetNodeId()]
				note := ""
				if !l.GetEligible() {
					note = "not eligible (dead or drained)"
				}
				rows = append(rows, []string{fmt.Sprintf("  %d", l.GetNodeId()),
					fmt.Sprintf("%d/%d", l.GetReplicas(), l.GetLeaders()), fmt.Sprintf("%d/%d", a.GetReplicas(), a.GetLeaders()), note})
			}
			fmt.Fprintln(e.Stdout, "replicas/preferred leaders per node:")
			table(e.Stdout, []string{"  NODE", "BEFORE", "AFTER", ""}, rows)
		}
		if m.GetInProgress() > 0 {
			fmt.Fprintf(e.Stdout, "%d partition(s) were already being moved and are left as they are\n", m.GetInProgress())
		}
		switch {
		case dryRun:
			fmt.Fprintln(e.Stdout, "dry run: nothing started")
		case m.GetStarted():
			fmt.Fprintf(e.Stdout, "started %d move(s)\n", len(m.GetMoves()))
		}
	}
	if !mf.wait || dryRun {
		return nil
	}
	return waitMoves(ctx, e, nil, nil, mf.interval, mf.timeout)
}
