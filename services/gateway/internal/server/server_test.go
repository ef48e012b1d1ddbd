package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/fakecluster"
)

func TestMetadataFromSnapshotAndDelta(t *testing.T) {
	cl := newFakeCluster(t, 2)
	cl.setLeader(tp{"orders", 0}, 1, 3)
	cl.setLeader(tp{"orders", 1}, 2, 5)
	fc := newFakeController()
	release := make(chan struct{})
	delta := &controllerv1.WatchMetadataResponse{Version: 11, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: &controllerv1.MetadataDelta{
		Partitions: []*controllerv1.PartitionChange{{Topic: "orders", TopicId: "id-orders", Partition: &commonv1.PartitionMetadata{
			Partition: 1, LeaderId: 1, LeaderEpoch: 6, Replicas: []int32{2, 1}, Isr: []int32{1},
		}}},
		Topics: []*commonv1.TopicMetadata{{Name: "audit", TopicId: "id-audit", Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 2}}}},
		Nodes:  []*controllerv1.NodeStatus{{Node: &commonv1.Node{NodeId: 2, Address: cl.NodeURL(2)}, State: controllerv1.NodeState_NODE_STATE_DEAD}},
	}}}
	fc.scripts <- sendThenHold(release, cl.snapshot(10, map[string]int32{"orders": 2}), delta)
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	waitFor(t, "the delta", func() bool { return g.cache.Load().Version == 11 })

	res, err := gc.Metadata(context.Background(), connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"orders", "nope"}}))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Msg
	if m.GetClusterId() != "cluster-1" || m.GetMetadataVersion() != 11 {
		t.Errorf("cluster id %q version %d; want cluster-1 11", m.GetClusterId(), m.GetMetadataVersion())
	}
	if len(m.GetTopics()) != 1 || m.GetTopics()[0].GetName() != "orders" {
		t.Fatalf("topics = %v; want orders only", m.GetTopics())
	}
	p1 := m.GetTopics()[0].GetPartitions()[1]
	if p1.GetLeaderId() != 1 || p1.GetLeaderEpoch() != 6 || !slices.Equal(p1.GetIsr(), []int32{1}) || !slices.Equal(p1.GetReplicas(), []int32{2, 1}) {
		t.Errorf("partition 1 after delta = %v; want leader 1 epoch 6 replicas [2 1] isr [1]", p1)
	}
	if p0 := m.GetTopics()[0].GetPartitions()[0]; p0.GetLeaderId() != 1 || p0.GetLeaderEpoch() != 3 {
		t.Errorf("partition 0 = %v; want leader 1 epoch 3 (unchanged)", p0)
	}
	if !slices.Equal(m.GetUnknownTopics(), []string{"nope"}) {
		t.Errorf("unknown topics = %v; want [nope]", m.GetUnknownTopics())
	}
	// Node 2 died in the delta: only node 1 is listed, with its address.
	if len(m.GetNodes()) != 1 || m.GetNodes()[0].GetNodeId() != 1 || m.GetNodes()[0].GetAddress() != cl.NodeURL(1) {
		t.Errorf("nodes = %v; want node 1 at %s only", m.GetNodes(), cl.NodeURL(1))
	}
	// All topics: sorted by name, the delta's new topic included.
	all, err := gc.Metadata(context.Background(), connect.NewRequest(&gatewayv1.MetadataRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tm := range all.Msg.GetTopics() {
		names = append(names, tm.GetName())
	}
	if !slices.Equal(names, []string{"audit", "orders"}) {
		t.Errorf("all topics = %v; want [audit orders]", names)
	}
}

func TestWatchReconnectTakesFreshSnapshot(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"a", 0}, 1, 1)
	fc := newFakeController()
	drop := make(chan struct{})
	fc.scripts <- sendThenHold(drop, cl.snapshot(5, map[string]int32{"a": 1}))
	// The second stream's snapshot no longer has topic a, and has b.
	cl.setLeader(tp{"b", 0}, 1, 1)
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(20, map[string]int32{"b": 1}))
	// The first URL is dead: the watcher must move on to the live one.
	g, gc, _ := testGateway(t, &Config{Controllers: deadURL(t) + "," + fc.start(t)})
	waitReady(t, g)
	if v := g.cache.Load().Version; v != 5 {
		t.Fatalf("version %d after the first snapshot; want 5", v)
	}
	close(drop) // the controller ends the stream with UNAVAILABLE
	waitFor(t, "the second snapshot", func() bool { return g.cache.Load().Version == 20 })

	res, err := gc.Metadata(context.Background(), connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"a", "b"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Msg.GetUnknownTopics(), []string{"a"}) || len(res.Msg.GetTopics()) != 1 || res.Msg.GetTopics()[0].GetName() != "b" {
		t.Errorf("after reconnect: topics %v unknown %v; want b, and a unknown (the snapshot replaced everything)", res.Msg.GetTopics(), res.Msg.GetUnknownTopics())
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.watchCalls) != 2 {
		t.Fatalf("%d watch calls; want 2", len(fc.watchCalls))
	}
	for i, c := range fc.watchCalls {
		if c.GetFromVersion() != 0 || c.GetNodeId() != -1 {
			t.Errorf("watch %d asked from_version %d node_id %d; want 0 and -1 (a fresh snapshot)", i, c.GetFromVersion(), c.GetNodeId())
		}
	}
}

