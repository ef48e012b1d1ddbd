package kafka

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) metadataAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.Metadata, MinVersion: 0, MaxVersion: 12, Handle: handler(b.metadata)}
}

func (b *Bridge) metadata(ctx context.Context, version int16, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrMetadataResponse()
	// Topics nil (v1+) or empty (v0) asks for every topic; an empty
	// list from v1 on asks for the brokers alone.
	all := req.Topics == nil || (version == 0 && len(req.Topics) == 0)
	var names []string
	for _, t := range req.Topics {
		if t.Topic == nil || *t.Topic == "" {
			names = nil // a topic named by id: ask for all to resolve it
			break
		}
		names = append(names, *t.Topic)
	}
	md, err := b.clusterMetadata(ctx, names)
	if err != nil {
		return nil, err
	}
	bs := brokers(md.GetNodes())
	for _, br := range append(slices.Clip(bs), coordinatorBrokers(md.GetKafkaCoordinators(), bs)...) {
		kb := kmsg.NewMetadataResponseBroker()
		kb.NodeID, kb.Host, kb.Port, kb.Rack = br.id, br.host, br.port, br.rack
		resp.Brokers = append(resp.Brokers, kb)
	}
	cid := md.GetClusterId()
	resp.ClusterID = &cid
	resp.ControllerID = controllerID(bs)
	live := map[int32]bool{}
	for _, br := range bs {
		live[br.id] = true
	}
	found := map[string]*commonv1.TopicMetadata{}
	ids := map[[16]byte]*commonv1.TopicMetadata{}
	for _, t := range md.GetTopics() {
		found[t.GetName()] = t
		ids[topicID(t.GetTopicId())] = t
	}
	add := func(t *commonv1.TopicMetadata) {
		kt := kmsg.NewMetadataResponseTopic()
		name := t.GetName()
		kt.Topic, kt.TopicID, kt.IsInternal = &name, topicID(t.GetTopicId()), t.GetInternal()
		for _, p := range t.GetPartitions() {
			kp := kmsg.NewMetadataResponseTopicPartition()
			kp.Partition, kp.Leader, kp.LeaderEpoch = p.GetPartition(), p.GetLeaderId(), p.GetLeaderEpoch()
			kp.Replicas, kp.ISR, kp.OfflineReplicas = p.GetReplicas(), p.GetIsr(), p.GetOfflineReplicas()
			if kp.Replicas == nil {
				kp.Replicas = []int32{}
			}
			if kp.ISR == nil {
				kp.ISR = []int32{}
			}
			if !live[kp.Leader] {
				kp.ErrorCode, kp.Leader = kerr.LeaderNotAvailable.Code, -1
			}
			kt.Partitions = append(kt.Partitions, kp)
		}
		resp.Topics = append(resp.Topics, kt)
	}
	switch {
	case all:
		for _, t := range md.GetTopics() {
			add(t)
		}
	default:
		for _, rt := range req.Topics {
			var t *commonv1.TopicMetadata
			if rt.Topic != nil && *rt.Topic != "" {
				t = found[*rt.Topic]
			} else {
				t = ids[rt.TopicID]
			}
			if t != nil {
				add(t)
				continue
			}
			kt := kmsg.NewMetadataResponseTopic()
			kt.Topic, kt.TopicID, kt.ErrorCode = rt.Topic, rt.TopicID, kerr.UnknownTopicOrPartition.Code
			switch g := b.cfg.Guard; {
			case rt.Topic == nil || *rt.Topic == "":
				kt.ErrorCode = kerr.UnknownTopicID.Code
			case g != nil && !g.Allowed(ctx, acl.Describe, acl.Topic, *rt.Topic):
				// As Kafka: a named topic the principal may not describe,
				// whether it exists or not.
				kt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case b.cfg.AutoCreateTopics && (version < 4 || req.AllowAutoTopicCreation):
				kt.ErrorCode = b.autoCreateTopic(ctx, *rt.Topic)
			}
			resp.Topics = append(resp.Topics, kt)
		}
	}
	return resp, nil
}

// autoCreateTopic creates topic for a Metadata request, as Kafka does with
// auto.create.topics.enable, with the cluster's default partitions and
// replication, and returns the topic's code in that answer:
// LEADER_NOT_AVAILABLE once it exists (created now, or by a client racing
// this one), so the client asks again when its leaders are elected;
// TOPIC_AUTHORIZATION_FAILED when the principal may not create it (as
// Kafka answers a topic it was not authorized to create); the creation's
// own error otherwise (INVALID_TOPIC_EXCEPTION for a bad name, say).
func (b *Bridge) autoCreateTopic(ctx context.Context, topic string) int16 {
	_, err := b.cfg.Gateway.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{Name: topic}))
	switch code := kafkaCode(err, adminPlane); {
	case err == nil, code == kerr.TopicAlreadyExists.Code:
		b.log.Info("kafka: topic created for a Metadata request (auto.create.topics.enable)", "topic", topic)
		return kerr.LeaderNotAvailable.Code
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		return kerr.TopicAuthorizationFailed.Code
	default:
		return code
	}
}
