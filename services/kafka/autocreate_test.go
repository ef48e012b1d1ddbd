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
	"github.com/strata-mq/strata/lib/apierr"
)

// creatingGateway knows no topic, and records the topics it is asked to
// create: "taken" already exists, "forbidden" may not be created.
type creatingGateway struct {
	Gateway
	created []*gatewayv1.CreateTopicRequest
}

func (g *creatingGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{ClusterId: "c", Nodes: []*commonv1.Node{{NodeId: 1, Address: "http://127.0.0.1:9102"}}}), nil
}

func (g *creatingGateway) CreateTopic(_ context.Context, req *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	g.created = append(g.created, req.Msg)
	switch req.Msg.GetName() {
	case "taken":
		return nil, apierr.New(connect.CodeAlreadyExists, commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, "topic taken exists")
	case "forbidden":
		return nil, apierr.New(connect.CodePermissionDenied, commonv1.Reason_REASON_UNSPECIFIED, "permission denied: User:x may not create topic forbidden")
	}
	return connect.NewResponse(&gatewayv1.CreateTopicResponse{}), nil
}

// auto.create.topics.enable: off (the default), a Metadata request naming
// an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION and creates
// nothing; on, a request that allows it (v4+, or any before) creates the
// topic with the cluster's defaults and answers LEADER_NOT_AVAILABLE, also
// when another client created it first; a refusal to create is
// TOPIC_AUTHORIZATION_FAILED.
func TestMetadataAutoCreatesTopics(t *testing.T) {
	ask := func(b *Bridge, version int16, allow bool, topic string) int16 {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics, req.AllowAutoTopicCreation = append(req.Topics, rt), allow
		r, err := b.metadata(context.Background(), version, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			t.Fatalf("%d topics answered", len(resp.Topics))
		}
		return resp.Topics[0].ErrorCode
	}
	off := &creatingGateway{}
	b, err := New(Config{Gateway: off, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	if code := ask(b, 12, true, "orders"); code != kerr.UnknownTopicOrPartition.Code || len(off.created) != 0 {
		t.Fatalf("auto-creation off: code %d, %d created; want UNKNOWN_TOPIC_OR_PARTITION and none", code, len(off.created))
	}

	on := &creatingGateway{}
	b, err = New(Config{Gateway: on, HTTPClient: http.DefaultClient, AutoCreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	if code := ask(b, 12, false, "orders"); code != kerr.UnknownTopicOrPartition.Code || len(on.created) != 0 {
		t.Fatalf("a request that does not allow it: code %d, %d created", code, len(on.created))
	}
	for _, tc := range []struct {
		version int16
		topic   string
		want    int16
	}{
		{12, "orders", kerr.LeaderNotAvailable.Code},
		{3, "old-client", kerr.LeaderNotAvailable.Code}, // before v4 every request allows it
		{12, "taken", kerr.LeaderNotAvailable.Code},
		{12, "forbidden", kerr.TopicAuthorizationFailed.Code},
	} {
		before := len(on.created)
		if code := ask(b, tc.version, true, tc.topic); code != tc.want {
			t.Fatalf("v%d %s: code %d, want %d", tc.version, tc.topic, code, tc.want)
		}
		if len(on.created) != before+1 {
			t.Fatalf("v%d %s: not asked to create", tc.version, tc.topic)
		}
		if c := on.created[before]; c.GetName() != tc.topic || c.GetPartitions() != 0 || c.GetReplicationFactor() != 0 {
			t.Fatalf("created %+v, want %s with the cluster's defaults", c, tc.topic)
		}
	}
}