func TestAdminPassThroughKeepsErrors(t *testing.T) {
	fc := newFakeController()
	_, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	ctx := context.Background()

	res, err := gc.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
		Name: "orders", Partitions: 6, ReplicationFactor: 3, Configs: map[string]string{"retention.ms": "1000"}, ValidateOnly: true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetTopic().GetTopicId() != "id-orders" {
		t.Errorf("topic = %v", res.Msg.GetTopic())
	}
	fc.mu.Lock()
	lc := fc.lastCreate
	fc.mu.Unlock()
	if lc.GetPartitions() != 6 || lc.GetReplicationFactor() != 3 || lc.GetConfigs()["retention.ms"] != "1000" || !lc.GetValidateOnly() {
		t.Errorf("controller got %v; want every field passed through", lc)
	}

	upErr := apierr.Error(&commonv1.ErrorDetail{
		Code: commonv1.Code_CODE_ALREADY_EXISTS, Reason: commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, Message: `topic "orders" already exists`,
	})
	fc.mu.Lock()
	fc.createErr = upErr
	fc.mu.Unlock()
	_, err = gc.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{Name: "orders"}))
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v; want a connect error", err)
	}
	if ce.Code() != connect.CodeAlreadyExists || ce.Message() != `topic "orders" already exists` {
		t.Errorf("code %v message %q; want already_exists and the controller's message", ce.Code(), ce.Message())
	}
	if ed := apierr.DetailOf(err); ed.GetReason() != commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS {
		t.Errorf("detail = %v; want REASON_TOPIC_ALREADY_EXISTS kept", ed)
	}

	// A controller with no active member answers UNAVAILABLE: passed on as is.
	_, err = gc.DescribeCluster(ctx, connect.NewRequest(&gatewayv1.DescribeClusterRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.As(err, &ce) || ce.Message() != "no active controller" {
		t.Errorf("DescribeCluster err = %v; want unavailable: no active controller", err)
	}
}

func TestDescribeTopicsIncludesOffsets(t *testing.T) {
	cl := newFakeCluster(t, 2)
	cl.setLeader(tp{"t", 0}, 1, 1)
	cl.setLeader(tp{"t", 1}, 2, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 2}))
	fc.describe = &controllerv1.DescribeTopicsResponse{Topics: []*controllerv1.TopicDescription{{Name: "t", Partitions: []*commonv1.PartitionMetadata{
		{Partition: 0, LeaderId: 1, LeaderEpoch: 1, Replicas: []int32{1, 2}, Isr: []int32{1, 2}},
		{Partition: 1, LeaderId: 2, LeaderEpoch: 1, Replicas: []int32{2, 1}, Isr: []int32{2, 1}},
	}}}}
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	ctx := context.Background()
	if _, err := gc.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: []*gatewayv1.JSONRecord{
		{Partition: ptr(int32(1)), ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}},
		{Partition: ptr(int32(1)), ValueData: &gatewayv1.JSONRecord_Value{Value: "y"}},
	}})); err != nil {
		t.Fatal(err)
	}
	res, err := gc.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{"t"}, IncludeOffsets: true}))
	if err != nil {
		t.Fatal(err)
	}
	po := res.Msg.GetPartitionOffsets()
	if len(po) != 2 || po[0].GetHighWatermark() != 0 || po[1].GetHighWatermark() != 2 || po[1].GetLogStartOffset() != 0 || po[0].GetError() != nil || po[1].GetError() != nil {
		t.Errorf("partition offsets = %v; want t-0 [0,0) and t-1 [0,2)", po)
	}
	if len(res.Msg.GetTopics()) != 1 || len(res.Msg.GetTopics()[0].GetPartitions()) != 2 {
		t.Errorf("topics = %v; want the controller's description", res.Msg.GetTopics())
	}
}

