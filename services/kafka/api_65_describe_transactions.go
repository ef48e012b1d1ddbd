package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DescribeTransactions (65), v0: each transactional id's state, producer
// id and epoch, timeout, start and partitions (KIP-664;
// kafka-transactions.sh describe, kadm's DescribeTransactions). It goes to
// a coordinator through the gateway in the caller's name, which answers
// from the offsets database.
//
//   - Any listener answers for any id, not only the id's coordinator's:
//     the state is one database (docs/kafka.md).
//   - ACL: describe on each id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
//     that id); partitions of topics the caller may not describe are left
//     out, as Kafka leaves them. An unknown id is
//     TRANSACTIONAL_ID_NOT_FOUND.
//   - Offered with the other transaction APIs (Config.Transactions).
func (b *Bridge) describeTransactionsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeTransactions, MinVersion: 0, MaxVersion: 0, Hidden: !b.cfg.Transactions, Handle: handler(b.describeTransactions)}
}

func (b *Bridge) describeTransactions(ctx context.Context, version int16, req *kmsg.DescribeTransactionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeTransactionsResponse()
	if len(req.TransactionalIDs) == 0 {
		return resp, nil
	}
	out, err := b.cfg.Gateway.DescribeTransactions(ctx, connect.NewRequest(&gatewayv1.DescribeTransactionsRequest{TransactionalIds: req.TransactionalIDs}))
	var got []*coordinatorv1.TransactionDescription
	if err == nil {
		got = out.Msg.GetTransactions()
	}
	for i, id := range req.TransactionalIDs {
		s := kmsg.NewDescribeTransactionsResponseTransactionState()
		s.TransactionalID, s.ProducerID, s.ProducerEpoch, s.StartTimestamp = id, -1, -1, -1
		switch {
		case err != nil:
			s.ErrorCode = kafkaCode(err, groupPlane)
		case i >= len(got) || got[i].GetTransactionalId() != id:
			s.ErrorCode = kerr.UnknownServerError.Code // the coordinator answered another list
		case got[i].GetError() != nil:
			s.ErrorCode = detailCode(got[i].GetError(), groupPlane, nil)
		default:
			d := got[i]
			s.State, s.TimeoutMillis, s.StartTimestamp = kafkaTxnState(d.GetState()), d.GetTransactionTimeoutMs(), d.GetTransactionStartTimeMs()
			s.ProducerID, s.ProducerEpoch = d.GetProducerId(), int16(d.GetProducerEpoch())
			for _, tp := range d.GetPartitions() {
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic, t.Partitions = tp.GetTopic(), tp.GetPartitions()
				s.Topics = append(s.Topics, t)
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return resp, nil
}

// kafkaTxnStates are Kafka's names of the transaction states
// (TransactionState.stateName), as DescribeTransactions and
// ListTransactions carry them.
var kafkaTxnStates = map[coordinatorv1.TransactionState]string{
	coordinatorv1.TransactionState_TRANSACTION_STATE_EMPTY:           "Empty",
	coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING:         "Ongoing",
	coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT:  "PrepareCommit",
	coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT:   "PrepareAbort",
	coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT: "CompleteCommit",
	coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT:  "CompleteAbort",
}

func kafkaTxnState(s coordinatorv1.TransactionState) string {
	if n, ok := kafkaTxnStates[s]; ok {
		return n
	}
	return "Unknown"
}
