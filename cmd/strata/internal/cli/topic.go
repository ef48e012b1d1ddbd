package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// parseConfigs turns KEY=VALUE flags into a map.
func parseConfigs(kvs []string, flag string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s wants KEY=VALUE, not %q", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func topicCreate(ctx context.Context, e *Env, args []string) error {
	var partitions, replicas int
	var configs []string
	var validate bool
	f := newFlags(e, "strata topic create NAME [-p PARTITIONS] [-r REPLICAS] [-c KEY=VALUE]...",
		"Create a topic. Replicas are not capped to the number of nodes: asking for more than\nthe cluster has fails with the controller's error.",
		"strata topic create orders -p 6 -r 3 -c retention.ms=86400000")
	f.Int(&partitions, "p", "partitions", "PARTITIONS", 1, "number of partitions")
	f.Int(&replicas, "r", "replicas", "REPLICAS", 3, "replicas per partition (replication factor)")
	f.List(&configs, "c", "config", "KEY=VALUE", "topic configuration override, Kafka key names; repeatable")
	f.Bool(&validate, "", "validate-only", "check the request and show the placement; create nothing")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	if partitions < 1 || replicas < 1 {
		return usagef("-p and -r must be at least 1")
	}
	cfg, err := parseConfigs(configs, "-c")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
		Name: pos[0], Partitions: int32(partitions), ReplicationFactor: int32(replicas), Configs: cfg, ValidateOnly: validate,
	}))
	if err != nil {
		return err
	}
	t := resp.Msg.GetTopic()
	if e.Output == "json" {
		return writeJSON(e.Stdout, describeJSON(t, nil))
	}
	verb := "created"
	if validate {
		verb = "would create"
	}
	fmt.Fprintf(e.Stdout, "%s topic %q with %d partitions, replication factor %d\n", verb, t.GetName(), len(t.GetPartitions()), t.GetReplicationFactor())
	return nil
}

