package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) createPartitionsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.CreatePartitions, MinVersion: 0, MaxVersion: 3, Handle: handler(b.createPartitions)}
}

func (b *Bridge) createPartitions(ctx context.Context, version int16, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		if len(t.Assignment) > 0 {
			rt.ErrorCode = kerr.InvalidReplicaAssignment.Code
			msg := "explicit replica assignments are not supported; Strata places replicas itself"
			rt.ErrorMessage = &msg
		} else if _, err := b.cfg.Gateway.CreatePartitions(ctx, connect.NewRequest(&gatewayv1.CreatePartitionsRequest{
			Topic: t.Topic, Total: t.Count, ValidateOnly: req.ValidateOnly,
		})); err != nil {
			rt.ErrorCode, rt.ErrorMessage = kafkaCode(err, adminPlane), message(err)
			if rt.ErrorCode == kerr.InvalidRequest.Code {
				rt.ErrorCode = kerr.InvalidPartitions.Code
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
