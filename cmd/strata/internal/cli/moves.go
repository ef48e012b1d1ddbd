package cli

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// What the partition-move commands (cluster rebalance, node drain, topic
// move) share: the throttle flag, progress while moves run, and byte
// counts for people.

// moveFlags are the flags every command that starts moves takes.
type moveFlags struct {
	wait              bool
	throttle          string
	interval, timeout time.Duration
	rate              int64 // --throttle parsed, by check
}

// add registers --wait (saying what it waits for), --throttle, --interval
// and --timeout.
func (m *moveFlags) add(f *flagSet, waitFor string) {
	f.Bool(&m.wait, "w", "wait", "wait until "+waitFor+", printing progress")
	f.String(&m.throttle, "", "throttle", "BYTES/S", "", "replication throttle of the moves, per node (default none)")
	f.Duration(&m.interval, "", "interval", "DURATION", 2*time.Second, "progress interval of --wait")
	f.Duration(&m.timeout, "", "timeout", "DURATION", 0, "how long --wait waits (0: until done)")
}

// check validates the flags after parsing and parses --throttle.
func (m *moveFlags) check() error {
	rate, err := parseRate(m.throttle)
	if err != nil {
		return err
	}
	if m.interval <= 0 {
		return usagef("--interval must be positive")
	}
	m.rate = rate
	return nil
}

// parseRate reads a byte rate: a whole number of bytes per second, or with
// a unit: k/K/KB/M/MB/G/GB (powers of 1000) or KiB/MiB/GiB (powers of
// 1024), with or without "/s". "" and "0" mean no throttle.
func parseRate(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	if t == "" {
		return 0, nil
	}
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult := map[string]float64{"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[strings.ToLower(unit)]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v < 0 || v*mult > math.MaxInt64/2 {
		return 0, usagef("--throttle %q: want bytes per second, like 10MB, 512KiB or 1048576", s)
	}
	return int64(v * mult), nil
}

// humanBytes renders a byte count with a decimal unit: "83.3 MB".
func humanBytes(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if math.Abs(f) < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1000
	}
	return ""
}

// addrs returns the Connect base URL of every registered node from the
// gateway's DescribeCluster, and the statuses.
func nodeAddrs(ctx context.Context, e *Env) (map[int32]string, []*controllerv1.NodeStatus, error) {
	rctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DescribeCluster(rctx, connect.NewRequest(&gatewayv1.DescribeClusterRequest{}))
	if err != nil {
		return nil, nil, err
	}
	out := map[int32]string{}
	for _, n := range resp.Msg.GetNodes() {
		addr := n.GetNode().GetAddress()
		if !strings.Contains(addr, "://") {
			addr = "http://" + addr
		}
		out[n.GetNode().GetNodeId()] = strings.TrimRight(addr, "/")
	}
	return out, resp.Msg.GetNodes(), nil
}