type topicListJSON struct {
	Name              string `json:"name"`
	TopicID           string `json:"topic_id"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int32  `json:"replication_factor"`
	Internal          bool   `json:"internal"`
}

func topicList(ctx context.Context, e *Env, args []string) error {
	var internal bool
	f := newFlags(e, "strata topic list [--internal]", "List topics, sorted by name.", "strata topic list --output json")
	f.Bool(&internal, "", "internal", "include system topics")
	if _, err := f.parse(args); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().ListTopics(ctx, connect.NewRequest(&gatewayv1.ListTopicsRequest{IncludeInternal: internal}))
	if err != nil {
		return err
	}
	if e.Output == "json" {
		out := []topicListJSON{}
		for _, t := range resp.Msg.GetTopics() {
			out = append(out, topicListJSON{t.GetName(), t.GetTopicId(), t.GetPartitions(), t.GetReplicationFactor(), t.GetInternal()})
		}
		return writeJSON(e.Stdout, out)
	}
	var rows [][]string
	for _, t := range resp.Msg.GetTopics() {
		rows = append(rows, []string{t.GetName(), fmt.Sprint(t.GetPartitions()), fmt.Sprint(t.GetReplicationFactor())})
	}
	table(e.Stdout, []string{"TOPIC", "PARTITIONS", "REPLICATION"}, rows)
	return nil
}

// describeJSON is the shape of `topic describe --output json` (and of
// `topic create --output json`, without offsets).
type topicJSON struct {
	Name              string            `json:"name"`
	TopicID           string            `json:"topic_id"`
	ReplicationFactor int32             `json:"replication_factor"`
	Internal          bool              `json:"internal"`
	Configs           map[string]string `json:"configs"`
	Partitions        []partitionJSON   `json:"partitions"`
}

type partitionJSON struct {
	Partition       int32   `json:"partition"`
	Leader          int32   `json:"leader"`
	LeaderEpoch     int32   `json:"leader_epoch"`
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	OfflineReplicas []int32 `json:"offline_replicas"`
	// AddingReplicas and RemovingReplicas are set while a move of the
	// partition runs (empty otherwise).
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	LogStartOffset   *int64  `json:"log_start_offset"`
	LogEndOffset     *int64  `json:"log_end_offset"`
	// The extents below come from the leader's DescribeLog; null when the
	// leader could not be asked (or, for the tiered offsets, when nothing
	// of the partition is tiered). The tiered start is the first offset
	// available anywhere, which is where the tier starts whenever it holds
	// data the node's disk no longer does.
	LocalLogStartOffset  *int64 `json:"local_log_start_offset"`
	LocalLogEndOffset    *int64 `json:"local_log_end_offset"`
	LocalBytes           *int64 `json:"local_bytes"`
	TieredLogStartOffset *int64 `json:"tiered_log_start_offset"`
	TieredLogEndOffset   *int64 `json:"tiered_log_end_offset"`
	TieredBytes          *int64 `json:"tiered_bytes"`
	// CleanerDirtyRatio is the leader's log cleaner dirty ratio, for a
	// compacted topic: the share of its cleanable bytes not yet cleaned.
	// Null for other topics.
	CleanerDirtyRatio *float64 `json:"cleaner_dirty_ratio"`
	Error             string   `json:"error,omitempty"`
}

func describeJSON(t *controllerv1.TopicDescription, offsets map[int32]*gatewayv1.PartitionOffsets) topicJSON {
	out := topicJSON{Name: t.GetName(), TopicID: t.GetTopicId(), ReplicationFactor: t.GetReplicationFactor(),
		Internal: t.GetInternal(), Configs: map[string]string{}, Partitions: []partitionJSON{}}
	for _, c := range t.GetConfigs() {
		out.Configs[c.GetKey()] = c.GetValue()
	}
	for _, p := range t.GetPartitions() {
		pj := partitionJSON{Partition: p.GetPartition(), Leader: p.GetLeaderId(), LeaderEpoch: p.GetLeaderEpoch(),
			Replicas: int32s(p.GetReplicas()), ISR: int32s(p.GetIsr()), OfflineReplicas: int32s(p.GetOfflineReplicas()),
			AddingReplicas: int32s(p.GetAddingReplicas()), RemovingReplicas: int32s(p.GetRemovingReplicas())}
		if o := offsets[p.GetPartition()]; o != nil {
			if o.GetError() != nil {
				pj.Error = oneLine(o.GetError().GetMessage())
			} else {
				start, end := o.GetLogStartOffset(), o.GetHighWatermark()
				pj.LogStartOffset, pj.LogEndOffset = &start, &end
			}
		}
		out.Partitions = append(out.Partitions, pj)
	}
	return out
}

func topicDescribe(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata topic describe NAME",
		"Show a topic's partitions with leader, replicas, ISR, and log start and end offsets\n(the end offset is the high watermark: one past the last committed record).",
		"strata topic describe orders --output json")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	name := pos[0]
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{name}, IncludeOffsets: true}))
	if err != nil {
		return aboutTopic(name, err)
	}
	if len(resp.Msg.GetTopics()) == 0 {
		return aboutTopic(name, connect.NewError(connect.CodeNotFound, fmt.Errorf("topic %q does not exist", name)))
	}
	t := resp.Msg.GetTopics()[0]
	offsets := map[int32]*gatewayv1.PartitionOffsets{}
	for _, o := range resp.Msg.GetPartitionOffsets() {
		if o.GetTopic() == name {
			offsets[o.GetPartition()] = o
		}
	}
	if len(offsets) == 0 && len(t.GetPartitions()) > 0 {
		offsets = leaderOffsets(ctx, e, name, len(t.GetPartitions()))
	}
	d := describeJSON(t, offsets)
	addLogExtents(ctx, e, name, &d)
	if e.Output == "json" {
		return writeJSON(e.Stdout, d)
	}
	fmt.Fprintf(e.Stdout, "topic %s  id %s  partitions %d  replication %d\n", d.Name, d.TopicID, len(d.Partitions), d.ReplicationFactor)
	var rows [][]string
	for _, p := range d.Partitions {
		start, end := "-", "-"
		if p.LogStartOffset != nil {
			start, end = fmt.Sprint(*p.LogStartOffset), fmt.Sprint(*p.LogEndOffset)
		}
		leader := fmt.Sprint(p.Leader)
		if p.Leader < 0 {
			leader = "none"
		}
		rows = append(rows, []string{fmt.Sprint(p.Partition), leader, fmt.Sprint(p.LeaderEpoch), joinInt32(p.Replicas), joinInt32(p.ISR), start, end,
			dashIfNil(p.LocalLogStartOffset), dashIfNil(p.LocalLogEndOffset), dashIfNil(p.LocalBytes),
			dashIfNil(p.TieredLogStartOffset), dashIfNil(p.TieredLogEndOffset), dashIfNil(p.TieredBytes)})
	}
	header := []string{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "START", "END",
		"LOCAL-START", "LOCAL-END", "LOCAL-BYTES", "TIERED-START", "TIERED-END", "TIERED-BYTES"}
	// For a compacted topic, the log cleaner's dirty ratio of each leader.
	dirty := false
	for _, p := range d.Partitions {
		dirty = dirty || p.CleanerDirtyRatio != nil
	}
	if dirty {
		header = append(header, "DIRTY")
		for i, p := range d.Partitions {
			v := "-"
			if p.CleanerDirtyRatio != nil {
				v = fmt.Sprintf("%.2f", *p.CleanerDirtyRatio)
			}
			rows[i] = append(rows[i], v)
		}
	}
	// While partitions move, one more column says what each move adds and
	// removes.
	moving := false
	for _, p := range d.Partitions {
		moving = moving || len(p.AddingReplicas)+len(p.RemovingReplicas) > 0
	}
	if moving {
		header = append(header, "MOVING")
		for i, p := range d.Partitions {
			m := "-"
			if len(p.AddingReplicas)+len(p.RemovingReplicas) > 0 {
				m = "+" + joinOrNone(p.AddingReplicas) + " -" + joinOrNone(p.RemovingReplicas)
			}
			rows[i] = append(rows[i], m)
		}
	}
	table(e.Stdout, header, rows)
	if len(d.Configs) > 0 {
		keys := make([]string, 0, len(d.Configs))
		for k := range d.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(e.Stdout, "configs:")
		for _, k := range keys {
			fmt.Fprintf(e.Stdout, "  %s=%s\n", k, d.Configs[k])
		}
	}
	return nil
}

// dashIfNil renders an optional number for the text table.
func dashIfNil(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// addLogExtents fills the local and tiered extents of d's partitions from
// their leaders' DescribeLog, one call per leader, all at once. Node
// addresses come from the gateway's Metadata. Whatever cannot be learned
// (no leader, a node down, an error for one partition) stays null: the
// describe itself never fails for it.
func addLogExtents(ctx context.Context, e *Env, topic string, d *topicJSON) {
	byLeader := map[int32][]int{} // leader id → indexes into d.Partitions
	for i, p := range d.Partitions {
		if p.Leader >= 0 {
			byLeader[p.Leader] = append(byLeader[p.Leader], i)
		}
	}
	if len(byLeader) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := e.gateway().Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{topic}}))
	if err != nil {
		return
	}
	addrs := map[int32]string{}
	for _, n := range md.Msg.GetNodes() {
		addrs[n.GetNodeId()] = n.GetAddress()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for leader, idx := range byLeader {
		addr := addrs[leader]
		if addr == "" {
			continue
		}
		if !strings.Contains(addr, "://") {
			addr = "http://" + addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &storagev1.DescribeLogRequest{}
			for _, i := range idx {
				req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: topic, Partition: d.Partitions[i].Partition})
			}
			resp, err := e.storage(addr).DescribeLog(ctx, connect.NewRequest(req))
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range resp.Msg.GetPartitions() {
				for _, i := range idx {
					if p := &d.Partitions[i]; p.Partition == r.GetPartition() && r.GetTopic() == topic && r.GetError() == nil {
						setLogExtent(p, r)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// setLogExtent copies one DescribeLog answer into p.
func setLogExtent(p *partitionJSON, r *storagev1.DescribeLogPartitionResult) {
	ptr := func(v int64) *int64 { return &v }
	p.LocalLogStartOffset, p.LocalLogEndOffset, p.LocalBytes = ptr(r.GetLocalLogStartOffset()), ptr(r.GetLogEndOffset()), ptr(r.GetLocalSizeBytes())
	p.TieredBytes = ptr(r.GetTieredSizeBytes())
	if r.CleanerDirtyRatio != nil {
		v := r.GetCleanerDirtyRatio()
		p.CleanerDirtyRatio = &v
	}
	if r.GetTieredEndOffset() >= 0 {
		p.TieredLogStartOffset, p.TieredLogEndOffset = ptr(r.GetLogStartOffset()), ptr(r.GetTieredEndOffset())
	}
}

// leaderOffsets asks the partition leaders for log start and end offsets,
// for a gateway that does not add them to DescribeTopics. A failure leaves
// the offsets out (the text output shows "-", JSON null) with the error.
func leaderOffsets(ctx context.Context, e *Env, topic string, n int) map[int32]*gatewayv1.PartitionOffsets {
	out := map[int32]*gatewayv1.PartitionOffsets{}
	c, err := client.NewConsumer(e.gatewayURL(), e.consumerOpts(client.UnknownTopicWait(0), client.RequestTimeout(10*time.Second))...)
	if err != nil {
		return out
	}
	defer c.Close()
	parts := make([]int32, n)
	for i := range parts {
		parts[i] = int32(i)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	starts, err := c.ListOffsets(ctx, topic, parts, client.StartOffset())
	if err != nil {
		return out
	}
	ends, err := c.ListOffsets(ctx, topic, parts, client.EndOffset())
	if err != nil {
		return out
	}
	for _, p := range parts {
		out[p] = &gatewayv1.PartitionOffsets{Topic: topic, Partition: p, LogStartOffset: starts[p], HighWatermark: ends[p]}
	}
	return out
}

func topicAlter(ctx context.Context, e *Env, args []string) error {
	var set, del []string
	var validate bool
	f := newFlags(e, "strata topic alter NAME -c KEY=VALUE... [-d KEY]...",
		"Set or remove configuration overrides of a topic and print the effective configuration.",
		"strata topic alter orders -c retention.ms=3600000 -d retention.bytes")
	f.List(&set, "c", "config", "KEY=VALUE", "override to set; repeatable")
	f.List(&del, "d", "delete-config", "KEY", "override to remove (back to the cluster default); repeatable")
	f.Bool(&validate, "", "validate-only", "check the change; apply nothing")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	if len(set) == 0 && len(del) == 0 {
		return usagef("nothing to change: give -c KEY=VALUE or -d KEY (see '%s --help')", e.Path)
	}
	cfg, err := parseConfigs(set, "-c")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().AlterTopicConfig(ctx, connect.NewRequest(&gatewayv1.AlterTopicConfigRequest{
		Name: pos[0], SetConfigs: cfg, DeleteConfigs: del, ValidateOnly: validate,
	}))
	if err != nil {
		return aboutTopic(pos[0], err)
	}
	out := map[string]string{}
	for _, c := range resp.Msg.GetConfigs() {
		out[c.GetKey()] = c.GetValue()
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, map[string]any{"name": pos[0], "configs": out})
	}
	var rows [][]string
	for _, c := range resp.Msg.GetConfigs() {
		src := "default"
		if c.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC {
			src = "topic"
		}
		rows = append(rows, []string{c.GetKey(), c.GetValue(), src})
	}
	table(e.Stdout, []string{"KEY", "VALUE", "SOURCE"}, rows)
	return nil
}

func topicDelete(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata topic delete NAME", "Delete a topic and all its records.", "strata topic delete orders")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: pos[0]}))
	if err != nil {
		return aboutTopic(pos[0], err)
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, map[string]string{"name": pos[0], "topic_id": resp.Msg.GetTopicId()})
	}
	fmt.Fprintf(e.Stdout, "deleted topic %q\n", pos[0])
	return nil
}
