package server

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// moveController answers the elastic-storage calls and records what it got.
type moveController struct {
	*fakeController
	mu   sync.Mutex
	got  []proto.Message
	fail error
}

func (f *moveController) record(m proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, m)
	return f.fail
}

var plannedMove = &controllerv1.PlannedMove{Topic: "orders", Partition: 3, FromReplicas: []int32{1, 2, 3}, ToReplicas: []int32{4, 2, 3}, SizeBytes: 77}

func (f *moveController) Rebalance(_ context.Context, req *connect.Request[controllerv1.RebalanceRequest]) (*connect.Response[controllerv1.RebalanceResponse], error) {
	if err := f.record(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controllerv1.RebalanceResponse{
		Moves: []*controllerv1.PlannedMove{plannedMove}, Started: true, InProgress: 2,
		Before: []*controllerv1.NodeLoad{{NodeId: 1, Replicas: 12, Leaders: 4, Eligible: true}},
	}), nil
}

func (f *moveController) AlterPartitionReassignments(_ context.Context, req *connect.Request[controllerv1.AlterPartitionReassignmentsRequest]) (*connect.Response[controllerv1.AlterPartitionReassignmentsResponse], error) {
	if err := f.record(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controllerv1.AlterPartitionReassignmentsResponse{Results: []*controllerv1.PartitionReassignmentResult{{
		Topic: "orders", Partition: 3, State: &commonv1.PartitionMetadata{Replicas: []int32{4, 2, 3, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}},
	}}}), nil
}

func (f *moveController) DrainNode(_ context.Context, req *connect.Request[controllerv1.DrainNodeRequest]) (*connect.Response[controllerv1.DrainNodeResponse], error) {
	if err := f.record(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controllerv1.DrainNodeResponse{Node: &controllerv1.NodeStatus{Drained: true}, Replicas: 5}), nil
}

// Every field of the new admin calls crosses the gateway both ways, and
// the controller's errors come back unchanged.
func TestElasticStoragePassThrough(t *testing.T) {
	fc := &moveController{fakeController: newFakeController()}
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(fc))
	_, gc, _ := testGateway(t, &Config{Controllers: serveOn(t, mux)})
	ctx := context.Background()

	rb, err := gc.Rebalance(ctx, connect.NewRequest(&gatewayv1.RebalanceRequest{DryRun: true, ThrottleBytesPerSecond: 5 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rb.Msg.GetMoves()) != 1 || !proto.Equal(rb.Msg.GetMoves()[0], plannedMove) || !rb.Msg.GetStarted() ||
		rb.Msg.GetInProgress() != 2 || rb.Msg.GetBefore()[0].GetReplicas() != 12 {
		t.Errorf("rebalance answer %v", rb.Msg)
	}
	mv, err := gc.AlterPartitionReassignments(ctx, connect.NewRequest(&gatewayv1.AlterPartitionReassignmentsRequest{
		Reassignments: []*controllerv1.PartitionReassignment{{Topic: "orders", Partition: 3, Replicas: []int32{4, 2, 3}}}, ThrottleBytesPerSecond: 9,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if st := mv.Msg.GetResults()[0].GetState(); len(st.GetAddingReplicas()) != 1 || st.GetRemovingReplicas()[0] != 1 {
		t.Errorf("move answer %v", mv.Msg)
	}
	dr, err := gc.DrainNode(ctx, connect.NewRequest(&gatewayv1.DrainNodeRequest{NodeId: 4, Undrain: true, ThrottleBytesPerSecond: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if !dr.Msg.GetNode().GetDrained() || dr.Msg.GetReplicas() != 5 {
		t.Errorf("drain answer %v", dr.Msg)
	}
	want := []proto.Message{
		&controllerv1.RebalanceRequest{DryRun: true, ThrottleBytesPerSecond: 5 << 20},
		&controllerv1.AlterPartitionReassignmentsRequest{
			Reassignments: []*controllerv1.PartitionReassignment{{Topic: "orders", Partition: 3, Replicas: []int32{4, 2, 3}}}, ThrottleBytesPerSecond: 9},
		&controllerv1.DrainNodeRequest{NodeId: 4, Undrain: true, ThrottleBytesPerSecond: 3},
	}
	fc.mu.Lock()
	got := fc.got
	fc.mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("controller got %d calls, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("call %d: controller got %v, want %v", i, got[i], want[i])
		}
	}

	fc.mu.Lock()
	fc.fail = apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_INELIGIBLE_REPLICA, Message: "node 9 is not alive"})
	fc.mu.Unlock()
	_, err = gc.Rebalance(ctx, connect.NewRequest(&gatewayv1.RebalanceRequest{}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetReason() != commonv1.Reason_REASON_INELIGIBLE_REPLICA {
		t.Errorf("error = %v; want the controller's failed_precondition with its detail", err)
	}
}
