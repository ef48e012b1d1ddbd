package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// withTimeout bounds an admin call by the request's timeout, or
// adminTimeout when it has none.
func withTimeout(ctx context.Context, ms int32) (context.Context, context.CancelFunc) {
	d := adminTimeout
	if ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
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

// configSource maps Strata's config source to Kafka's.
func configSource(s controllerv1.ConfigSource) kmsg.ConfigSource {
	if s == controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC {
		return kmsg.ConfigSourceDynamicTopicConfig
	}
	return kmsg.ConfigSourceDefaultConfig
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

// describeConfigs answers topic resources from the controller's topic
// description (every key, with whether the topic overrides it) and broker
// resources with an empty list: Strata has no per-broker configs a Kafka
// client could act on.
func (b *Bridge) describeConfigs(ctx context.Context, version int16, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			out, err := b.cfg.Gateway.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{r.ResourceName}}))
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = kafkaCode(err, adminPlane), message(err)
				break
			}
			for _, t := range out.Msg.GetTopics() {
				for _, c := range t.GetConfigs() {
					if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, c.GetKey()) {
						continue
					}
					rc := kmsg.NewDescribeConfigsResponseResourceConfig()
					v := c.GetValue()
					rc.Name, rc.Value = c.GetKey(), &v
					rc.Source = configSource(c.GetSource())
					rc.IsDefault = rc.Source == kmsg.ConfigSourceDefaultConfig
					rr.Configs = append(rr.Configs, rc)
				}
			}
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("config resource type %v is not supported", r.ResourceType)
			rr.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// alterTopic applies set and delete to one topic's config, or refuses a
// resource that is not a topic.
func (b *Bridge) alterTopic(ctx context.Context, typ kmsg.ConfigResourceType, name string, set map[string]string, del []string, validateOnly bool) (int16, *string) {
	if typ != kmsg.ConfigResourceTypeTopic {
		msg := "only topic configs can be altered"
		return kerr.InvalidRequest.Code, &msg
	}
	_, err := b.cfg.Gateway.AlterTopicConfig(ctx, connect.NewRequest(&gatewayv1.AlterTopicConfigRequest{
		Name: name, SetConfigs: set, DeleteConfigs: del, ValidateOnly: validateOnly,
	}))
	if err != nil {
		code := kafkaCode(err, adminPlane)
		if code == kerr.InvalidRequest.Code {
			code = kerr.InvalidConfig.Code
		}
		return code, message(err)
	}
	return 0, nil
}

func (b *Bridge) incrementalAlterConfigs(ctx context.Context, version int16, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		set, del := map[string]string{}, []string{}
		for _, c := range r.Configs {
			switch c.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if c.Value != nil {
					set[c.Name] = *c.Value
				}
			case kmsg.IncrementalAlterConfigOpDelete:
				del = append(del, c.Name)
			default:
				// APPEND and SUBTRACT are for list-valued configs; no
				// topic config of Strata's is a list.
				rr.ErrorCode = kerr.InvalidConfig.Code
			}
		}
		if rr.ErrorCode == 0 {
			rr.ErrorCode, rr.ErrorMessage = b.alterTopic(ctx, r.ResourceType, r.ResourceName, set, del, req.ValidateOnly)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// alterConfigs replaces a topic's overrides with the given set, as
// Kafka's (non-incremental) AlterConfigs does: overrides not named are
// deleted.
func (b *Bridge) alterConfigs(ctx context.Context, version int16, req *kmsg.AlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		set := map[string]string{}
		for _, c := range r.Configs {
			if c.Value != nil {
				set[c.Name] = *c.Value
			}
		}
		var del []string
		if r.ResourceType == kmsg.ConfigResourceTypeTopic {
			out, err := b.cfg.Gateway.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{r.ResourceName}}))
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = kafkaCode(err, adminPlane), message(err)
				resp.Resources = append(resp.Resources, rr)
				continue
			}
			for _, t := range out.Msg.GetTopics() {
				for _, c := range t.GetConfigs() {
					if _, ok := set[c.GetKey()]; !ok && c.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC {
						del = append(del, c.GetKey())
					}
				}
			}
		}
		rr.ErrorCode, rr.ErrorMessage = b.alterTopic(ctx, r.ResourceType, r.ResourceName, set, del, req.ValidateOnly)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
