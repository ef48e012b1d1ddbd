package kafka

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// moveGateway answers moves of topic t as the controller does: partition
// 0 (replicas 1, 2, 3) moves; 1 refuses without a reason (no move to
// cancel, or another move running); 2 names an ineligible node; 3 asks
// fewer replicas than min.insync.replicas; others do not exist. It lists
// moves of t-0 and t-1 and of u-0, and records the calls.
type moveGateway struct {
	fakeGateway
	altered []*gatewayv1.AlterPartitionReassignmentsRequest
	listed  []*gatewayv1.ListPartitionReassignmentsRequest
}

func (g *moveGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{Topics: []*commonv1.TopicMetadata{{Name: "t", Partitions: []*commonv1.PartitionMetadata{
		{Partition: 0, LeaderId: 1, Replicas: []int32{1, 2, 3}},
		// Moving from 1, 2 to 2, 4: 4 being added, 1 removed.
		{Partition: 1, LeaderId: 2, Replicas: []int32{2, 4, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}},
	}}}}), nil
}

func (g *moveGateway) AlterPartitionReassignments(_ context.Context, req *connect.Request[gatewayv1.AlterPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.AlterPartitionReassignmentsResponse], error) {
	g.altered = append(g.altered, proto.Clone(req.Msg).(*gatewayv1.AlterPartitionReassignmentsRequest))
	out := &gatewayv1.AlterPartitionReassignmentsResponse{}
	for _, r := range req.Msg.GetReassignments() {
		res := &controllerv1.PartitionReassignmentResult{Topic: r.GetTopic(), Partition: r.GetPartition()}
		switch r.GetPartition() {
		case 0:
		case 1:
			res.Error = apierr.Detail(connect.CodeFailedPrecondition, 0, "refused")
		case 2:
			res.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "node 9 is not registered")
		case 3:
			res.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR, "too few")
		default:
			res.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "not found")
		}
		out.Results = append(out.Results, res)
	}
	return connect.NewResponse(out), nil
}

func (g *moveGateway) ListPartitionReassignments(_ context.Context, req *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error) {
	g.listed = append(g.listed, proto.Clone(req.Msg).(*gatewayv1.ListPartitionReassignmentsRequest))
	moving := func(topic string, p int32) *controllerv1.PartitionChange {
		return &controllerv1.PartitionChange{Topic: topic, Partition: &commonv1.PartitionMetadata{
			Partition: p, Replicas: []int32{2, 4, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1},
		}}
	}
	return connect.NewResponse(&gatewayv1.ListPartitionReassignmentsResponse{Reassignments: []*controllerv1.PartitionChange{
		moving("t", 0), moving("t", 1), moving("u", 0),
	}}), nil
}

// reassignRequest names partitions of t with their target replicas; a
// nil target cancels.
func reassignRequest(allowRF bool, targets map[int32][]int32) *kmsg.AlterPartitionAssignmentsRequest {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.AllowReplicationFactorChange = allowRF
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = "t"
	for p := int32(0); p < 10; p++ {
		if r, ok := targets[p]; ok {
			rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
			rp.Partition, rp.Replicas = p, r
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func reassignCodes(t *testing.T, resp kmsg.Response, version int16) (int16, map[int32]int16) {
	t.Helper()
	r := decoded(t, resp, version).(*kmsg.AlterPartitionAssignmentsResponse)
	out := map[int32]int16{}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp.ErrorCode
		}
	}
	return r.ErrorCode, out
}

// TestAlterPartitionReassignmentsMapping: the controller's refusals as
// Kafka's codes; an empty replica list is INVALID_REPLICA_ASSIGNMENT
// without reaching the controller (which would read it as a cancel),
// null replicas cancel; v1 without allow_replication_factor_change
// refuses a count other than the partition's (before its move)
// INVALID_REPLICATION_FACTOR.
func TestAlterPartitionReassignmentsMapping(t *testing.T) {
	g, _, admin := clusterGuard(t)
	gw := &moveGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		version int16
		allowRF bool
		targets map[int32][]int32
		want    map[int32]int16
		sent    int
	}{
		{"moves", 0, true, map[int32][]int32{0: {3, 2, 1}, 2: {9}, 3: {1}, 7: {1}, 5: {}},
			map[int32]int16{0: 0, 2: kerr.InvalidReplicaAssignment.Code, 3: kerr.InvalidReplicationFactor.Code, 7: kerr.UnknownTopicOrPartition.Code, 5: kerr.InvalidReplicaAssignment.Code}, 4},
		{"cancel with no move", 0, true, map[int32][]int32{1: nil}, map[int32]int16{1: kerr.NoReassignmentInProgress.Code}, 1},
		{"another move running", 0, true, map[int32][]int32{1: {1, 2}}, map[int32]int16{1: kerr.ReassignmentInProgress.Code}, 1},
		{"v1 same count", 1, false, map[int32][]int32{0: {2, 3, 4}, 1: {4, 2}}, map[int32]int16{0: 0, 1: kerr.ReassignmentInProgress.Code}, 2},
		{"v1 count changed", 1, false, map[int32][]int32{0: {1, 2}, 1: {2, 4, 5}}, map[int32]int16{0: kerr.InvalidReplicationFactor.Code, 1: kerr.InvalidReplicationFactor.Code}, 0},
		{"v1 allowed", 1, true, map[int32][]int32{0: {1, 2}}, map[int32]int16{0: 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(gw.altered)
			resp, err := b.alterPartitionReassignments(admin, tc.version, reassignRequest(tc.allowRF, tc.targets))
			if err != nil {
				t.Fatal(err)
			}
			top, got := reassignCodes(t, resp, tc.version)
			if top != 0 || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("top %d, %v, want none and %v", top, got, tc.want)
			}
			sent := 0
			if len(gw.altered) > n {
				sent = len(gw.altered[n].GetReassignments())
			}
			if sent != tc.sent {
				t.Fatalf("%d partitions sent to the controller, want %d", sent, tc.sent)
			}
			if tc.version == 1 && resp.(*kmsg.AlterPartitionAssignmentsResponse).AllowReplicationFactorChange != tc.allowRF {
				t.Fatal("allow_replication_factor_change not echoed")
			}
		})
	}
	if r := gw.altered[1].GetReassignments()[0]; r.GetReplicas() != nil {
		t.Fatalf("a cancel sent replicas %v", r.GetReplicas())
	}
}

// TestPartitionReassignmentsNeedClusterACL: alter needs alter on the
// cluster (CLUSTER_AUTHORIZATION_FAILED at the top and on each
// partition), list describe (at the top); nothing reaches the controller.
func TestPartitionReassignmentsNeedClusterACL(t *testing.T) {
	g, reader, _ := clusterGuard(t)
	gw := &moveGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.alterPartitionReassignments(reader, 0, reassignRequest(true, map[int32][]int32{0: {1}, 1: nil}))
	if err != nil {
		t.Fatal(err)
	}
	if top, got := reassignCodes(t, resp, 0); top != kerr.ClusterAuthorizationFailed.Code || got[0] != kerr.ClusterAuthorizationFailed.Code || got[1] != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alter: top %d, %v", top, got)
	}
	resp, err = b.listPartitionReassignments(reader, 0, kmsg.NewPtrListPartitionReassignmentsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r := decoded(t, resp, 0).(*kmsg.ListPartitionReassignmentsResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code || len(r.Topics) != 0 {
		t.Fatalf("list: %+v", r)
	}
	if len(gw.altered)+len(gw.listed) != 0 {
		t.Fatal("refused, yet the controller was asked")
	}

}
