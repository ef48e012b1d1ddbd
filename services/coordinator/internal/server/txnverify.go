package server

import (
	"context"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// VerifyTxnPartitions implements CoordinatorService: a partition leader's
// question, before the first transactional batch of a transaction there,
// whether the partition is in the producer's Ongoing transaction (KIP-890
// part 1; Kafka's TransactionCoordinator.handleVerifyPartitionsInTransaction).
// The owner answers from the row read under the id's lock, so the answer
// is never older than a transition this instance made. Only storage
// nodes ask.
//
// Kafka answers CONCURRENT_TRANSACTIONS while the transaction is
// Prepare*; here every state but Ongoing answers INVALID_TXN_STATE: a
// batch written after the decision belongs to no transaction the
// coordinator will end, and the producer's next one begins with
// AddPartitionsToTxn, which waits for the markers itself.
func (c *Coordinator) VerifyTxnPartitions(ctx context.Context, req *connect.Request[coordinatorv1.VerifyTxnPartitionsRequest]) (*connect.Response[coordinatorv1.VerifyTxnPartitionsResponse], error) {
	if _, err := c.guard.RequireService(ctx, tlsconfig.RoleStorage); err != nil {
		return nil, err
	}
	m := req.Msg
	epoch, err := producerArgs(m.GetProducerId(), m.GetProducerEpoch())
	if err != nil {
		return nil, err
	}
	ot, err := c.acquireTxn(ctx, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	cur, ok, err := c.store.LoadTxn(ctx, m.GetTransactionalId())
	ot.mu.Unlock()
	if err != nil {
		return nil, errDatabase(err)
	}
	var all *commonv1.ErrorDetail // the answer of every partition, when the producer is not the row's
	switch {
	case !ok:
		all = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q has no producer", m.GetTransactionalId())
	case cur.ProducerID != m.GetProducerId():
		all = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q belongs to producer id %d, not %d", m.GetTransactionalId(), cur.ProducerID, m.GetProducerId())
	case cur.ProducerEpoch != epoch:
		all = apierr.Detail(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED,
			"producer %d is at epoch %d, not %d", cur.ProducerID, cur.ProducerEpoch, epoch)
	case cur.State != offsetstore.TxnOngoing:
		all = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_TXN_STATE,
			"transactional id %q is %s, not in a transaction", m.GetTransactionalId(), cur.State)
	}
	in := make(map[offsetstore.TxnPartition]bool)
	if all == nil {
		for _, p := range cur.Partitions {
			in[p] = true
		}
	}
	out := &coordinatorv1.VerifyTxnPartitionsResponse{}
	for _, t := range m.GetPartitions() {
		for _, p := range t.GetPartitions() {
			r := &coordinatorv1.TxnPartitionResult{Topic: t.GetTopic(), Partition: p, Error: all}
			if all == nil && !in[offsetstore.TxnPartition{Topic: t.GetTopic(), Partition: p}] {
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_TXN_STATE,
					"partition %s-%d was not added to the transaction", t.GetTopic(), p)
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	return connect.NewResponse(out), nil
}
