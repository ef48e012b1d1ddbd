package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
)

// writeMarker sends one WriteTxnMarkers of a single marker and returns
// its partitions' results.
func writeMarker(t *testing.T, ctx context.Context, s *service, pid int64, epoch, coordEpoch int32, commit bool, parts ...*commonv1.TopicPartitions) []*storagev1.TxnMarkerPartitionResult {
	t.Helper()
	resp, err := s.WriteTxnMarkers(ctx, connect.NewRequest(&storagev1.WriteTxnMarkersRequest{TimeoutMs: 10_000,
		Markers: []*storagev1.TxnMarker{{ProducerId: pid, ProducerEpoch: epoch, Commit: commit, CoordinatorEpoch: coordEpoch, Partitions: parts}}}))
	if err != nil {
		t.Fatalf("WriteTxnMarkers: %v", err)
	}
	if n := len(resp.Msg.GetMarkers()); n != 1 || resp.Msg.GetMarkers()[0].GetProducerId() != pid {
		t.Fatalf("WriteTxnMarkers answered %d markers (%v); want the one asked", n, resp.Msg.GetMarkers())
	}
	return resp.Msg.GetMarkers()[0].GetPartitions()
}

// A commit marker ends the producer's open transaction on the leader and
// is answered with its offset once replicated, moving the last stable
// offset past it; an older coordinator epoch or producer epoch than the
// partition took is refused with its own reason; a follower answers
// NOT_LEADER naming the leader, and an unknown partition NOT_FOUND, each
// beside the others' answers.
func TestWriteTxnMarkers(t *testing.T) {
	c := newCluster(t, 2, time.Hour)
	c.createTopic("wtm", 2, 2)
	r := c.node(1).node.replica("wtm", 0)
	const pid = 11
	appendTxnRecords(t, r, pid, 0, "t1", "t2") // 0-1
	if lso := r.Log().LastStableOffset(); lso != 0 {
		t.Fatalf("lso %d with the transaction open, want 0", lso)
	}
	ctx := context.Background()
	res := writeMarker(t, ctx, c.handler(1), pid, 0, 3, true,
		&commonv1.TopicPartitions{Topic: "wtm", Partitions: []int32{0, 5}}, &commonv1.TopicPartitions{Topic: "nope", Partitions: []int32{0}})
	if len(res) != 3 {
		t.Fatalf("%d partition results, want 3", len(res))
	}
	if res[0].GetError() != nil || res[0].GetOffset() != 2 {
		t.Fatalf("marker on wtm-0: offset %d, %v; want offset 2", res[0].GetOffset(), res[0].GetError())
	}
	for _, pr := range res[1:] {
		if pr.GetError().GetReason() != commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION || pr.GetOffset() != -1 {
			t.Errorf("marker on %s-%d: %v, offset %d; want UNKNOWN_TOPIC_OR_PARTITION, -1", pr.GetTopic(), pr.GetPartition(), pr.GetError(), pr.GetOffset())
		}
	}
	if hw, lso := r.Log().HighWatermark(), r.Log().LastStableOffset(); hw != 3 || lso != 3 {
		t.Fatalf("after the commit marker: hw %d lso %d, want 3 and 3", hw, lso)
	}

	for _, tc := range []struct {
		epoch, coordEpoch int32
		want              commonv1.Reason
	}{
		{0, 2, commonv1.Reason_REASON_TRANSACTION_COORDINATOR_FENCED}, // an older coordinator
	} {
		res := writeMarker(t, ctx, c.handler(1), pid, tc.epoch, tc.coordEpoch, false, &commonv1.TopicPartitions{Topic: "wtm", Partitions: []int32{0}})
		if d := res[0].GetError(); d.GetReason() != tc.want || d.GetCode() != commonv1.Code_CODE_ABORTED {
			t.Errorf("marker of producer epoch %d, coordinator epoch %d: %v; want ABORTED %s", tc.epoch, tc.coordEpoch, d, tc.want)
		}
	}
	// A newer producer epoch's marker (the coordinator fenced the
	// producer) is taken; after it the older epoch is refused.
	if res := writeMarker(t, ctx, c.handler(1), pid, 1, 3, false, &commonv1.TopicPartitions{Topic: "wtm", Partitions: []int32{0}}); res[0].GetError() != nil {
		t.Fatalf("abort marker of epoch 1: %v", res[0].GetError())
	}
	res = writeMarker(t, ctx, c.handler(1), pid, 0, 3, false, &commonv1.TopicPartitions{Topic: "wtm", Partitions: []int32{0}})
	if d := res[0].GetError(); d.GetReason() != commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH {
		t.Errorf("marker of producer epoch 0 after epoch 1: %v; want INVALID_PRODUCER_EPOCH", d)
	}

	res = writeMarker(t, ctx, c.handler(2), pid, 1, 3, true, &commonv1.TopicPartitions{Topic: "wtm", Partitions: []int32{0}})
	if d := res[0].GetError(); d.GetReason() != commonv1.Reason_REASON_NOT_LEADER || d.GetLeader().GetLeaderId() != 1 {
		t.Errorf("marker sent to the follower: %v; want NOT_LEADER naming node 1", d)
	}

	_, err := c.handler(1).WriteTxnMarkers(ctx, connect.NewRequest(&storagev1.WriteTxnMarkersRequest{
		Markers: []*storagev1.TxnMarker{{ProducerId: pid, ProducerEpoch: 1 << 16}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a producer epoch out of range: %v, want INVALID_ARGUMENT", err)
	}
}

// Only the coordinator's service identity writes markers: not a user,
// whatever its ACLs, nor another service.
func TestWriteTxnMarkersNeedsTheCoordinator(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("wtms", 1, 1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		allow("User:alice", acl.All, acl.Cluster, acl.ClusterName), allow("User:alice", acl.All, acl.Topic, "wtms"),
	}})
	appendTxnRecords(t, c.node(1).node.replica("wtms", 0), 5, 0, "t")
	req := &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{{ProducerId: 5, Commit: true,
		Partitions: []*commonv1.TopicPartitions{{Topic: "wtms", Partitions: []int32{0}}}}}}
	for _, who := range []string{"User:alice", "Service:gateway/1", "Service:storage/1"} {
		_, err := c.handler(1).WriteTxnMarkers(as(t, who), connect.NewRequest(req))
		checkDenied(t, fmt.Sprintf("WriteTxnMarkers from %s", who), apierr.AsDetail(err), who, "coordinator")
	}
	resp, err := c.handler(1).WriteTxnMarkers(as(t, "Service:coordinator/c1"), connect.NewRequest(req))
	if err != nil || resp.Msg.GetMarkers()[0].GetPartitions()[0].GetError() != nil {
		t.Fatalf("WriteTxnMarkers from the coordinator: %v %v", err, resp)
	}
}