func TestProduceJSONRoutesByKeyToLeader(t *testing.T) {
	cl := newFakeCluster(t, 3)
	const n = 6
	for p := range int32(n) {
		cl.setLeader(tp{"orders", p}, p%3+1, 7)
	}
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"orders": n}))
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)

	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "alice"}
	req := &gatewayv1.ProduceJSONRequest{Topic: "orders", Acks: commonv1.Acks_ACKS_LEADER}
	for i, k := range keys {
		req.Records = append(req.Records, &gatewayv1.JSONRecord{
			KeyData: &gatewayv1.JSONRecord_Key{Key: k}, ValueData: &gatewayv1.JSONRecord_Value{Value: fmt.Sprint(i)},
		})
	}
	res, err := gc.ProduceJSON(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	perPartition := map[int32]int64{}
	for i, r := range res.Msg.GetResults() {
		want := client.PartitionForKey([]byte(keys[i]), n)
		if r.GetError() != nil || r.GetPartition() != want {
			t.Errorf("record %d (key %q): partition %d error %v; want partition %d (Kafka's)", i, keys[i], r.GetPartition(), r.GetError(), want)
		}
		if r.GetOffset() != perPartition[want] {
			t.Errorf("record %d: offset %d; want %d (order kept within the partition)", i, r.GetOffset(), perPartition[want])
		}
		perPartition[want]++
	}
	accepted := cl.accepted()
	for _, a := range accepted {
		k := tp{a.Topic, a.Partition}
		if leader, _ := cl.Leader(a.Topic, a.Partition); a.Node != leader || a.LeaderEpoch != 7 || a.Acks != commonv1.Acks_ACKS_LEADER {
			t.Errorf("produce to %v landed on node %d epoch %d acks %v; want leader %d epoch 7 acks leader", k, a.Node, a.LeaderEpoch, a.Acks, leader)
		}
		if int64(a.Records) != perPartition[k.partition] {
			t.Errorf("%v got %d records in one batch; want %d", k, a.Records, perPartition[k.partition])
		}
	}
	if len(accepted) != len(perPartition) {
		t.Errorf("%d produce calls; want one per partition (%d)", len(accepted), len(perPartition))
	}
}

func TestProduceJSONFollowsNewLeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noHint bool
	}{{"leader hint", false}, {"metadata delta", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newFakeCluster(t, 2)
			cl.setLeader(tp{"t", 0}, 1, 1)
			fc := newFakeController()
			snap := cl.snapshot(1, map[string]int32{"t": 1})
			// Leadership moves to node 2 before the gateway hears of it.
			cl.setLeader(tp{"t", 0}, 2, 2)
			if tc.noHint {
				// Node 1 answers NOT_LEADER without naming the new leader.
				cl.AddFault(&fakecluster.Fault{Method: "Produce", Node: 1, Partition: -1,
					Code: connect.CodeFailedPrecondition, Reason: commonv1.Reason_REASON_NOT_LEADER})
			}
			release := make(chan struct{})
			fc.scripts <- func(ctx context.Context, send func(*controllerv1.WatchMetadataResponse) error) error {
				if err := send(snap); err != nil {
					return err
				}
				// Without a hint the gateway must wait for the delta.
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := send(&controllerv1.WatchMetadataResponse{Version: 2, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: &controllerv1.MetadataDelta{
					Partitions: []*controllerv1.PartitionChange{{Topic: "t", Partition: &commonv1.PartitionMetadata{Partition: 0, LeaderId: 2, LeaderEpoch: 2}}},
				}}}); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			}
			g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
			waitReady(t, g)
			go func() {
				waitFor(t, "a refusal", func() bool { return len(cl.refused()) > 0 })
				close(release)
			}()
			res, err := gc.ProduceJSON(context.Background(), connect.NewRequest(&gatewayv1.ProduceJSONRequest{
				Topic: "t", Records: []*gatewayv1.JSONRecord{{KeyData: &gatewayv1.JSONRecord_Key{Key: "k"}, ValueData: &gatewayv1.JSONRecord_Value{Value: "v"}}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Msg.GetResults()[0]
			if r.GetError() != nil || r.GetOffset() != 0 {
				t.Fatalf("result %v; want offset 0 without error", r)
			}
			if accepted := cl.accepted(); len(accepted) != 1 || accepted[0].Node != 2 || accepted[0].LeaderEpoch != 2 {
				t.Errorf("accepted = %+v; want one produce on node 2 with epoch 2", accepted)
			}
			if refused := cl.refused(); len(refused) == 0 || refused[0] != 1 {
				t.Errorf("refused = %v; want node 1 to have said NOT_LEADER first", refused)
			}
		})
	}
}

// TestProduceJSONRetriesNewTopic checks a produce right after CreateTopic:
// the gateway's metadata has the topic before its leader has created the
// replica, and the leader's UNKNOWN_TOPIC_OR_PARTITION is retried (as
// Kafka clients retry it) rather than returned.
func TestProduceJSONRetriesNewTopic(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 0)
	// The leader answers UNKNOWN_TOPIC_OR_PARTITION three times, as one
	// that has not created the new topic's replica yet does.
	cl.AddFault(&fakecluster.Fault{Method: "Produce", Partition: -1, Count: 3,
		Code: connect.CodeNotFound, Reason: commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION})
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	res, err := gc.ProduceJSON(context.Background(), connect.NewRequest(&gatewayv1.ProduceJSONRequest{
		Topic: "t", Records: []*gatewayv1.JSONRecord{{ValueData: &gatewayv1.JSONRecord_Value{Value: "v"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.GetResults()[0]; r.GetError() != nil || r.GetOffset() != 0 {
		t.Fatalf("result %v; want offset 0 after the leader created the partition", r)
	}
	// A partition the metadata does not have stays final.
	res, err = gc.ProduceJSON(context.Background(), connect.NewRequest(&gatewayv1.ProduceJSONRequest{
		Topic: "t", Records: []*gatewayv1.JSONRecord{{Partition: ptr(int32(5)), ValueData: &gatewayv1.JSONRecord_Value{Value: "v"}}},
	}))
	if err == nil && res.Msg.GetResults()[0].GetError() == nil {
		t.Fatal("produce to partition 5 of a 1-partition topic succeeded")
	}
}

func TestProduceJSONErrors(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)
	ctx := context.Background()
	rec := []*gatewayv1.JSONRecord{{ValueData: &gatewayv1.JSONRecord_Value{Value: "v"}}}
	for _, tc := range []struct {
		req  *gatewayv1.ProduceJSONRequest
		code connect.Code
		msg  string
	}{
		{&gatewayv1.ProduceJSONRequest{Topic: "x", Records: rec}, connect.CodeNotFound, `topic "x" does not exist`},
		{&gatewayv1.ProduceJSONRequest{Topic: "t"}, connect.CodeInvalidArgument, "no records to produce"},
		{&gatewayv1.ProduceJSONRequest{Topic: "t", Records: []*gatewayv1.JSONRecord{{Partition: ptr(int32(1))}}}, connect.CodeInvalidArgument,
			`record 0: partition 1 is out of range: topic "t" has 1 partitions`},
	} {
		_, err := gc.ProduceJSON(ctx, connect.NewRequest(tc.req))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != tc.code || ce.Message() != tc.msg {
			t.Errorf("ProduceJSON(%v) err = %v; want %v: %s", tc.req, err, tc.code, tc.msg)
		}
	}
	_, err := gc.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Partition: 3}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("FetchJSON of a missing partition: %v; want not_found", err)
	}
	_, err = gc.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Offset: 5}))
	if connect.CodeOf(err) != connect.CodeOutOfRange || apierr.DetailOf(err).GetOffsetRange() == nil {
		t.Errorf("FetchJSON past the end: %v; want out_of_range with the offset range hint", err)
	}
}

