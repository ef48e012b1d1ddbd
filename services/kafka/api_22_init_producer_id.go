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

func (b *Bridge) initProducerIDAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.InitProducerID, MinVersion: 0, MaxVersion: 4, Handle: handler(b.initProducerID)}
}

// initProducerID gives an idempotent producer a new id from the gateway's
// producer-id blocks. A producer that asks to bump the epoch of the id it
// has (KIP-360) gets a new id instead, which serves the same purpose: its
// earlier batches can no longer be confused with its next ones.
// With a transactional id, the coordinator that owns it gives the producer
// its id and epoch, fencing any earlier producer of the id and ending its
// open transaction (txn.go); PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH
// before. Without Config.Transactions a transactional id is refused
// UNSUPPORTED_VERSION.
func (b *Bridge) initProducerID(ctx context.Context, version int16, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		if !b.cfg.Transactions {
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			return resp, nil
		}
		creq := &coordinatorv1.InitTransactionalProducerRequest{TransactionalId: *req.TransactionalID,
			TransactionTimeoutMs: req.TransactionTimeoutMillis, ProducerId: -1, ProducerEpoch: -1}
		if version >= 3 {
			creq.ProducerId, creq.ProducerEpoch = req.ProducerID, int32(req.ProducerEpoch)
		}
		c, err := b.txnCoordinator(ctx, *req.TransactionalID)
		var out *connect.Response[coordinatorv1.InitTransactionalProducerResponse]
		if err == nil {
			out, err = c.InitTransactionalProducer(ctx, connect.NewRequest(creq))
		}
		if err != nil {
			resp.ErrorCode = fencedCode(kafkaCode(err, groupPlane), version, 4)
			return resp, nil
		}
		resp.ProducerID, resp.ProducerEpoch = out.Msg.GetProducerId(), int16(out.Msg.GetProducerEpoch())
		return resp, nil
	}
	out, err := b.cfg.Gateway.InitProducerId(ctx, connect.NewRequest(&gatewayv1.InitProducerIdRequest{}))
	if err != nil {
		resp.ErrorCode = kafkaCode(err, adminPlane)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = out.Msg.GetProducerId(), int16(out.Msg.GetProducerEpoch())
	return resp, nil
}