// describeLogs asks nodes (all replicas each holds) for their logs, all at
// once, with a short timeout; a node that does not answer is missing.
func describeLogs(ctx context.Context, e *Env, addrs map[int32]string, nodes []int32) map[int32][]*storagev1.DescribeLogPartitionResult {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[int32][]*storagev1.DescribeLogPartitionResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range nodes {
		addr := addrs[id]
		if addr == "" {
			continue
		}
		wg.Go(func() {
			resp, err := e.storage(addr).DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{}))
			if err != nil {
				return
			}
			mu.Lock()
			out[id] = resp.Msg.GetPartitions()
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// moveProgress is one look at the running moves.
type moveProgress struct {
	Moving         int      `json:"moving"`
	BytesCopied    int64    `json:"bytes_copied"`
	BytesTotal     int64    `json:"bytes_total"`
	BytesPerSecond int64    `json:"bytes_per_second"`
	ETASeconds     *int64   `json:"eta_seconds"`
	Throttle       int64    `json:"throttle_bytes_per_second"`
	Partitions     []string `json:"partitions"`
}

// progressOf measures the moves in parts: for each adding replica, how
// much of the leader's log it holds now. Unknown sizes count as nothing
// copied of nothing.
func progressOf(ctx context.Context, e *Env, parts []*controllerv1.PartitionChange) moveProgress {
	p := moveProgress{Moving: len(parts), Partitions: []string{}}
	addrs, _, err := nodeAddrs(ctx, e)
	if err != nil {
		return p
	}
	need := map[int32]bool{}
	for _, pc := range parts {
		p.Partitions = append(p.Partitions, fmt.Sprintf("%s-%d", pc.GetTopic(), pc.GetPartition().GetPartition()))
		if l := pc.GetPartition().GetLeaderId(); l >= 0 {
			need[l] = true
		}
		for _, a := range pc.GetPartition().GetAddingReplicas() {
			need[a] = true
		}
	}
	var ids []int32
	for id := range need {
		ids = append(ids, id)
	}
	logs := describeLogs(ctx, e, addrs, ids)
	size := func(node int32, topic string, part int32) (int64, bool) {
		for _, r := range logs[node] {
			if r.GetTopic() == topic && r.GetPartition() == part && r.GetError() == nil {
				return r.GetLocalSizeBytes(), true
			}
		}
		return 0, false
	}
	for _, pc := range parts {
		pm := pc.GetPartition()
		total, ok := size(pm.GetLeaderId(), pc.GetTopic(), pm.GetPartition())
		if !ok {
			continue
		}
		for _, a := range pm.GetAddingReplicas() {
			have, _ := size(a, pc.GetTopic(), pm.GetPartition())
			if slices.Contains(pm.GetIsr(), a) {
				have = total
			}
			p.BytesTotal += total
			p.BytesCopied += min(have, total)
		}
	}
	return p
}

// waitMoves polls the running moves that match keep (all when nil) every
// interval, printing progress (bytes copied, rate, time left), until none
// is left or done reports true; then it returns nil. It gives up after
// timeout (0: never).
func waitMoves(ctx context.Context, e *Env, keep func(*controllerv1.PartitionChange) bool, done func(context.Context) (bool, error), interval, timeout time.Duration) error {
	start := time.Now()
	var lastCopied int64 = -1
	var lastAt time.Time
	var rate float64
	for {
		rctx, cancel := withTimeout(ctx)
		resp, err := e.gateway().ListPartitionReassignments(rctx, connect.NewRequest(&gatewayv1.ListPartitionReassignmentsRequest{}))
		cancel()
		if err != nil {
			return err
		}
		var parts []*controllerv1.PartitionChange
		for _, pc := range resp.Msg.GetReassignments() {
			if keep == nil || keep(pc) {
				parts = append(parts, pc)
			}
		}
		finished := len(parts) == 0
		if finished && done != nil {
			if finished, err = done(ctx); err != nil {
				return err
			}
		}
		if finished {
			took := time.Since(start).Round(100 * time.Millisecond)
			if e.Output == "json" {
				return writeJSON(e.Stdout, map[string]any{"done": true, "seconds": took.Seconds()})
			}
			fmt.Fprintf(e.Stdout, "done after %s\n", took)
			return nil
		}
		p := progressOf(ctx, e, parts)
		p.Throttle = resp.Msg.GetThrottleBytesPerSecond()
		now := time.Now()
		if lastCopied >= 0 && now.After(lastAt) && p.BytesCopied >= lastCopied {
			r := float64(p.BytesCopied-lastCopied) / now.Sub(lastAt).Seconds()
			if rate == 0 {
				rate = r
			} else {
				rate = 0.5*rate + 0.5*r
			}
		}
		lastCopied, lastAt = p.BytesCopied, now
		p.BytesPerSecond = int64(rate)
		if rate > 0 && p.BytesTotal >= p.BytesCopied {
			eta := int64(math.Ceil(float64(p.BytesTotal-p.BytesCopied) / rate))
			p.ETASeconds = &eta
		}
		printProgress(e, p)
		if timeout > 0 && time.Since(start) > timeout {
			return fmt.Errorf("moves still running after %s: %s", timeout, strings.Join(p.Partitions, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func printProgress(e *Env, p moveProgress) {
	if e.Output == "json" {
		writeJSON(e.Stdout, p)
		return
	}
	pct := 100.0
	if p.BytesTotal > 0 {
		pct = 100 * float64(p.BytesCopied) / float64(p.BytesTotal)
	}
	line := fmt.Sprintf("moving %d partition(s): %s of %s copied (%.0f%%)", p.Moving, humanBytes(p.BytesCopied), humanBytes(p.BytesTotal), pct)
	if p.BytesPerSecond > 0 {
		line += fmt.Sprintf(", %s/s", humanBytes(p.BytesPerSecond))
	}
	if p.ETASeconds != nil {
		line += fmt.Sprintf(", about %s left", (time.Duration(*p.ETASeconds) * time.Second).String())
	}
	if p.Throttle > 0 {
		line += fmt.Sprintf(" (throttle %s/s per node)", humanBytes(p.Throttle))
	}
	fmt.Fprintf(e.Stdout, "%s  %s\n", time.Now().Format(time.TimeOnly), line)
}

// partitionName renders "topic-3".
func partitionName(topic string, p int32) string { return fmt.Sprintf("%s-%d", topic, p) }

// detailText is a per-partition error as one line.
func detailText(d *commonv1.ErrorDetail) string { return oneLine(d.GetMessage()) }
