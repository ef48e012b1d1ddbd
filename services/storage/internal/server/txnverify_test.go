package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/serve"
)

// verifyingCoordinator is a transaction coordinator that owns every
// transactional id and has the partitions in added in the transaction of
// producer 21 at epoch 0.
type verifyingCoordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	url   string
	mu    sync.Mutex
	added map[string]bool // "topic/partition"
	asked []string        // the transactional ids verified
}

func (c *verifyingCoordinator) LocateGroup(_ context.Context, req *connect.Request[coordinatorv1.LocateGroupRequest]) (*connect.Response[coordinatorv1.LocateGroupResponse], error) {
	if req.Msg.GetKeyType() != coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		return nil, connect.NewError(connect.CodeInvalidArgument, nil)
	}
	return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: "c1", Address: c.url, ListenerResolved: true}), nil
}

func (c *verifyingCoordinator) VerifyTxnPartitions(_ context.Context, req *connect.Request[coordinatorv1.VerifyTxnPartitionsRequest]) (*connect.Response[coordinatorv1.VerifyTxnPartitionsResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := req.Msg
	c.asked = append(c.asked, m.GetTransactionalId())
	out := &coordinatorv1.VerifyTxnPartitionsResponse{}
	for _, t := range m.GetPartitions() {
		for _, p := range t.GetPartitions() {
			r := &coordinatorv1.TxnPartitionResult{Topic: t.GetTopic(), Partition: p}
			switch {
			case m.GetProducerId() != 21:
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING, "another producer")
			case m.GetProducerEpoch() != 0:
				r.Error = apierr.Detail(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED, "fenced")
			case !c.added[fmt.Sprintf("%s/%d", t.GetTopic(), p)]:
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_TXN_STATE, "not added")
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	return connect.NewResponse(out), nil
}

// setCoordinators puts registrations at urls into the node's metadata
// view, as the controller's registry would.
func setCoordinators(n *Node, urls ...string) {
	reg := &controllerv1.CoordinatorRegistry{}
	for i, u := range urls {
		reg.Coordinators = append(reg.Coordinators, &controllerv1.CoordinatorRegistration{CoordinatorId: string(rune('a' + i)), Address: u})
	}
	n.mu.Lock()
	v := *n.view
	v.Coordinators = reg
	n.view = &v
	n.mu.Unlock()
}

// A transactional produce is appended once the transactional id's
// coordinator, found through the coordinators the metadata view lists,
// says the partition is in the producer's transaction; refused with
// INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH or
// INVALID_PRODUCER_ID_MAPPING when it says no, and retriably
// (NOT_ENOUGH_REPLICAS, UNAVAILABLE) when no coordinator answers; a
// refused batch leaves the log as it was.
func TestTxnProduceVerifiedByTheCoordinator(t *testing.T) {
	c := newCluster(t, 1, time.Hour)
	c.createTopic("tv", 1, 1)
	c.createTopic("tw", 1, 1)
	coord := &verifyingCoordinator{added: map[string]bool{"tv/0": true}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(coord))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.StartServer(ln, mux) // h2c, as the node's client speaks
	defer srv.Close()
	coord.url = srv.URL()
	n := c.node(1).node
	s := c.handler(1)
	ctx := context.Background()
	produce := func(txnID, topic string, records []byte) (*storagev1.ProduceResponse, error) {
		resp, err := s.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{Topic: topic, Acks: commonv1.Acks_ACKS_ALL,
			LeaderEpoch: -1, Records: records, TimeoutMs: 10_000, TransactionalId: txnID}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	leo := func(topic string) int64 { return n.replica(topic, 0).Log().LogEndOffset() }
	wantRefused := func(what string, err error, code connect.Code, reason commonv1.Reason, topic string) {
		t.Helper()
		if connect.CodeOf(err) != code || apierr.ReasonOf(err) != reason {
			t.Errorf("%s: %v; want %s %s", what, err, code, reason)
		}
		if leo(topic) != 0 {
			t.Errorf("%s: log end %d, want 0 (nothing appended)", what, leo(topic))
		}
	}

	// No coordinator registered: retriable, nothing appended.
	setCoordinators(n)
	_, err = produce("app", "tv", txnRecords(t, 21, 0, "a"))
	wantRefused("no coordinator", err, connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS, "tv")
	// One registered that is down, then the live one: the second is asked.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	setCoordinators(n, dead.URL)
	_, err = produce("app", "tv", txnRecords(t, 21, 0, "a"))
	wantRefused("coordinator down", err, connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS, "tv")
	setCoordinators(n, dead.URL, srv.URL())

	_, err = produce("app", "tw", txnRecords(t, 21, 0, "a"))
	wantRefused("partition not added", err, connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_TXN_STATE, "tw")
	_, err = produce("app", "tv", txnRecords(t, 22, 0, "a"))
	wantRefused("another producer id", err, connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING, "tv")
	_, err = produce("", "tv", txnRecords(t, 21, 0, "a"))
	wantRefused("no transactional id", err, connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_RECORD, "tv")

	for seq := int32(0); seq < 3; seq++ {
		if res, err := produce("app", "tv", txnRecords(t, 21, seq, "v")); err != nil || res.GetBaseOffset() != int64(seq) {
			t.Fatalf("added, sequence %d: %v %v", seq, res, err)
		}
	}
	coord.mu.Lock()
	asked := len(coord.asked)
	coord.mu.Unlock()
	if asked != 3 { // topic tw, producer 22, and the first batch
		t.Fatalf("coordinator asked %d times, want 3: the transaction's later batches are not asked about", asked)
	}
	if lso := n.replica("tv", 0).Log().LastStableOffset(); lso != 0 {
		t.Fatalf("lso %d with the transaction open, want 0", lso)
	}
}
