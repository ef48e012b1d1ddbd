package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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
// Transactional ids are refused: Strata has no transactions yet.
func (b *Bridge) initProducerID(ctx context.Context, version int16, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
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
