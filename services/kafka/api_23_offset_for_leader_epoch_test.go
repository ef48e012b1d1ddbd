package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// epochStorage answers OffsetForLeaderEpoch as a leader at epoch 5 whose
// epoch 3 ended at offset 40 and whose log ends at 100: partition 0 is
// led here, 1 is led elsewhere, 2 is unknown; a current leader epoch
// below 5 is fenced, above 5 unknown; topic hidden is refused, as a node
// refuses a principal that may not describe it. It records what it was
// asked.
type epochStorage struct {
	storagev1connect.StorageServiceClient
	asked *storagev1.OffsetForLeaderEpochRequest
}

func (s *epochStorage) OffsetForLeaderEpoch(_ context.Context, req *connect.Request[storagev1.OffsetForLeaderEpochRequest]) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
	s.asked = proto.Clone(req.Msg).(*storagev1.OffsetForLeaderEpochRequest)
	out := &storagev1.OffsetForLeaderEpochResponse{}
	for _, p := range req.Msg.GetPartitions() {
		r := &storagev1.OffsetForLeaderEpochPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), LeaderEpoch: -1, EndOffset: -1}
		cur := p.GetCurrentLeaderEpoch()
		switch {
		case p.GetTopic() == "hidden":
			r.Error = apierr.Detail(connect.CodePermissionDenied, commonv1.Reason_REASON_TOPIC_AUTHORIZATION_FAILED, "permission denied")
		case p.GetPartition() == 1:
			r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "not the leader")
		case p.GetPartition() == 2:
			r.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "unknown")
		case cur >= 0 && cur < 5:
			r.Error = apierr.Detail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, "fenced")
		case cur > 5:
			r.Error = apierr.Detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH, "unknown epoch")
		case p.GetLeaderEpoch() >= 5:
			r.LeaderEpoch, r.EndOffset = 5, 100
		case p.GetLeaderEpoch() >= 3:
			r.LeaderEpoch, r.EndOffset = 3, 40
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

func offsetForLeaderEpochRequest(replicaID int32, parts map[string][][3]int32) *kmsg.OffsetForLeaderEpochRequest {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = replicaID
	for _, topic := range []string{"granted", "hidden"} {
		if parts[topic] == nil {
			continue
		}
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = topic
		for _, p := range parts[topic] {
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = p[0], p[1], p[2]
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// TestOffsetForLeaderEpochMapping: each partition gets the storage node's
// answer as Kafka's: the epoch and where it ended, NOT_LEADER_OR_FOLLOWER,
// UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH;
// a partition the node refuses for authorization is
// TOPIC_AUTHORIZATION_FAILED; a follower's
// replica id is asked as a consumer's; v0 and v1 carry no current epoch.
func TestOffsetForLeaderEpochMapping(t *testing.T) {
	g, ctx := readerGuard(t) // User:reader may read (so describe) "granted" only
	st := &epochStorage{}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: st, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	req := offsetForLeaderEpochRequest(3, map[string][][3]int32{
		"granted": {{0, 5, 5}, {0, -1, 4}, {0, -1, 1}, {1, -1, 5}, {2, -1, 5}, {0, 4, 5}, {0, 6, 5}},
		"hidden":  {{0, -1, 5}},
	})
	resp, err := b.offsetForLeaderEpoch(ctx, 4, req)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code   int16
		epoch  int32
		offset int64
	}
	want := []answer{
		{0, 5, 100}, // the current epoch ends at the log end
		{0, 3, 40},  // epoch 4 never led: epoch 3's end
		{0, -1, -1}, // older than the log's first epoch
		{kerr.NotLeaderForPartition.Code, -1, -1},   // led elsewhere
		{kerr.UnknownTopicOrPartition.Code, -1, -1}, // not on this node
		{kerr.FencedLeaderEpoch.Code, -1, -1},       // the caller's epoch is old
		{kerr.UnknownLeaderEpoch.Code, -1, -1},      // the caller's epoch is ahead
		{kerr.TopicAuthorizationFailed.Code, -1, -1},
	}
	var got []answer
	for _, rt := range decoded(t, resp, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics {
		for _, rp := range rt.Partitions {
			got = append(got, answer{rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("partition %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if st.asked.GetReplicaId() != -1 || len(st.asked.GetPartitions()) != 8 {
		t.Fatalf("storage asked %v: want replica id -1 and the 8 partitions", st.asked)
	}

	// v1: no current leader epoch on the wire, none checked.
	req = offsetForLeaderEpochRequest(-1, map[string][][3]int32{"granted": {{0, 4, 5}}})
	resp, err = b.offsetForLeaderEpoch(ctx, 1, req)
	if err != nil {
		t.Fatal(err)
	}
	if rp := decoded(t, resp, 1).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]; rp.ErrorCode != 0 || rp.LeaderEpoch != 5 || rp.EndOffset != 100 {
		t.Fatalf("v1: %+v", rp)
	}
	if c := st.asked.GetPartitions()[0].GetCurrentLeaderEpoch(); c != -1 {
		t.Fatalf("v1 asked with current leader epoch %d", c)
	}
}

// TestOffsetForLeaderEpochNotALeader: the gateway's and the coordinator's
// listeners lead nothing: NOT_LEADER_OR_FOLLOWER, so the client asks the
// leader Metadata names.
func TestOffsetForLeaderEpochNotALeader(t *testing.T) {
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.offsetForLeaderEpoch(context.Background(), 4, offsetForLeaderEpochRequest(-1, map[string][][3]int32{"granted": {{0, -1, 5}}}))
	if err != nil {
		t.Fatal(err)
	}
	if rp := resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]; rp.ErrorCode != kerr.NotLeaderForPartition.Code || rp.EndOffset != -1 {
		t.Fatalf("%+v", rp)
	}
}
