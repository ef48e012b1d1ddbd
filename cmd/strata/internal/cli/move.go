package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// parseReplicas reads "4,5,6".
func parseReplicas(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || id < 0 {
			return nil, usagef("--replicas %q: want node ids separated by commas, like 4,5,6", s)
		}
		out = append(out, int32(id))
	}
	return out, nil
}

func topicMove(ctx context.Context, e *Env, args []string) error {
	var partition int
	var replicas string
	var cancelMove bool
	var mf moveFlags
	f := newFlags(e, "strata topic move NAME --partition P --replicas 4,5,6 [--wait]",
		`Move one partition to other nodes (the first one listed is its preferred
leader). The new replicas copy the partition from its leader and join the
in-sync replicas; then the first of them that is in sync takes the leadership
and the replicas not listed are deleted. Producers and consumers carry on
throughout. The same nodes in another order only move the preferred leader.

--cancel stops a running move and goes back to the replicas the partition had
(refused when too few of them are still in sync; then let it finish).
--wait prints progress (bytes copied, rate, time left) until the move is done.`,
		"strata topic move orders --partition 3 --replicas 4,5,6 --wait")
	f.Int(&partition, "p", "partition", "P", -1, "partition index")
	f.String(&replicas, "r", "replicas", "IDS", "", "target node ids, preferred leader first")
	f.Bool(&cancelMove, "", "cancel", "cancel the partition's running move")
	mf.add(f, "the move is done")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	if partition < 0 {
		return usagef("--partition is required (see '%s --help')", e.Path)
	}
	var target []int32
	switch {
	case cancelMove && replicas != "":
		return usagef("give --replicas or --cancel, not both")
	case !cancelMove && replicas == "":
		return usagef("--replicas is required (see '%s --help')", e.Path)
	case !cancelMove:
		if target, err = parseReplicas(replicas); err != nil {
			return err
		}
	}
	if err := mf.check(); err != nil {
		return err
	}
	topic := pos[0]
	rctx, cancel := withTimeout(ctx)
	resp, err := e.gateway().AlterPartitionReassignments(rctx, connect.NewRequest(&gatewayv1.AlterPartitionReassignmentsRequest{
		Reassignments:          []*controllerv1.PartitionReassignment{{Topic: topic, Partition: int32(partition), Replicas: target}},
		ThrottleBytesPerSecond: mf.rate,
	}))
	cancel()
	if err != nil {
		return aboutTopic(topic, err)
	}
	if len(resp.Msg.GetResults()) != 1 {
		return fmt.Errorf("the gateway answered %d results for one partition", len(resp.Msg.GetResults()))
	}
	res := resp.Msg.GetResults()[0]
	name := partitionName(topic, int32(partition))
	if d := res.GetError(); d != nil {
		return fmt.Errorf("%s: %s", name, detailText(d))
	}
	st := res.GetState()
	if e.Output == "json" {
		if err := writeJSON(e.Stdout, map[string]any{"topic": topic, "partition": partition, "replicas": int32s(st.GetReplicas()),
			"adding_replicas": int32s(st.GetAddingReplicas()), "removing_replicas": int32s(st.GetRemovingReplicas()),
			"leader": st.GetLeaderId(), "cancelled": cancelMove}); err != nil {
			return err
		}
	} else {
		switch {
		case cancelMove:
			fmt.Fprintf(e.Stdout, "cancelled the move of %s: back on %s, led by %d\n", name, joinInt32(st.GetReplicas()), st.GetLeaderId())
		case len(st.GetAddingReplicas())+len(st.GetRemovingReplicas()) == 0:
			fmt.Fprintf(e.Stdout, "%s is on %s, led by %d\n", name, joinInt32(st.GetReplicas()), st.GetLeaderId())
		default:
			fmt.Fprintf(e.Stdout, "moving %s to %s: adding %s, removing %s\n", name, joinInt32(target),
				joinOrNone(st.GetAddingReplicas()), joinOrNone(st.GetRemovingReplicas()))
		}
	}
	if !mf.wait || cancelMove {
		return nil
	}
	this := func(pc *controllerv1.PartitionChange) bool {
		return pc.GetTopic() == topic && pc.GetPartition().GetPartition() == int32(partition)
	}
	if err := waitMoves(ctx, e, this, nil, mf.interval, mf.timeout); err != nil {
		return err
	}
	if e.Output != "json" {
		rctx, cancel := withTimeout(ctx)
		defer cancel()
		d, err := e.gateway().DescribeTopics(rctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{topic}}))
		if err == nil && len(d.Msg.GetTopics()) == 1 {
			for _, p := range d.Msg.GetTopics()[0].GetPartitions() {
				if p.GetPartition() == int32(partition) {
					fmt.Fprintf(e.Stdout, "%s is on %s, led by %d\n", name, joinInt32(p.GetReplicas()), p.GetLeaderId())
				}
			}
		}
	}
	return nil
}

func joinOrNone(v []int32) string {
	if len(v) == 0 {
		return "none"
	}
	return joinInt32(v)
}

func topicAddPartitions(ctx context.Context, e *Env, args []string) error {
	var total int
	var validate bool
	f := newFlags(e, "strata topic add-partitions NAME -p TOTAL",
		`Add partitions to a topic so that it has TOTAL. The new partitions are placed
over the live, undrained nodes like a new topic's.

Keys move: a record's partition is the hash of its key modulo the number of
partitions (as in Kafka), so records of a key produced from now on may go to
another partition than the earlier ones, and per-key order holds only within
each partition. Partitions cannot be removed.`,
		"strata topic add-partitions orders -p 24")
	f.Int(&total, "p", "partitions", "TOTAL", 0, "the topic's partition count afterwards")
	f.Bool(&validate, "", "validate-only", "check the request and show the placement; change nothing")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	if total < 1 {
		return usagef("-p TOTAL is required: the partition count the topic should have")
	}
	rctx, cancel := withTimeout(ctx)
	defer cancel()
	before, err := e.gateway().DescribeTopics(rctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: pos[0:1]}))
	if err != nil {
		return aboutTopic(pos[0], err)
	}
	had := 0
	if ts := before.Msg.GetTopics(); len(ts) == 1 {
		had = len(ts[0].GetPartitions())
	}
	resp, err := e.gateway().CreatePartitions(rctx, connect.NewRequest(&gatewayv1.CreatePartitionsRequest{
		Topic: pos[0], Total: int32(total), ValidateOnly: validate,
	}))
	if err != nil {
		return aboutTopic(pos[0], err)
	}
	t := resp.Msg.GetTopic()
	if e.Output == "json" {
		return writeJSON(e.Stdout, describeJSON(t, nil))
	}
	verb := "now has"
	if validate {
		verb = "would have"
	}
	fmt.Fprintf(e.Stdout, "topic %q %s %d partitions (had %d); records of a key produced from now on may go to another partition\n",
		t.GetName(), verb, len(t.GetPartitions()), had)
	var rows [][]string
	for _, p := range t.GetPartitions() {
		if int(p.GetPartition()) >= had {
			rows = append(rows, []string{fmt.Sprint(p.GetPartition()), fmt.Sprint(p.GetLeaderId()), joinInt32(p.GetReplicas())})
		}
	}
	if len(rows) > 0 {
		table(e.Stdout, []string{"NEW PARTITION", "LEADER", "REPLICAS"}, rows)
	}
	return nil
}
