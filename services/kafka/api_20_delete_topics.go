package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) deleteTopicsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DeleteTopics, MinVersion: 0, MaxVersion: 6, Handle: handler(b.deleteTopics)}
}

func (b *Bridge) deleteTopics(ctx context.Context, version int16, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrDeleteTopicsResponse()
	topics := req.Topics
	for _, name := range req.TopicNames {
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = &name
		topics = append(topics, t)
	}
	for _, t := range topics {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		dreq := &gatewayv1.DeleteTopicRequest{}
		if t.Topic != nil {
			dreq.Name = *t.Topic
		}
		if t.TopicID != ([16]byte{}) {
			name, id, ok := b.topicByID(ctx, t.TopicID)
			if !ok {
				rt.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, rt)
				continue
			}
			dreq.Name, dreq.TopicId = name, id
			rt.Topic = &name
		}
		if _, err := b.cfg.Gateway.DeleteTopic(ctx, connect.NewRequest(dreq)); err != nil {
			rt.ErrorCode, rt.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// topicByID finds a topic's name and id text by its Kafka topic id.
func (b *Bridge) topicByID(ctx context.Context, id [16]byte) (string, string, bool) {
	md, err := b.clusterMetadata(ctx, nil)
	if err != nil {
		return "", "", false
	}
	for _, t := range md.GetTopics() {
		if topicID(t.GetTopicId()) == id {
			return t.GetName(), t.GetTopicId(), true
		}
	}
	return "", "", false
}
