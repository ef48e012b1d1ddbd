package kafka

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// txnCoordinator is a transaction coordinator that answers as a script
// says and records what it was asked.
type txnCoordinatorFake struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	mu      sync.Mutex
	inits   []*coordinatorv1.InitTransactionalProducerRequest
	ends    []*coordinatorv1.EndTxnRequest
	commits []*coordinatorv1.TxnOffsetCommitRequest
	// offsetsErr, when set, is AddOffsetsToTxn's answer.
	offsetsErr error
}

func (f *txnCoordinatorFake) InitTransactionalProducer(_ context.Context, req *connect.Request[coordinatorv1.InitTransactionalProducerRequest]) (*connect.Response[coordinatorv1.InitTransactionalProducerResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inits = append(f.inits, req.Msg)
	return connect.NewResponse(&coordinatorv1.InitTransactionalProducerResponse{ProducerId: 42, ProducerEpoch: 3}), nil
}

// AddPartitionsToTxn refuses topic hidden, and leaves the others not
// attempted then, as the coordinator does.
func (f *txnCoordinatorFake) AddPartitionsToTxn(_ context.Context, req *connect.Request[coordinatorv1.AddPartitionsToTxnRequest]) (*connect.Response[coordinatorv1.AddPartitionsToTxnResponse], error) {
	refused := slices.ContainsFunc(req.Msg.GetPartitions(), func(tp *commonv1.TopicPartitions) bool { return tp.GetTopic() == "hidden" })
	out := &coordinatorv1.AddPartitionsToTxnResponse{}
	for _, tp := range req.Msg.GetPartitions() {
		for _, p := range tp.GetPartitions() {
			r := &coordinatorv1.TxnPartitionResult{Topic: tp.GetTopic(), Partition: p}
			switch {
			case tp.GetTopic() == "hidden":
				r.Error = apierr.Detail(connect.CodePermissionDenied, commonv1.Reason_REASON_TOPIC_AUTHORIZATION_FAILED, "permission denied")
			case refused:
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OPERATION_NOT_ATTEMPTED, "not attempted")
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	return connect.NewResponse(out), nil
}

func (f *txnCoordinatorFake) AddOffsetsToTxn(context.Context, *connect.Request[coordinatorv1.AddOffsetsToTxnRequest]) (*connect.Response[coordinatorv1.AddOffsetsToTxnResponse], error) {
	if f.offsetsErr != nil {
		return nil, f.offsetsErr
	}
	return connect.NewResponse(&coordinatorv1.AddOffsetsToTxnResponse{}), nil
}

func (f *txnCoordinatorFake) EndTxn(_ context.Context, req *connect.Request[coordinatorv1.EndTxnRequest]) (*connect.Response[coordinatorv1.EndTxnResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ends = append(f.ends, req.Msg)
	return connect.NewResponse(&coordinatorv1.EndTxnResponse{}), nil
}

func (f *txnCoordinatorFake) TxnOffsetCommit(_ context.Context, req *connect.Request[coordinatorv1.TxnOffsetCommitRequest]) (*connect.Response[coordinatorv1.TxnOffsetCommitResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, req.Msg)
	out := &coordinatorv1.TxnOffsetCommitResponse{}
	for _, p := range req.Msg.GetPartitions() {
		out.Partitions = append(out.Partitions, &coordinatorv1.TxnPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	return connect.NewResponse(out), nil
}

// keyGateway locates every key at one coordinator, and records the key
// types it was asked.
type keyGateway struct {
	fakeGateway
	addr  string
	mu    sync.Mutex
	kinds []coordinatorv1.CoordinatorKeyType
}

func (g *keyGateway) FindCoordinator(_ context.Context, req *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	g.mu.Lock()
	g.kinds = append(g.kinds, req.Msg.GetKeyType())
	g.mu.Unlock()
	return connect.NewResponse(&gatewayv1.FindCoordinatorResponse{CoordinatorId: "c0", Address: g.addr}), nil
}

func newTxnBridge(t *testing.T, offered bool) (*Bridge, *txnCoordinatorFake, *keyGateway) {
	t.Helper()
	coord := &txnCoordinatorFake{}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(coord))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	gw := &keyGateway{addr: srv.URL}
	b, err := New(Config{Gateway: gw, HTTPClient: srv.Client(), Transactions: offered})
	if err != nil {
		t.Fatal(err)
	}
	return b, coord, gw
}

// TestTransactionAPIsOfferedOnlyWhenOn: without Config.Transactions the
// transaction APIs stay out of ApiVersions and a transactional id is
// refused UNSUPPORTED_VERSION, as before the coordinator; with it they
// are offered.
func TestTransactionAPIsOfferedOnlyWhenOn(t *testing.T) {
	for _, offered := range []bool{false, true} {
		b, coord, _ := newTxnBridge(t, offered)
		for _, a := range b.APIs() {
			switch a.Key {
			case kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit:
				if a.Hidden == offered {
					t.Errorf("transactions %v: API %d hidden %v", offered, a.Key, a.Hidden)
				}
			}
		}
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr("etl-0"), 60000
		resp, err := b.initProducerID(context.Background(), 4, req)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.(*kmsg.InitProducerIDResponse)
		switch {
		case !offered && (r.ErrorCode != kerr.UnsupportedVersion.Code || len(coord.inits) != 0):
			t.Errorf("not offered: code %d, %d inits reached the coordinator", r.ErrorCode, len(coord.inits))
		case offered && (r.ErrorCode != 0 || r.ProducerID != 42 || r.ProducerEpoch != 3 || len(coord.inits) != 1 ||
			coord.inits[0].GetTransactionalId() != "etl-0" || coord.inits[0].GetTransactionTimeoutMs() != 60000):
			t.Errorf("offered: %+v, coordinator asked %v", r, coord.inits)
		}
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{"etl-0"}
		fresp, err := b.findCoordinator(context.Background(), 4, fc)
		if err != nil {
			t.Fatal(err)
		}
		if code := fresp.(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode; offered != (code != kerr.UnsupportedVersion.Code) {
			t.Errorf("transactions %v: FindCoordinator of a transactional id answered %d", offered, code)
		}
	}
}

// TestTransactionAPIs: each API reaches the transactional id's
// coordinator (located with the transaction key type), and its answers
// become Kafka's codes, PRODUCER_FENCED older clients' INVALID_PRODUCER_EPOCH.
func TestTransactionAPIs(t *testing.T) {
	b, coord, gw := newTxnBridge(t, true)
	ctx := context.Background()

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "etl-0", 42, 3
	for _, topic := range []string{"orders", "hidden"} {
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0, 1}
		add.Topics = append(add.Topics, rt)
	}
	resp, err := b.addPartitionsToTxn(ctx, 3, add)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int16{}
	for _, rt := range resp.(*kmsg.AddPartitionsToTxnResponse).Topics {
		for _, rp := range rt.Partitions {
			got[fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)] = rp.ErrorCode
		}
	}
	want := map[string]int16{"orders/0": kerr.OperationNotAttempted.Code, "orders/1": kerr.OperationNotAttempted.Code,
		"hidden/0": kerr.TopicAuthorizationFailed.Code, "hidden/1": kerr.TopicAuthorizationFailed.Code}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("AddPartitionsToTxn %s: code %d, want %d", k, got[k], w)
		}
	}
	if !slices.Contains(gw.kinds, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION) {
		t.Errorf("the gateway was asked key types %v, want the transaction key type", gw.kinds)
	}

	coord.offsetsErr = apierr.New(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED, "producer fenced")
	for version, want := range map[int16]int16{1: kerr.InvalidProducerEpoch.Code, 2: kerr.ProducerFenced.Code} {
		ao := kmsg.NewPtrAddOffsetsToTxnRequest()
		ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = "etl-0", 42, 3, "etl"
		resp, err := b.addOffsetsToTxn(ctx, version, ao)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.(*kmsg.AddOffsetsToTxnResponse).ErrorCode; code != want {
			t.Errorf("AddOffsetsToTxn v%d fenced: code %d, want %d", version, code, want)
		}
	}

	toc := kmsg.NewPtrTxnOffsetCommitRequest()
	toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch = "etl-0", "etl", 42, 3
	toc.MemberID, toc.Generation = "m1", 7
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "input"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 2, 100, 5
	rt.Partitions = append(rt.Partitions, rp)
	toc.Topics = append(toc.Topics, rt)
	if resp, err := b.txnOffsetCommit(ctx, 3, toc); err != nil || resp.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("TxnOffsetCommit: %v %+v", err, resp)
	}
	if len(coord.commits) != 1 || coord.commits[0].GetMemberId() != "m1" || coord.commits[0].GetMemberEpoch() != 7 ||
		coord.commits[0].GetPartitions()[0].GetCommittedOffset() != 100 || coord.commits[0].GetPartitions()[0].GetCommittedLeaderEpoch() != 5 {
		t.Fatalf("TxnOffsetCommit reached the coordinator as %v", coord.commits)
	}

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "etl-0", 42, 3, true
	if resp, err := b.endTxn(ctx, 3, end); err != nil || resp.(*kmsg.EndTxnResponse).ErrorCode != 0 {
		t.Fatalf("EndTxn: %v %+v", err, resp)
	}
	if len(coord.ends) != 1 || !coord.ends[0].GetCommit() || coord.ends[0].GetProducerEpoch() != 3 {
		t.Fatalf("EndTxn reached the coordinator as %v", coord.ends)
	}
}
