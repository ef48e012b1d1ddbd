package kafka

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// OffsetDelete (47), v0: a group's committed offsets for the named
// partitions deleted by its coordinator (KIP-496; AdminClient's
// deleteConsumerGroupOffsets, kafka-consumer-groups.sh --delete-offsets).
//
//   - An empty group loses every named offset; a group with live members
//     keeps those of the topics they subscribe to, each answered
//     GROUP_SUBSCRIBED_TO_TOPIC, and loses the rest. A classic group of
//     another protocol type than consumer with live members answers
//     NON_EMPTY_GROUP, an unknown group GROUP_ID_NOT_FOUND.
//   - ACL, checked by the coordinator: delete on the group
//     (GROUP_AUTHORIZATION_FAILED), and read on each topic: a partition
//     of a topic the principal may not read is TOPIC_AUTHORIZATION_FAILED.
func (b *Bridge) offsetDeleteAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.OffsetDelete, MinVersion: 0, MaxVersion: 0, Handle: handler(b.offsetDelete)}
}

func (b *Bridge) offsetDelete(ctx context.Context, version int16, req *kmsg.OffsetDeleteRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	creq := &coordinatorv1.OffsetDeleteRequest{GroupId: req.Group}
	for _, t := range req.Topics {
		tp := &commonv1.TopicPartitions{Topic: t.Topic}
		for _, p := range t.Partitions {
			tp.Partitions = append(tp.Partitions, p.Partition)
		}
		creq.Topics = append(creq.Topics, tp)
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.OffsetDeleteResponse]
	if err == nil {
		out, err = c.OffsetDelete(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		return resp, nil
	}
	results := map[[2]any]*coordinatorv1.OffsetDeleteResult{}
	for _, r := range out.Msg.GetPartitions() {
		results[[2]any{r.GetTopic(), r.GetPartition()}] = r
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch r, ok := results[[2]any{t.Topic, p.Partition}]; {
			case !ok:
				rp.ErrorCode = kafkaCode(errors.New("the coordinator did not answer the partition"), groupPlane)
			default:
				rp.ErrorCode = detailCode(r.GetError(), dataPlane, nil)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
