package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
	"github.com/strata-mq/strata/tests/harness"
)

// TestGroupCLI drives the strata CLI's group commands end to end against
// real processes (controller, storage, gateway, coordinator on Postgres):
//
//   - `consume orders -g billing -e -f json` reads every record once;
//   - run again, it reads nothing (the first run committed everything);
//   - `group describe billing --output json` shows, for each of the 12
//     partitions, the committed (current) offset, the log end offset, lag 0
//     and the owner field, and the text form has the same columns;
//   - `group reset billing --topic orders --to earliest`, then consume again,
//     re-reads everything once;
//   - `group delete billing` removes it from `group list`.
func TestGroupCLI(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{DSN: dsn, SessionTimeout: faultSession, HeartbeatInterval: faultHeartbeat})
	ctx := harness.Deadline(t, 120*time.Second)
	cli := func(stdin string, args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, strata, append([]string{"--gateway", gs.Gateway.URL}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("strata %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		t.Logf("strata %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return out.String()
	}

	cli("", "topic", "create", "orders", "-p", "12", "-r", "1")
	const n = 240
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "key-%d\tv-%03d\n", i%48, i)
	}
	cli(in.String(), "produce", "orders", "-f", `%k\t%v\n`)

	// consume reads every record exactly once and returns the high
	// watermark of each partition it saw.
	type rec struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Value     string `json:"value"`
	}
	consume := func(what string, want int) {
		t.Helper()
		out := cli("", "consume", "orders", "-g", "billing", "-e", "-f", "json")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.TrimSpace(out) == "" {
			lines = nil
		}
		if len(lines) != want {
			t.Fatalf("%s: read %d records, want %d:\n%s", what, len(lines), want, out)
		}
		seen := map[string]bool{}
		at := map[[2]int64]bool{}
		for _, l := range lines {
			var r rec
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s: %q: %v", what, l, err)
			}
			if r.Topic != "orders" || seen[r.Value] || at[[2]int64{int64(r.Partition), r.Offset}] {
				t.Fatalf("%s: unexpected or repeated record %q", what, l)
			}
			seen[r.Value], at[[2]int64{int64(r.Partition), r.Offset}] = true, true
		}
		for i := range want {
			if v := fmt.Sprintf("v-%03d", i); !seen[v] {
				t.Fatalf("%s: record %s not read", what, v)
			}
		}
	}
	consume("first consume", n)
	consume("second consume", 0)

	out := cli("", "group", "describe", "billing", "--output", "json")
	var raw struct {
		Group struct {
			Partitions []map[string]any `json:"partitions"`
		} `json:"group"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("describe --output json: %v\n%s", err, out)
	}
	var desc gatewayv1.DescribeGroupResponse
	if err := protojson.Unmarshal([]byte(out), &desc); err != nil {
		t.Fatalf("describe --output json: %v\n%s", err, out)
	}
	if len(raw.Group.Partitions) != 12 || len(desc.GetGroup().GetPartitions()) != 12 {
		t.Fatalf("describe shows %d partitions, want 12:\n%s", len(raw.Group.Partitions), out)
	}
	var total int64
	for i, p := range desc.GetGroup().GetPartitions() {
		for _, field := range []string{"topic", "partition", "committed_offset", "log_end_offset", "lag", "member_id"} {
			if _, ok := raw.Group.Partitions[i][field]; !ok {
				t.Errorf("describe: partition row %d has no %q field: %v", i, field, raw.Group.Partitions[i])
			}
		}
		if p.GetTopic() != "orders" || p.GetPartition() != int32(i) || p.GetCommittedOffset() != p.GetLogEndOffset() || p.GetLag() != 0 || p.GetMemberId() != "" {
			t.Errorf("describe: partition row %v, want orders-%d committed at the log end, lag 0, no owner (the group is empty)", p, i)
		}
		total += p.GetLogEndOffset()
	}
	if total != n {
		t.Errorf("describe: log end offsets add up to %d, want %d", total, n)
	}
	text := cli("", "group", "describe", "billing")
	for _, col := range []string{"CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"} {
		if !strings.Contains(text, col) {
			t.Errorf("describe (text) has no %s column:\n%s", col, text)
		}
	}

	cli("", "group", "reset", "billing", "--topic", "orders", "--to", "earliest")
	consume("consume after reset to earliest", n)

	if list := cli("", "group", "list", "--output", "json"); !strings.Contains(list, `"billing"`) {
		t.Fatalf("group list before delete does not show billing: %s", list)
	}
	cli("", "group", "delete", "billing")
	var listed gatewayv1.ListGroupsResponse
	list := cli("", "group", "list", "--output", "json")
	if err := protojson.Unmarshal([]byte(list), &listed); err != nil {
		t.Fatalf("group list --output json: %v\n%s", err, list)
	}
	for _, g := range listed.GetGroups() {
		if g.GetGroupId() == "billing" {
			t.Fatalf("group list still shows billing after delete: %s", list)
		}
	}
}
