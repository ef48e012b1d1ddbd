package server

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/serve"
)

// WatchCluster's first message describes the cluster at once (nodes with
// replicas, leaders and disk bytes, topics with sizes and end offsets);
// a metadata change that shrinks an ISR arrives as a new message without
// the client asking.
func TestWatchClusterOverviewAndUpdates(t *testing.T) {
	cl := newFakeCluster(t, 2)
	cl.setLeader(tp{"t", 0}, 1, 1)
	cl.setLeader(tp{"t", 1}, 2, 1)
	first := cl.snapshot(1, map[string]int32{"t": 2})
	for _, p := range first.GetSnapshot().GetTopics()[0].GetPartitions() {
		p.Replicas, p.Isr = []int32{1, 2}, []int32{1, 2}
	}
	shrunk := cl.snapshot(2, map[string]int32{"t": 2})
	for _, p := range shrunk.GetSnapshot().GetTopics()[0].GetPartitions() {
		p.Replicas, p.Isr = []int32{1, 2}, []int32{p.GetLeaderId()}
	}
	next := make(chan struct{})
	fc := newFakeController()
	fc.scripts <- func(ctx context.Context, send func(*controllerv1.WatchMetadataResponse) error) error {
		if err := send(first); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-next:
		}
		if err := send(shrunk); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := gc.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: []*gatewayv1.JSONRecord{
		{Partition: ptr(int32(1)), ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}},
		{Partition: ptr(int32(1)), ValueData: &gatewayv1.JSONRecord_Value{Value: "y"}},
	}})); err != nil {
		t.Fatal(err)
	}
	stream, err := gc.WatchCluster(ctx, connect.NewRequest(&gatewayv1.WatchClusterRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	o := stream.Msg()
	if o.GetClusterId() != "cluster-1" || o.GetMetadataVersion() != 1 || o.GetUnderReplicatedPartitions() != 0 || o.GetOfflinePartitions() != 0 {
		t.Errorf("first overview = %v; want cluster-1 at version 1, healthy", o)
	}
	if len(o.GetTopics()) != 1 || o.GetTopics()[0].GetName() != "t" || o.GetTopics()[0].GetPartitions() != 2 ||
		o.GetTopics()[0].GetReplicationFactor() != 2 || o.GetTopics()[0].GetEndOffsets() != 2 || o.GetTopics()[0].GetLocalBytes() <= 0 {
		t.Errorf("topics = %v; want t with 2 partitions, RF 2, 2 messages and some bytes", o.GetTopics())
	}
	if len(o.GetNodes()) != 2 {
		t.Fatalf("nodes = %v; want 2", o.GetNodes())
	}
	for _, n := range o.GetNodes() {
		if n.GetReplicas() != 2 || n.GetLeaders() != 1 || n.GetDiskBytes() < 0 || n.GetState() != controllerv1.NodeState_NODE_STATE_ALIVE {
			t.Errorf("node %v; want alive with 2 replicas, 1 leader and its disk bytes", n)
		}
	}
	if o.GetNodes()[1].GetDiskBytes() <= 0 {
		t.Errorf("node 2 disk bytes %d; want the bytes of t-1", o.GetNodes()[1].GetDiskBytes())
	}
	close(next)
	for stream.Receive() {
		if stream.Msg().GetUnderReplicatedPartitions() == 2 {
			if v := stream.Msg().GetMetadataVersion(); v != 2 {
				t.Errorf("version %d; want 2", v)
			}
			return
		}
	}
	t.Fatalf("the stream ended before the shrunk ISR arrived: %v", stream.Err())
}

// DescribeTopics with include_log_extents reports each partition's local
// and tiered extent from its leader.
func TestDescribeTopicsLogExtents(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	fc.describe = &controllerv1.DescribeTopicsResponse{Topics: []*controllerv1.TopicDescription{{Name: "t", Partitions: []*commonv1.PartitionMetadata{
		{Partition: 0, LeaderId: 1, LeaderEpoch: 1, Replicas: []int32{1}, Isr: []int32{1}},
	}}}}
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	ctx := context.Background()
	var recs []*gatewayv1.JSONRecord
	for range 5 {
		recs = append(recs, &gatewayv1.JSONRecord{Partition: ptr(int32(0)), ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}})
	}
	if _, err := gc.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: recs})); err != nil {
		t.Fatal(err)
	}
	cl.SetTiered("t", 0, 3, 3, 1000)
	for _, offsets := range []bool{false, true} {
		res, err := gc.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{"t"}, IncludeOffsets: offsets, IncludeLogExtents: true}))
		if err != nil {
			t.Fatal(err)
		}
		po := res.Msg.GetPartitionOffsets()
		if len(po) != 1 || po[0].GetError() != nil || po[0].GetHighWatermark() != 5 || po[0].GetLogEndOffset() != 5 ||
			po[0].GetLocalLogStartOffset() != 3 || po[0].GetTieredEndOffset() != 3 || po[0].GetTieredSizeBytes() != 1000 || po[0].GetLocalSizeBytes() <= 0 {
			t.Errorf("include_offsets %v: %v; want HW 5, local [3,5), tiered to 3 in 1000 bytes", offsets, po)
		}
	}
}

