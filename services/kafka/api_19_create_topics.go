package kafka

import (
	"context"
	"time"

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
	created := map[string]string{} // name to topic id
	defer func() { b.awaitTopicsInView(ctx, created) }()
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
		if !req.ValidateOnly {
			created[t.Topic] = d.GetTopicId()
		}
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

// viewPoll is how often awaitTopicsInView looks at the view again.
const viewPoll = 5 * time.Millisecond

// awaitTopicsInView returns once the listener's own metadata view (which
// answers its Metadata) holds every created topic under its id, or ctx
// ends (the request's timeout): a client that creates topics and then
// asks this listener for their metadata finds them, rather than
// UNKNOWN_TOPIC_OR_PARTITION while the view catches up with the
// controller (kafkajs's createTopics with waitForLeaders retries only
// LEADER_NOT_AVAILABLE). A listener without a view asks the gateway,
// which the controller answered first.
func (b *Bridge) awaitTopicsInView(ctx context.Context, created map[string]string) {
	if b.cfg.View == nil || len(created) == 0 {
		return
	}
	t := time.NewTicker(viewPoll)
	defer t.Stop()
	for {
		v := b.cfg.View()
		if v == nil || v.Version == 0 {
			return // not following the controllers yet: Metadata asks the gateway
		}
		missing := false
		for name, id := range created {
			if tm := v.Topics[name]; tm == nil || tm.GetTopicId() != id {
				missing = true
				break
			}
		}
		if !missing {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
