package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// AddOffsetsToTxn (25) adds a group to the producer's transaction, whose
// offsets it will commit (TxnOffsetCommit), on the coordinator that owns
// the transactional id (txn.go). Versions 0–3; the coordinator checks read
// on the group (GROUP_AUTHORIZATION_FAILED); PRODUCER_FENCED from v2,
// INVALID_PRODUCER_EPOCH before.
func (b *Bridge) addOffsetsToTxnAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.AddOffsetsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: !b.cfg.Transactions, Handle: handler(b.addOffsetsToTxn)}
}

func (b *Bridge) addOffsetsToTxn(ctx context.Context, version int16, req *kmsg.AddOffsetsToTxnRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAddOffsetsToTxnResponse()
	c, err := b.txnCoordinator(ctx, req.TransactionalID)
	if err == nil {
		_, err = c.AddOffsetsToTxn(ctx, connect.NewRequest(&coordinatorv1.AddOffsetsToTxnRequest{
			TransactionalId: req.TransactionalID, ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), GroupId: req.Group,
		}))
	}
	resp.ErrorCode = fencedCode(kafkaCode(err, groupPlane), version, 2)
	return resp, nil
}