// lagCoordinator answers DescribeGroup with partition lags per group.
type lagCoordinator struct {
	groupCoordinator
	lags map[string][]int64
}

func (f *lagCoordinator) DescribeGroup(_ context.Context, req *connect.Request[coordinatorv1.DescribeGroupRequest]) (*connect.Response[coordinatorv1.DescribeGroupResponse], error) {
	d := &coordinatorv1.GroupDescription{GroupId: req.Msg.GetGroupId()}
	for i, l := range f.lags[req.Msg.GetGroupId()] {
		d.Partitions = append(d.Partitions, &coordinatorv1.PartitionLag{Topic: "t", Partition: int32(i), Lag: l})
	}
	return connect.NewResponse(&coordinatorv1.DescribeGroupResponse{Group: d}), nil
}

// ListGroups with include_lag sums each group's known partition lags and
// counts the unknown ones.
func TestListGroupsIncludeLag(t *testing.T) {
	cl := newFakeCluster(t, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, nil))
	coord := &lagCoordinator{
		groupCoordinator: groupCoordinator{groups: []*coordinatorv1.GroupListing{{GroupId: "a"}, {GroupId: "b"}}},
		lags:             map[string][]int64{"a": {3, 4}, "b": {0, -1, 2}},
	}
	coord.self = serveCoordinator(t, coord)
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t), Coordinators: coord.self})
	waitReady(t, g)
	res, err := gc.ListGroups(context.Background(), connect.NewRequest(&gatewayv1.ListGroupsRequest{IncludeLag: true}))
	if err != nil {
		t.Fatal(err)
	}
	l := res.Msg.GetLags()
	if len(l) != 2 || l[0].GetGroupId() != "a" || l[0].GetTotalLag() != 7 || l[0].GetPartitions() != 2 ||
		l[1].GetGroupId() != "b" || l[1].GetTotalLag() != 2 || l[1].GetUnknownPartitions() != 1 || l[1].GetPartitions() != 3 {
		t.Errorf("lags = %v; want a 7 over 2 partitions, b 2 with 1 of 3 unknown", l)
	}
	res, err = gc.ListGroups(context.Background(), connect.NewRequest(&gatewayv1.ListGroupsRequest{}))
	if err != nil || len(res.Msg.GetLags()) != 0 {
		t.Errorf("without include_lag: %v %v; want no lags", res, err)
	}
}

