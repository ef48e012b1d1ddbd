package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
)

// fakeStorage answers Fetch with one empty result per partition asked,
// and records what it was asked.
type fakeStorage struct {
	storagev1connect.StorageServiceClient
	asked []*storagev1.FetchPartition
}

func (f *fakeStorage) Fetch(_ context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	f.asked = req.Msg.GetPartitions()
	out := &storagev1.FetchResponse{}
	for _, p := range f.asked {
		out.Partitions = append(out.Partitions, &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Records: []byte("rec")})
	}
	return connect.NewResponse(out), nil
}

type fakeGateway struct{ Gateway }

func (fakeGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{Topics: []*commonv1.TopicMetadata{{Name: "granted"}, {Name: "hidden"}}}), nil
}

func (fakeGateway) DeleteTopic(context.Context, *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	return connect.NewResponse(&gatewayv1.DeleteTopicResponse{}), nil
}

// readerGuard enforces, with User:reader allowed read on topic granted.
func readerGuard(t *testing.T) (*guard.Guard, context.Context) {
	t.Helper()
	g, err := guard.New(context.Background(), guard.Config{RequireAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{{
		Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Read),
		ResourceType: commonv1.AclResourceType(acl.Topic), ResourceName: "granted",
	}}})
	return g, authn.NewContext(context.Background(), authn.Info{Principal: acl.User("reader"), Method: authn.MethodToken})
}

// TestGuardedFetch: partitions of a topic the principal may not read are
// answered PERMISSION_DENIED (TOPIC_AUTHORIZATION_FAILED) in their place
// and never reach the storage node; the others are fetched.
func TestGuardedFetch(t *testing.T) {
	g, ctx := readerGuard(t)
	fs := &fakeStorage{}
	w := guardedStorage{StorageServiceClient: fs, g: g}
	out, err := w.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{Partitions: []*storagev1.FetchPartition{
		{Topic: "granted", Partition: 0}, {Topic: "hidden", Partition: 0}, {Topic: "granted", Partition: 1},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.asked) != 2 || fs.asked[0].GetTopic() != "granted" || fs.asked[1].GetPartition() != 1 {
		t.Fatalf("storage asked for %v", fs.asked)
	}
	res := out.Msg.GetPartitions()
	if len(res) != 3 || res[0].GetError() != nil || res[2].GetError() != nil || string(res[2].GetRecords()) != "rec" {
		t.Fatalf("results %v", res)
	}
	if c := detailCode(res[1].GetError(), dataPlane, nil); res[1].GetTopic() != "hidden" || c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("hidden: %v, code %d", res[1], c)
	}
}

// TestGuardedGateway: Metadata lists only describable topics; a refused
// admin call maps to its resource's authorization error.
func TestGuardedGateway(t *testing.T) {
	g, ctx := readerGuard(t)
	w := guardedGateway{Gateway: fakeGateway{}, g: g}
	md, err := w.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ts := md.Msg.GetTopics(); len(ts) != 1 || ts[0].GetName() != "granted" {
		t.Fatalf("metadata lists %v", ts)
	}
	_, err = w.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: "granted"}))
	if c := kafkaCode(err, adminPlane); c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("delete: %v, code %d", err, c)
	}
	_, err = w.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: "g"}))
	if c := kafkaCode(err, groupPlane); c != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("delete group: %v, code %d", err, c)
	}
	// Not enforcing: everything passes.
	open, _ := guard.New(context.Background(), guard.Config{})
	w = guardedGateway{Gateway: fakeGateway{}, g: open}
	if _, err := w.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: "hidden"})); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeStorage) Produce(_ context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	return connect.NewResponse(&storagev1.ProduceResponse{BaseOffset: 7}), nil
}

// TestGuardedProduceQuota: produce needs write on the topic, and a
// principal over its produce quota is told to wait in throttle_time_ms.
func TestGuardedProduceQuota(t *testing.T) {
	g, ctx := readerGuard(t)
	st := g.Applied()
	st.Acls = append(st.Acls, &commonv1.AclBinding{
		Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Write),
		ResourceType: commonv1.AclResourceType(acl.Topic), ResourceName: "granted",
	})
	st.Quotas = []*commonv1.Quota{{Principal: "User:reader", ProduceBytesPerSecond: 100}}
	g.Apply(st)
	w := guardedStorage{StorageServiceClient: &fakeStorage{}, g: g}
	_, err := w.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{Topic: "hidden", Records: []byte("x")}))
	if c := kafkaCode(err, dataPlane); c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("produce to hidden: %v, code %d", err, c)
	}
	out, err := w.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{Topic: "granted", Records: make([]byte, 1000)}))
	if err != nil {
		t.Fatal(err)
	}
	if out.Msg.GetBaseOffset() != 7 || out.Msg.GetThrottleTimeMs() <= 0 {
		t.Fatalf("1000 bytes at 100 B/s: offset %d, throttle %d ms", out.Msg.GetBaseOffset(), out.Msg.GetThrottleTimeMs())
	}
}

// TestRefusedPartitionThroughBridge: through the bridge, a ListOffsets
// naming a partition the principal may not describe among others answers
// that one TOPIC_AUTHORIZATION_FAILED and the others as the node does.
// The wrappers used to leave the request holding the allowed partitions
// only, so the bridge, matching answers to its request by position, saw
// a count that did not match and failed every partition.
func TestRefusedPartitionThroughBridge(t *testing.T) {
	g, ctx := readerGuard(t)
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: listOffsetsStorage{}, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	for _, topic := range []string{"granted", "hidden"} {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Timestamp = -1
		rt.Partitions = append(rt.Partitions, p)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := b.listOffsets(ctx, 6, req)
	if err != nil {
		t.Fatal(err)
	}
	ts := resp.(*kmsg.ListOffsetsResponse).Topics
	if p := ts[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 9 {
		t.Errorf("granted: code %d offset %d, want none and 9", p.ErrorCode, p.Offset)
	}
	if p := ts[1].Partitions[0]; p.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("hidden: code %d, want TOPIC_AUTHORIZATION_FAILED", p.ErrorCode)
	}
}