// TestProduceAndFetchJSONOverHTTP drives the proxy the way curl does:
// Connect's JSON protocol over HTTP/1.1.
func TestProduceAndFetchJSONOverHTTP(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 4)
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	g, _, url := testGateway(t, &Config{Controllers: fc.start(t)})
	waitReady(t, g)

	post := func(method, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(url+"/strata.gateway.v1.GatewayService/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", method, resp.Status, b)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// valueBytes "/w==" is the single byte 0xff: not UTF-8.
	prod := post("ProduceJSON", `{"topic":"t","records":[
		{"key":"k1","value":"hello","headers":[{"key":"h","value":"v"}],"timestampMs":"1700000000000"},
		{"value":"wörld"},
		{"key":"k3","valueBytes":"/w=="}]}`)
	if rs := prod["results"].([]any); len(rs) != 3 {
		t.Fatalf("produce results = %v", prod)
	}
	got := post("FetchJSON", `{"topic":"t","partition":0,"offset":-2}`)
	recs, _ := got["records"].([]any)
	if len(recs) != 3 {
		t.Fatalf("fetched %v; want 3 records", got)
	}
	r0 := recs[0].(map[string]any)
	if r0["key"] != "k1" || r0["value"] != "hello" || r0["timestampMs"] != "1700000000000" || r0["leaderEpoch"] != float64(4) {
		t.Errorf("record 0 = %v; want key k1 value hello as text, the given timestamp, epoch 4", r0)
	}
	if h := r0["headers"].([]any)[0].(map[string]any); h["key"] != "h" || h["value"] != "v" {
		t.Errorf("record 0 header = %v", h)
	}
	r1 := recs[1].(map[string]any)
	if _, hasKey := r1["key"]; hasKey || r1["value"] != "wörld" || r1["offset"] != "1" {
		t.Errorf("record 1 = %v; want a null key, value wörld, offset 1", r1)
	}
	if r2 := recs[2].(map[string]any); r2["valueBytes"] != "/w==" {
		t.Errorf("record 2 = %v; want valueBytes /w== (not UTF-8)", r2)
	}
	if got["nextOffset"] != "3" || got["highWatermark"] != "3" {
		t.Errorf("next %v hw %v; want 3 and 3", got["nextOffset"], got["highWatermark"])
	}
	// From offset 1 with max 1 record.
	got = post("FetchJSON", `{"topic":"t","partition":0,"offset":1,"maxRecords":1}`)
	if recs := got["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["offset"] != "1" || got["nextOffset"] != "2" {
		t.Errorf("fetch from 1 max 1 = %v; want record 1 and next 2", got)
	}
}

func TestInitProducerIdAcrossBlocks(t *testing.T) {
	fc := newFakeController()
	_, gc, _ := testGateway(t, &Config{Controllers: fc.start(t), ProducerIDBlockSize: 3})
	seen := map[int64]bool{}
	for range 10 {
		res, err := gc.InitProducerId(context.Background(), connect.NewRequest(&gatewayv1.InitProducerIdRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if id := res.Msg.GetProducerId(); seen[id] || res.Msg.GetProducerEpoch() != 0 {
			t.Fatalf("id %d epoch %d: repeated or not epoch 0 (seen %v)", id, res.Msg.GetProducerEpoch(), seen)
		}
		seen[res.Msg.GetProducerId()] = true
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.allocCalls != 4 {
		t.Errorf("%d AllocateProducerIds calls for 10 ids in blocks of 3; want 4", fc.allocCalls)
	}
}

func TestGroupCallsWithoutCoordinator(t *testing.T) {
	fc := newFakeController()
	_, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	ctx := context.Background()
	calls := map[string]func() error{
		"FindCoordinator": func() error {
			_, err := gc.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "g"}))
			return err
		},
		"ListGroups": func() error {
			_, err := gc.ListGroups(ctx, connect.NewRequest(&gatewayv1.ListGroupsRequest{}))
			return err
		},
		"DescribeGroup": func() error {
			_, err := gc.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: "g"}))
			return err
		},
		"ResetOffsets": func() error {
			_, err := gc.ResetOffsets(ctx, connect.NewRequest(&gatewayv1.ResetOffsetsRequest{GroupId: "g"}))
			return err
		},
		"DeleteGroup": func() error {
			_, err := gc.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: "g"}))
			return err
		},
	}
	for name, call := range calls {
		err := call()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Message() != "no coordinator is configured" {
			t.Errorf("%s: %v; want unavailable: no coordinator is configured", name, err)
		}
	}
}

func TestMetadataUnavailableBeforeSnapshot(t *testing.T) {
	fc := newFakeController() // never sends a snapshot
	g, gc, _ := testGateway(t, &Config{Controllers: fc.start(t)})
	waitFor(t, "the watch", func() bool { return fc.watchCount() > 0 })
	if g.Ready(context.Background()) == nil {
		t.Error("Ready before any snapshot")
	}
	_, err := gc.Metadata(context.Background(), connect.NewRequest(&gatewayv1.MetadataRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("Metadata before the snapshot: %v; want unavailable", err)
	}
}

func ptr[T any](v T) *T { return &v }
