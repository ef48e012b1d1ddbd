package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// bigRecord is one record of a little over 3000 bytes with a fixed
// timestamp, so every batch of it has the same size.
func bigRecord() []*gatewayv1.JSONRecord {
	return []*gatewayv1.JSONRecord{{TimestampMs: 1, ValueData: &gatewayv1.JSONRecord_Value{Value: strings.Repeat("v", 3000)}}}
}

// throttlingStorage is a storage node over its own fetch quota for the
// gateway: every answer carries a throttle time.
type throttlingStorage struct {
	storagev1connect.UnimplementedStorageServiceHandler
	batch []byte
}

func (s *throttlingStorage) Produce(context.Context, *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	return connect.NewResponse(&storagev1.ProduceResponse{BaseOffset: 5, LogAppendTimeMs: -1, ThrottleTimeMs: 250}), nil
}

func (s *throttlingStorage) Fetch(_ context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	return connect.NewResponse(&storagev1.FetchResponse{ThrottleTimeMs: 120, Partitions: []*storagev1.FetchPartitionResult{{
		Topic: "t", Partition: 0, HighWatermark: 1, Records: s.batch,
	}}}), nil
}

// The storage node's throttle of the gateway reaches the caller, with or
// without --require-auth.
func TestJSONProxyPassesTheStorageThrottleOn(t *testing.T) {
	batch, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte("x"), Timestamp: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(storagev1connect.NewStorageServiceHandler(&throttlingStorage{batch: batch}))
	node := serveOn(t, mux)
	snap := &controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{
		ClusterId: "cluster-1",
		Nodes:     []*controllerv1.NodeStatus{{Node: &commonv1.Node{NodeId: 1, Address: node}, State: controllerv1.NodeState_NODE_STATE_ALIVE}},
		Topics: []*commonv1.TopicMetadata{{Name: "t", TopicId: "id-t", Partitions: []*commonv1.PartitionMetadata{
			{Partition: 0, LeaderId: 1, LeaderEpoch: 1, Replicas: []int32{1}, Isr: []int32{1}},
		}}},
	}}}
	ctx := context.Background()
	for _, require := range []bool{false, true} {
		fc := newFakeController()
		sg := startSecure(t, secureSetup{
			require: require, cfg: &Config{Controllers: fc.start(t)}, fc: fc, snapshot: snap, users: []string{"alice"},
			acls: []*commonv1.AclBinding{binding("alice", acl.Allow, acl.All, acl.Topic, "t")},
		})
		c := sg.client("alice")
		p, err := c.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: []*gatewayv1.JSONRecord{
			{ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		if p.Msg.GetThrottleTimeMs() != 250 || p.Msg.GetResults()[0].GetOffset() != 5 {
			t.Errorf("require-auth %v: produce answer %v; want offset 5, throttle 250ms from the storage node", require, p.Msg)
		}
		f, err := c.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Offset: 0}))
		if err != nil {
			t.Fatal(err)
		}
		if f.Msg.GetThrottleTimeMs() != 120 || len(f.Msg.GetRecords()) != 1 {
			t.Errorf("require-auth %v: fetch answer %v; want one record, throttle 120ms from the storage node", require, f.Msg)
		}
	}
}
