package kafka

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/metaview"
)

// CreateTopics (through autocreate_test.go's creatingGateway, whose
// topics have no id) answers once the listener's own view holds the topics it
// created, so that the client's next Metadata to this listener finds
// them (kafkajs's waitForLeaders gives up on UNKNOWN_TOPIC_OR_PARTITION).
func TestCreateTopicsWaitsForTheView(t *testing.T) {
	var looks atomic.Int32
	view := func() *metaview.View {
		v := &metaview.View{Version: 7, Topics: map[string]*commonv1.TopicMetadata{}}
		if looks.Add(1) > 3 { // the controller's delta arrives at the fourth look
			v.Topics["orders"] = &commonv1.TopicMetadata{Name: "orders", TopicId: ""}
		}
		return v
	}
	b, err := New(Config{Gateway: &creatingGateway{}, HTTPClient: http.DefaultClient, View: view})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "orders", 1, 3
	req.Topics, req.TimeoutMillis = append(req.Topics, rt), 60000
	resp, err := b.createTopics(context.Background(), 7, req)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; c != 0 {
		t.Fatalf("error code %d", c)
	}
	if n := looks.Load(); n < 4 {
		t.Errorf("answered after %d looks at the view, before it held the topic", n)
	}

	// Validation only creates nothing, so nothing is waited for.
	looks.Store(-100)
	req.ValidateOnly = true
	if _, err := b.createTopics(context.Background(), 7, req); err != nil {
		t.Fatal(err)
	}
	if n := looks.Load(); n != -100 {
		t.Errorf("a validate-only request looked at the view %d times", n+100)
	}
}
