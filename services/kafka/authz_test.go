package kafka

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// fakeStorage answers Fetch with one result per partition asked, as a
// storage node does: with a guard, a partition of a topic the request's
// principal may not read is refused in its place; the others have
// records. It records the partitions asked.
type fakeStorage struct {
	storagev1connect.StorageServiceClient
	g     *guard.Guard
	asked []*storagev1.FetchPartition
}

func (f *fakeStorage) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	f.asked = req.Msg.GetPartitions()
	out := &storagev1.FetchResponse{}
	for _, p := range f.asked {
		r := &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Records: []byte("rec")}
		if f.g != nil {
			if err := f.g.Authorize(ctx, acl.Read, acl.Topic, p.GetTopic()); err != nil {
				r.Records, r.Error = nil, apierr.AsDetail(err)
			}
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

// fakeGateway answers Metadata with topics granted and hidden, and
// DeleteTopic with success.
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

// principalGateway records, for each call, the principal its context
// was marked to forward ("" for none), and the topics Metadata was asked.
type principalGateway struct {
	Gateway
	forwarded []string
	asked     [][]string
}

func (f *principalGateway) note(ctx context.Context) {
	name := ""
	if p, ok := guard.ForwardedPrincipal(ctx); ok {
		name = p.String()
	}
	f.forwarded = append(f.forwarded, name)
}

func (f *principalGateway) DeleteTopic(ctx context.Context, _ *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	f.note(ctx)
	return connect.NewResponse(&gatewayv1.DeleteTopicResponse{}), nil
}

func (f *principalGateway) Metadata(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	f.note(ctx)
	f.asked = append(f.asked, req.Msg.GetTopics())
	return connect.NewResponse(&gatewayv1.MetadataResponse{Topics: []*commonv1.TopicMetadata{{Name: "granted"}}}), nil
}

// TestRequestsRunInThePrincipalsName: every request's calls carry the
// Kafka connection's principal for the services to check (authz.go); an
// anonymous connection's calls go as the listener's own identity.
func TestRequestsRunInThePrincipalsName(t *testing.T) {
	g, reader := readerGuard(t)
	gw := &principalGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(b.APIs(), func(a kafkawire.API) bool { return a.Key == kmsg.DeleteTopics })
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{"granted"}
	anonymous := authn.NewContext(context.Background(), authn.Info{Principal: acl.Anonymous, Method: authn.MethodAnonymous})
	for _, ctx := range []context.Context{reader, anonymous} {
		r := &kafkawire.Request{Body: req}
		r.Version = 4
		if _, err := b.APIs()[i].Handle(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(gw.forwarded, []string{"User:reader", ""}) {
		t.Fatalf("the gateway's calls carried %q; want User:reader, then nothing", gw.forwarded)
	}
}

// TestRefusalsAnswerTheirResourceType: an owner's PERMISSION_DENIED names
// the resource type in its reason, and the listener answers Kafka's error
// of that type whatever the request was doing.
func TestRefusalsAnswerTheirResourceType(t *testing.T) {
	for rt, want := range map[acl.ResourceType]int16{
		acl.Topic:   kerr.TopicAuthorizationFailed.Code,
		acl.Group:   kerr.GroupAuthorizationFailed.Code,
		acl.Cluster: kerr.ClusterAuthorizationFailed.Code,
	} {
		err := guard.DeniedOn(rt, "permission denied: User:reader may not do that")
		for _, p := range []plane{dataPlane, adminPlane, groupPlane} {
			if got := kafkaCode(err, p); got != want {
				t.Errorf("%v refusal on plane %d: code %d, want %d", rt, p, got, want)
			}
		}
	}
}

// TestMetadataAsksOnlyDescribableNames: without a view, Metadata asks the
// gateway only for the named topics the principal may describe (the
// gateway would refuse the whole request) and answers the others
// TOPIC_AUTHORIZATION_FAILED, as Kafka does.
func TestMetadataAsksOnlyDescribableNames(t *testing.T) {
	g, reader := readerGuard(t)
	gw := &principalGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range []string{"granted", "hidden"} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := b.metadata(guard.Forward(reader), 12, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(gw.asked) != 1 || !slices.Equal(gw.asked[0], []string{"granted"}) {
		t.Fatalf("the gateway was asked for %v; want [granted]", gw.asked)
	}
	ts := resp.(*kmsg.MetadataResponse).Topics
	if len(ts) != 2 || ts[0].ErrorCode != 0 || ts[1].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("answer %+v; want granted, then hidden TOPIC_AUTHORIZATION_FAILED", ts)
	}
}

// refusingStorage is listOffsetsStorage on a node that refuses topic
// hidden, partition by partition, as a storage node's handler does.
type refusingStorage struct{ listOffsetsStorage }

func (s refusingStorage) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	out, err := s.listOffsetsStorage.ListOffsets(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, r := range out.Msg.GetPartitions() {
		if r.GetTopic() == "hidden" {
			r.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_PERMISSION_DENIED, Reason: commonv1.Reason_REASON_TOPIC_AUTHORIZATION_FAILED,
				Message: "permission denied: User:reader may not describe topic hidden"}
		}
	}
	return out, nil
}

// TestRefusedPartitionThroughBridge: a ListOffsets naming a partition the
// principal may not describe among others answers that one
// TOPIC_AUTHORIZATION_FAILED and the others as the node does.
func TestRefusedPartitionThroughBridge(t *testing.T) {
	g, ctx := readerGuard(t)
	b, err := New(Config{Gateway: &principalGateway{}, HTTPClient: http.DefaultClient, Storage: refusingStorage{}, Guard: g})
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
