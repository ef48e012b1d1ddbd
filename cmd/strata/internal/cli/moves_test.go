package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"", 0}, {"0", 0}, {"1048576", 1048576}, {"50MB", 50_000_000}, {"50mb/s", 50_000_000}, {"1.5M", 1_500_000},
		{"512KiB", 512 << 10}, {"2GiB", 2 << 30}, {"10k", 10_000},
	} {
		got, err := parseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"fast", "10XB", "-5", "1e999GB"} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("parseRate(%q) accepted", bad)
		}
	}
}

func TestMoveCommandsHelpAndUsage(t *testing.T) {
	for _, path := range [][]string{
		{"cluster", "nodes"}, {"cluster", "rebalance"}, {"node", "drain"}, {"node", "undrain"},
		{"topic", "move"}, {"topic", "add-partitions"},
	} {
		r := run(t, "http://127.0.0.1:1", "", append(path, "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: strata "+strings.Join(path, " ")) || !strings.Contains(r.stdout, "Example:") {
			t.Errorf("%v --help: code %d, stdout %q", path, r.code, r.stdout)
		}
	}
	if r := run(t, "http://127.0.0.1:1", "", "topic", "add-partitions", "--help"); !strings.Contains(r.stdout, "Keys move") {
		t.Errorf("add-partitions help does not say that keys move: %q", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "move", "orders", "--replicas", "1,2"}, "strata: --partition is required (see 'strata topic move --help')"},
		{[]string{"topic", "move", "orders", "-p", "0"}, "strata: --replicas is required (see 'strata topic move --help')"},
		{[]string{"topic", "move", "orders", "-p", "0", "--replicas", "1,x"}, `strata: --replicas "1,x": want node ids separated by commas, like 4,5,6`},
		{[]string{"topic", "move", "orders", "-p", "0", "--replicas", "1", "--cancel"}, "strata: give --replicas or --cancel, not both"},
		{[]string{"cluster", "rebalance", "--throttle", "fast"}, `strata: --throttle "fast": want bytes per second, like 10MB, 512KiB or 1048576`},
		{[]string{"node", "drain", "four"}, `strata: node id "four": want a whole number, 0 or more`},
		{[]string{"topic", "add-partitions", "orders"}, "strata: -p TOTAL is required: the partition count the topic should have"},
	} {
		r := run(t, "http://127.0.0.1:1", "", tc.args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, r.code)
		}
		wantOneLine(t, r, tc.want)
	}
}

// moveGateway answers the move commands' calls with a fixed plan and a
// move that runs for a few polls, and one storage node reports sizes.
type moveGateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	storeURL string

	mu    sync.Mutex
	polls int
	got   []string
}

func (g *moveGateway) note(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, s)
}

var movingPartition = &commonv1.PartitionMetadata{Partition: 3, LeaderId: 1, Replicas: []int32{4, 2, 3, 1},
	Isr: []int32{1, 2, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}}

func (g *moveGateway) Rebalance(_ context.Context, req *connect.Request[gatewayv1.RebalanceRequest]) (*connect.Response[gatewayv1.RebalanceResponse], error) {
	b, _ := json.Marshal(map[string]any{"dry_run": req.Msg.GetDryRun(), "throttle": req.Msg.GetThrottleBytesPerSecond()})
	g.note("Rebalance " + string(b))
	return connect.NewResponse(&gatewayv1.RebalanceResponse{
		Moves:   []*controllerv1.PlannedMove{{Topic: "orders", Partition: 3, FromReplicas: []int32{1, 2, 3}, ToReplicas: []int32{4, 2, 3}, SizeBytes: 2000}},
		Before:  []*controllerv1.NodeLoad{{NodeId: 1, Replicas: 3, Leaders: 1, Eligible: true}, {NodeId: 4, Eligible: true}},
		After:   []*controllerv1.NodeLoad{{NodeId: 1, Replicas: 2, Leaders: 0, Eligible: true}, {NodeId: 4, Replicas: 1, Leaders: 1, Eligible: true}},
		Started: !req.Msg.GetDryRun(),
	}), nil
}

// ListPartitionReassignments reports the move running for three polls.
func (g *moveGateway) ListPartitionReassignments(context.Context, *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.polls++
	out := &gatewayv1.ListPartitionReassignmentsResponse{ThrottleBytesPerSecond: 1000}
	if g.polls <= 3 {
		out.Reassignments = []*controllerv1.PartitionChange{{Topic: "orders", Partition: movingPartition}}
	}
	return connect.NewResponse(out), nil
}

func (g *moveGateway) DescribeCluster(context.Context, *connect.Request[gatewayv1.DescribeClusterRequest]) (*connect.Response[gatewayv1.DescribeClusterResponse], error) {
	var nodes []*controllerv1.NodeStatus
	for _, id := range []int32{1, 4} {
		nodes = append(nodes, &controllerv1.NodeStatus{Node: &commonv1.Node{NodeId: id, Address: g.storeURL}, State: controllerv1.NodeState_NODE_STATE_ALIVE})
	}
	return connect.NewResponse(&gatewayv1.DescribeClusterResponse{Nodes: nodes}), nil
}

// sizeStore answers DescribeLog for nodes 1 (the leader) and 4 (the
// adding replica) alike: 2000 bytes of orders-3.
type sizeStore struct {
	storagev1connect.UnimplementedStorageServiceHandler
}

func (s *sizeStore) DescribeLog(context.Context, *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	return connect.NewResponse(&storagev1.DescribeLogResponse{Partitions: []*storagev1.DescribeLogPartitionResult{
		{Topic: "orders", Partition: 3, LocalSizeBytes: 2000},
	}}), nil
}

func TestRebalanceWaitPrintsProgressUntilDone(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(storagev1connect.NewStorageServiceHandler(&sizeStore{}))
	store := startH2C(mux)
	t.Cleanup(store.Close)
	g := &moveGateway{storeURL: store.URL}
	gmux := http.NewServeMux()
	gmux.Handle(gatewayv1connect.NewGatewayServiceHandler(g))
	gw := startH2C(gmux)
	t.Cleanup(gw.Close)

	r := run(t, gw.URL, "", "cluster", "rebalance", "--wait", "--throttle", "1kB", "--interval", "10ms")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"plan: 1 partition(s) move, 1 replica(s) copied (2.0 kB)", "orders  3", "1,2,3", "4,2,3",
		"started 1 move(s)", "moving 1 partition(s): 2.0 kB of 2.0 kB copied (100%)", "(throttle 1.0 kB/s per node)", "done after"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "moving 1 partition(s)"); n != 3 {
		t.Errorf("%d progress lines, want one per poll while the move ran (3):\n%s", n, r.stdout)
	}
	g.mu.Lock()
	got := g.got
	g.mu.Unlock()
	if len(got) != 1 || got[0] != `Rebalance {"dry_run":false,"throttle":1000}` {
		t.Errorf("gateway got %v", got)
	}

	r = run(t, gw.URL, "", "cluster", "rebalance", "--dry-run", "--output", "json")
	var plan struct {
		Moves []struct {
			Topic     string  `json:"topic"`
			Partition int32   `json:"partition"`
			From      []int32 `json:"from"`
			To        []int32 `json:"to"`
		} `json:"moves"`
		After   []map[string]any `json:"after"`
		Started bool             `json:"started"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &plan) != nil || len(plan.Moves) != 1 || plan.Started || len(plan.After) != 2 {
		t.Fatalf("dry run JSON: code %d, %q", r.code, r.stdout)
	}
}

// startH2C serves h over h2c (as Strata services do) and HTTP/1.1.
func startH2C(h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &protos
	s.Start()
	return s
}
