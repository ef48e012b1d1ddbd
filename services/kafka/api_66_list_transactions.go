package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// ListTransactions (66), v0: the transactional ids, optionally only those
// in the given states or of the given producer ids (KIP-664;
// kafka-transactions.sh list, kadm's ListTransactions). It goes to a
// coordinator through the gateway in the caller's name.
//
//   - Every listener lists every id: a Kafka broker lists those it
//     coordinates, and admin clients ask every broker and put the answers
//     together, which here repeats each id per broker asked (kadm merges
//     them by id; docs/kafka.md).
//   - A state filter Kafka does not know is answered in
//     UnknownStateFilters and matches nothing, as in Kafka.
//   - ACL: only the ids the caller may describe are listed.
//   - v1's duration filter (KIP-994) and v2's id pattern are not offered.
func (b *Bridge) listTransactionsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ListTransactions, MinVersion: 0, MaxVersion: 0, Hidden: !b.cfg.Transactions, Handle: handler(b.listTransactions)}
}

func (b *Bridge) listTransactions(ctx context.Context, version int16, req *kmsg.ListTransactionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrListTransactionsResponse()
	greq := &gatewayv1.ListTransactionsRequest{ProducerIds: req.ProducerIDFilters}
	for _, name := range req.StateFilters {
		found := false
		for s, n := range kafkaTxnStates {
			if n == name {
				greq.States, found = append(greq.States, s), true
			}
		}
		if !found {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
	}
	if len(req.StateFilters) > 0 && len(greq.States) == 0 {
		return resp, nil // only states no transaction can be in
	}
	out, err := b.cfg.Gateway.ListTransactions(ctx, connect.NewRequest(greq))
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		return resp, nil
	}
	for _, l := range out.Msg.GetTransactions() {
		s := kmsg.NewListTransactionsResponseTransactionState()
		s.TransactionalID, s.ProducerID, s.TransactionState = l.GetTransactionalId(), l.GetProducerId(), kafkaTxnState(l.GetState())
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return resp, nil
}
