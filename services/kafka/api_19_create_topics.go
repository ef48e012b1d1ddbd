package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) createTopicsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.CreateTopics, MinVersion: 0, MaxVersion: 7, Handle: handler(b.createTopics)}
}

func (b *Bridge) createTopics(ctx context.Context, version int16, req *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreateTopicsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		if len(t.ReplicaAssignment) > 0 {
			rt.ErrorCode = kerr.InvalidReplicaAssignment.Code
			msg := "explicit replica assignments are not supported; Strata places replicas itself"
			rt.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		creq := &gatewayv1.CreateTopicRequest{Name: t.Topic, ValidateOnly: req.ValidateOnly, Configs: map[string]string{}}
		if t.NumPartitions > 0 {
			creq.Partitions = t.NumPartitions
		}
		if t.ReplicationFactor > 0 {
			creq.ReplicationFactor = int32(t.ReplicationFactor)
		}
		for _, c := range t.Configs {
			if c.Value != nil {
				creq.Configs[c.Name] = *c.Value
			}
		}
		out, err := b.cfg.Gateway.CreateTopic(ctx, connect.NewRequest(creq))
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = kafkaCode(err, adminPlane), message(err)
			if rt.ErrorCode == kerr.InvalidRequest.Code {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		d := out.Msg.GetTopic()
		rt.TopicID = topicID(d.GetTopicId())
		rt.NumPartitions, rt.ReplicationFactor = int32(len(d.GetPartitions())), int16(d.GetReplicationFactor())
		for _, c := range d.GetConfigs() {
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			v := c.GetValue()
			rc.Name, rc.Value, rc.Source = c.GetKey(), &v, int8(configSource(c.GetSource()))
			rt.Configs = append(rt.Configs, rc)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
