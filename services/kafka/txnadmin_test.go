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
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// txnGateway answers the transaction listings from fixed rows and
// remembers the last listing's filter.
type txnGateway struct {
	downGateway
	listed *gatewayv1.ListTransactionsRequest
}

func (g *txnGateway) ListTransactions(_ context.Context, req *connect.Request[gatewayv1.ListTransactionsRequest]) (*connect.Response[gatewayv1.ListTransactionsResponse], error) {
	g.listed = req.Msg
	return connect.NewResponse(&gatewayv1.ListTransactionsResponse{Transactions: []*coordinatorv1.TransactionListing{
		{TransactionalId: "etl-1", ProducerId: 7, State: coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING},
	}}), nil
}

func (g *txnGateway) DescribeTransactions(_ context.Context, req *connect.Request[gatewayv1.DescribeTransactionsRequest]) (*connect.Response[gatewayv1.DescribeTransactionsResponse], error) {
	out := &gatewayv1.DescribeTransactionsResponse{}
	for _, id := range req.Msg.GetTransactionalIds() {
		d := &coordinatorv1.TransactionDescription{TransactionalId: id}
		switch id {
		case "etl-1":
			d.State, d.ProducerId, d.ProducerEpoch, d.TransactionTimeoutMs, d.TransactionStartTimeMs = coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT, 7, 3, 60000, 1234
			d.Partitions = []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 2}}}
		case "secret":
			d.Error = apierr.Detail(connect.CodePermissionDenied, commonv1.Reason_REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "permission denied")
		default:
			d.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_TRANSACTIONAL_ID_NOT_FOUND, "no such id")
		}
		out.Transactions = append(out.Transactions, d)
	}
	return connect.NewResponse(out), nil
}

// DescribeTransactions and ListTransactions speak Kafka's state names and
// error codes over the coordinator's answers; a state filter Kafka does
// not know comes back in UnknownStateFilters and matches nothing.
func TestTransactionListings(t *testing.T) {
	gw := &txnGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Transactions: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	dreq := kmsg.NewPtrDescribeTransactionsRequest()
	dreq.TransactionalIDs = []string{"etl-1", "secret", "gone"}
	resp, err := b.describeTransactions(ctx, 0, dreq)
	if err != nil {
		t.Fatal(err)
	}
	states := decoded(t, resp, 0).(*kmsg.DescribeTransactionsResponse).TransactionStates
	if len(states) != 3 {
		t.Fatalf("%d states, want 3", len(states))
	}
	s := states[0]
	if s.ErrorCode != 0 || s.State != "PrepareCommit" || s.ProducerID != 7 || s.ProducerEpoch != 3 || s.TimeoutMillis != 60000 || s.StartTimestamp != 1234 ||
		len(s.Topics) != 1 || s.Topics[0].Topic != "orders" || !slices.Equal(s.Topics[0].Partitions, []int32{0, 2}) {
		t.Errorf("etl-1: %+v", s)
	}
	if states[1].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code || states[2].ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Errorf("secret %d, gone %d", states[1].ErrorCode, states[2].ErrorCode)
	}

	lreq := kmsg.NewPtrListTransactionsRequest()
	lreq.StateFilters, lreq.ProducerIDFilters = []string{"Ongoing", "Sleeping"}, []int64{7}
	resp, err = b.listTransactions(ctx, 0, lreq)
	if err != nil {
		t.Fatal(err)
	}
	l := decoded(t, resp, 0).(*kmsg.ListTransactionsResponse)
	if l.ErrorCode != 0 || !slices.Equal(l.UnknownStateFilters, []string{"Sleeping"}) || len(l.TransactionStates) != 1 ||
		l.TransactionStates[0].TransactionalID != "etl-1" || l.TransactionStates[0].TransactionState != "Ongoing" || l.TransactionStates[0].ProducerID != 7 {
		t.Errorf("list: %+v", l)
	}
	if !slices.Equal(gw.listed.GetStates(), []coordinatorv1.TransactionState{coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING}) || !slices.Equal(gw.listed.GetProducerIds(), []int64{7}) {
		t.Errorf("asked the coordinators for %v", gw.listed)
	}

	gw.listed = nil
	lreq.StateFilters = []string{"Sleeping"}
	resp, err = b.listTransactions(ctx, 0, lreq)
	if err != nil {
		t.Fatal(err)
	}
	if l := decoded(t, resp, 0).(*kmsg.ListTransactionsResponse); len(l.TransactionStates) != 0 || gw.listed != nil {
		t.Errorf("only an unknown state: %+v (asked %v)", l, gw.listed)
	}
}
