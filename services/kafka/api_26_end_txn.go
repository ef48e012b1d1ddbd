package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// EndTxn (26) commits or aborts the producer's transaction on the
// coordinator that owns the transactional id (txn.go). It is answered once
// the decision is durable; the markers follow. Versions 0–3 (v4 and v5
// are KIP-890 part 2's epoch bump per transaction, not offered);
// PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
func (b *Bridge) endTxnAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.EndTxn, MinVersion: 0, MaxVersion: 3, Hidden: !b.cfg.Transactions, Handle: handler(b.endTxn)}
}

func (b *Bridge) endTxn(ctx context.Context, version int16, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrEndTxnResponse()
	c, err := b.txnCoordinator(ctx, req.TransactionalID)
	if err == nil {
		_, err = c.EndTxn(ctx, connect.NewRequest(&coordinatorv1.EndTxnRequest{
			TransactionalId: req.TransactionalID, ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), Commit: req.Commit,
		}))
	}
	resp.ErrorCode = fencedCode(kafkaCode(err, groupPlane), version, 2)
	return resp, nil
}