// OffsetForTimestamp answers from the leader: the first offset at or after
// the time, the high watermark past the last record.
func TestOffsetForTimestamp(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	ctx := context.Background()
	var recs []*gatewayv1.JSONRecord
	for i := range 3 {
		recs = append(recs, &gatewayv1.JSONRecord{Partition: ptr(int32(0)), TimestampMs: int64(1000 * (i + 1)), ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}})
	}
	if _, err := gc.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: recs})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want int64 }{{0, 0}, {1500, 1}, {3000, 2}, {9000, 3}} {
		res, err := gc.OffsetForTimestamp(ctx, connect.NewRequest(&gatewayv1.OffsetForTimestampRequest{Topic: "t", Partition: 0, TimestampMs: tc.at}))
		if err != nil || res.Msg.GetOffset() != tc.want {
			t.Errorf("at %d: %v %v; want offset %d", tc.at, res, err, tc.want)
		}
	}
	if _, err := gc.OffsetForTimestamp(ctx, connect.NewRequest(&gatewayv1.OffsetForTimestampRequest{Topic: "nope", TimestampMs: 1})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown topic: %v; want not found", err)
	}
}

// WatchCluster shows a caller only the topics it may describe, and the
// nodes and controllers only with describe on the cluster.
func TestWatchClusterShowsOnlyWhatTheCallerMayDescribe(t *testing.T) {
	sg, _, _, _ := securedCluster(t,
		binding("alice", acl.Allow, acl.Describe, acl.Topic, "orders"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		user   string
		topics []string
		nodes  int
	}{
		{"alice", []string{"orders"}, 0},
		{"bob", nil, 0},
		{"admin", []string{"audit", "orders", "orders-eu"}, 1},
	} {
		stream, err := sg.streamClient(tc.user).WatchCluster(ctx, connect.NewRequest(&gatewayv1.WatchClusterRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() {
			t.Fatalf("%s: no message: %v", tc.user, stream.Err())
		}
		o := stream.Msg()
		stream.Close()
		if got := names(o.GetTopics(), (*gatewayv1.TopicOverview).GetName); !slices.Equal(got, tc.topics) {
			t.Errorf("%s: topics %v; want %v", tc.user, got, tc.topics)
		}
		if len(o.GetNodes()) != tc.nodes || (tc.nodes == 0) != (o.GetControllers() == nil) {
			t.Errorf("%s: nodes %v, controllers %v; want %d nodes and controllers only with them", tc.user, o.GetNodes(), o.GetControllers(), tc.nodes)
		}
	}
}

func serveCoordinator(t *testing.T, h coordinatorv1connect.CoordinatorServiceHandler) string {
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(h))
	return serveOn(t, mux)
}

// streamClient is client for streams too: the token goes on every HTTP
// request rather than through a unary interceptor.
func (sg *secureGateway) streamClient(user string) gatewayv1connect.GatewayServiceClient {
	tok, ok := sg.tokens[user]
	if !ok {
		sg.t.Fatalf("no user %q", user)
	}
	base := serve.NewHTTPClient()
	hc := &http.Client{Transport: bearerTransport{token: tok.Reveal(), base: base.Transport}}
	return gatewayv1connect.NewGatewayServiceClient(hc, sg.url)
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// A draining gateway ends its WatchCluster streams, so shutdown does not
// wait for them.
func TestWatchClusterEndsWhenDraining(t *testing.T) {
	cl := newFakeCluster(t, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, nil))
	cfg := &Config{Controllers: fc.start(t), ProducerIDBlockSize: DefaultProducerIDBlockSize}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	draining := make(chan struct{})
	g, err := Start(context.Background(), cfg, Options{HTTPClient: serve.NewHTTPClient(), Draining: draining})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	mux := http.NewServeMux()
	mux.Handle(g.Handler())
	gc := gatewayv1connect.NewGatewayServiceClient(serve.NewHTTPClient(), serveOn(t, mux))
	waitReady(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := gc.WatchCluster(ctx, connect.NewRequest(&gatewayv1.WatchClusterRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	close(draining)
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil || ctx.Err() != nil {
		t.Errorf("stream ended with %v (context %v); want a clean end on drain", err, ctx.Err())
	}
}
