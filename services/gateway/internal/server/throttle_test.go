package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

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

// The JSON proxy measures its caller against the caller's quota (the
// storage nodes see only the gateway): the answer carries the throttle,
// a caller that does not wait it out is held, and another principal is
// neither throttled nor held. The guard's clock is frozen, so the
// throttles are exact and a hold lasts until the test moves time.
func TestJSONProxyAppliesTheCallersQuota(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	const rate = 1000 // bytes per second: one byte per millisecond of throttle
	sg := startSecure(t, secureSetup{
		require: true, cfg: &Config{Controllers: fc.start(t)}, fc: fc,
		snapshot: cl.snapshot(1, map[string]int32{"t": 1}),
		users:    []string{"alice", "bob"},
		acls: []*commonv1.AclBinding{
			binding("alice", acl.Allow, acl.All, acl.Topic, "t"),
			binding("bob", acl.Allow, acl.All, acl.Topic, "t"),
		},
		quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: rate, FetchBytesPerSecond: rate}},
	})
	ctx := context.Background()
	alice, bob := sg.client("alice"), sg.client("bob")
	produce := func(c interface {
		ProduceJSON(context.Context, *connect.Request[gatewayv1.ProduceJSONRequest]) (*connect.Response[gatewayv1.ProduceJSONResponse], error)
	}, ctx context.Context) (*gatewayv1.ProduceJSONResponse, error) {
		r, err := c.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "t", Records: bigRecord()}))
		if err != nil {
			return nil, err
		}
		if e := r.Msg.GetResults()[0].GetError(); e != nil {
			t.Fatalf("produce failed: %v", e)
		}
		return r.Msg, nil
	}

	first, err := produce(alice, ctx)
	if err != nil {
		t.Fatal(err)
	}
	size := int32(cl.Batches("t", 0)[0].Size())
	// A full bucket of one second's rate, then the debt at 1 byte per ms.
	if want := size - rate; first.GetThrottleTimeMs() != want {
		t.Errorf("alice's throttle %dms; want %dms (batch of %d bytes over a %d B/s quota)", first.GetThrottleTimeMs(), want, size, rate)
	}
	if r, err := produce(bob, ctx); err != nil || r.GetThrottleTimeMs() != 0 {
		t.Errorf("bob (no quota): %v, throttle %d; want 0", err, r.GetThrottleTimeMs())
	}

	// Alice asks again without waiting: held (the clock does not move),
	// so her request ends with its deadline and never reaches storage,
	// while bob is served.
	before := len(cl.accepted())
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = produce(alice, short)
	cancel()
	if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded {
		t.Errorf("alice's produce while she owes %dms: %v; want deadline_exceeded", first.GetThrottleTimeMs(), err)
	}
	if r, err := produce(bob, ctx); err != nil || r.GetThrottleTimeMs() != 0 {
		t.Errorf("bob while alice owes: %v, throttle %d; want served, 0", err, r.GetThrottleTimeMs())
	}
	if got := len(cl.accepted()) - before; got != 1 {
		t.Errorf("%d produces reached storage; want bob's only", got)
	}

	// Once she has waited her throttle out she is served at once, and
	// throttled for this batch alone (the bucket is empty, not in debt).
	sg.clock.Advance(time.Duration(first.GetThrottleTimeMs()) * time.Millisecond)
	again, err := produce(alice, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.GetThrottleTimeMs() != size {
		t.Errorf("alice's throttle after waiting %dms; want %dms", again.GetThrottleTimeMs(), size)
	}

	// Fetch counts the batches read: four of the same size.
	f, err := alice.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Offset: 0}))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Msg.GetRecords()) != 4 {
		t.Fatalf("fetched %d records; want 4", len(f.Msg.GetRecords()))
	}
	if want := 4*size - rate; f.Msg.GetThrottleTimeMs() != want {
		t.Errorf("alice's fetch throttle %dms; want %dms", f.Msg.GetThrottleTimeMs(), want)
	}
	fb, err := bob.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Offset: 0}))
	if err != nil || fb.Msg.GetThrottleTimeMs() != 0 {
		t.Errorf("bob's fetch: %v, throttle %d; want 0", err, fb.Msg.GetThrottleTimeMs())
	}
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = alice.FetchJSON(short, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "t", Offset: 0}))
	cancel()
	if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded {
		t.Errorf("alice's fetch while she owes: %v; want deadline_exceeded", err)
	}
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
