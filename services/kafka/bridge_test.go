package kafka

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/serve"
)

func TestKafkaCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		p    plane
		want int16
	}{
		{"nil", nil, dataPlane, 0},
		{"not leader", apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "x"), dataPlane, kerr.NotLeaderForPartition.Code},
		{"out of range", apierr.New(connect.CodeOutOfRange, commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE, "x"), dataPlane, kerr.OffsetOutOfRange.Code},
		{"sequence", apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE, "x"), dataPlane, kerr.OutOfOrderSequenceNumber.Code},
		{"not enough replicas", apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS, "x"), dataPlane, kerr.NotEnoughReplicas.Code},
		{"topic exists", apierr.New(connect.CodeAlreadyExists, commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, "x"), adminPlane, kerr.TopicAlreadyExists.Code},
		{"group not found", apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNSPECIFIED, "x"), groupPlane, kerr.GroupIDNotFound.Code},
		{"topic not found", apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNSPECIFIED, "x"), dataPlane, kerr.UnknownTopicOrPartition.Code},
		{"denied topic", apierr.New(connect.CodePermissionDenied, commonv1.Reason_REASON_UNSPECIFIED, "x"), dataPlane, kerr.TopicAuthorizationFailed.Code},
		{"denied group", apierr.New(connect.CodePermissionDenied, commonv1.Reason_REASON_UNSPECIFIED, "x"), groupPlane, kerr.GroupAuthorizationFailed.Code},
		{"unavailable data", connect.NewError(connect.CodeUnavailable, errors.New("down")), dataPlane, kerr.LeaderNotAvailable.Code},
		{"unavailable group", connect.NewError(connect.CodeUnavailable, errors.New("down")), groupPlane, kerr.CoordinatorNotAvailable.Code},
		// A call that never reached its service is retriable.
		{"transport data", connect.NewError(connect.CodeUnknown, errors.New("connection refused")), dataPlane, kerr.NotLeaderForPartition.Code},
		{"plain error", errors.New("boom"), adminPlane, kerr.RequestTimedOut.Code},
		{"internal with detail", apierr.New(connect.CodeInternal, commonv1.Reason_REASON_UNSPECIFIED, "bug"), dataPlane, kerr.UnknownServerError.Code},
		// Kafka's LogValidator refusals: a record without a key in a
		// compacted topic, a timestamp out of the topic's window.
		{"invalid record", apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_RECORD, "x"), dataPlane, 87},
		{"invalid timestamp", apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_TIMESTAMP, "x"), dataPlane, 32},
	} {
		if got := kafkaCode(tc.err, tc.p); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestBrokersAndGroupBroker(t *testing.T) {
	listener := func(addr string) []*commonv1.Listener {
		return []*commonv1.Listener{{Name: "external", Address: "http://x:1"}, {Name: serve.KafkaListenerName, Address: serve.KafkaScheme + addr}}
	}
	nodes := []*commonv1.Node{
		{NodeId: 3, Listeners: listener("h3:9003"), Rack: "r3"},
		{NodeId: 1, Listeners: listener("h1:9001")},
		{NodeId: 2}, // no Kafka listener: not a broker
		{NodeId: 4, Listeners: listener("bad")},
	}
	bs := brokers(nodes)
	if len(bs) != 2 || bs[0].id != 1 || bs[0].host != "h1" || bs[0].port != 9001 || bs[1].id != 3 || *bs[1].rack != "r3" {
		t.Fatalf("brokers %+v", bs)
	}
	// Every bridge names the same broker for a group; groups spread.
	seen := map[int32]bool{}
	for _, g := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		b1, ok1 := groupBroker(bs, g)
		b2, ok2 := groupBroker(brokers(nodes), g)
		if !ok1 || !ok2 || b1.id != b2.id {
			t.Fatalf("group %s: %v %v", g, b1, b2)
		}
		seen[b1.id] = true
	}
	if len(seen) != 2 {
		t.Errorf("8 groups all on brokers %v", seen)
	}
	if _, ok := groupBroker(nil, "a"); ok {
		t.Error("a broker with no brokers")
	}
}

func TestTopicID(t *testing.T) {
	id := topicID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	if id[0] != 0x0f || id[15] != 0xf0 {
		t.Fatalf("%x", id)
	}
	if topicID("not a uuid") != ([16]byte{}) {
		t.Fatal("garbage parsed")
	}
}

// samePartitions reports whether a and b name the same partitions, in
// any order.
func samePartitions(a, b []*commonv1.TopicPartitions) bool {
	flat := func(x []*commonv1.TopicPartitions) []string {
		var out []string
		for _, t := range x {
			for _, p := range t.GetPartitions() {
				out = append(out, fmt.Sprintf("%s\x00%d", t.GetTopic(), p))
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(flat(a), flat(b))
}

func TestSamePartitions(t *testing.T) {
	a := []*commonv1.TopicPartitions{{Topic: "t", Partitions: []int32{2, 0}}, {Topic: "u", Partitions: []int32{1}}}
	b := []*commonv1.TopicPartitions{{Topic: "u", Partitions: []int32{1}}, {Topic: "t", Partitions: []int32{0, 2}}}
	if !samePartitions(a, b) || samePartitions(a, b[:1]) || !samePartitions(nil, []*commonv1.TopicPartitions{{Topic: "t"}}) {
		t.Fatal("samePartitions")
	}
}
