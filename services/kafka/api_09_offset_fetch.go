package kafka

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) offsetFetchAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.OffsetFetch, MinVersion: 0, MaxVersion: 9, Handle: handler(b.offsetFetch)}
}

func (b *Bridge) offsetFetch(ctx context.Context, version int16, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	if version >= 8 {
		return b.offsetFetchGroups(ctx, req)
	}
	resp := kmsg.NewPtrOffsetFetchResponse()
	creq := &coordinatorv1.OffsetFetchRequest{GroupId: req.Group, RequireStable: version >= 7 && req.RequireStable}
	for _, t := range req.Topics {
		creq.Topics = append(creq.Topics, &commonv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.OffsetFetchResponse]
	if err == nil {
		out, err = c.OffsetFetch(ctx, connect.NewRequest(creq))
	}
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		if resp.ErrorCode == kerr.GroupIDNotFound.Code {
			// A group that never committed has no offsets, not an error.
			resp.ErrorCode = 0
		} else if version < 2 {
			// No top-level code before v2: the error goes in each
			// partition asked for.
			if r := kafkawire.ErrorResponseFor(version, req, resp.ErrorCode); r != nil {
				return r, nil
			}
			return nil, err
		} else {
			return resp, nil
		}
	}
	var offsets []*coordinatorv1.CommittedOffset
	if err == nil {
		offsets = out.Msg.GetOffsets()
	}
	byTopic := map[string]int{}
	for _, o := range offsets {
		i, ok := byTopic[o.GetTopic()]
		if !ok {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = o.GetTopic()
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			byTopic[o.GetTopic()] = i
		}
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		md := o.GetMetadata()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = o.GetPartition(), o.GetCommittedOffset(), o.GetCommittedLeaderEpoch(), &md
		rp.ErrorCode = detailCode(o.GetError(), groupPlane, nil) // UNSTABLE_OFFSET_COMMIT (require_stable)
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	// Named partitions the coordinator did not answer have no offset.
	for _, t := range req.Topics {
		i, ok := byTopic[t.Topic]
		if !ok {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			byTopic[t.Topic] = i
		}
		for _, p := range t.Partitions {
			if !slices.ContainsFunc(resp.Topics[i].Partitions, func(rp kmsg.OffsetFetchResponseTopicPartition) bool { return rp.Partition == p }) {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset = p, -1
				resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
			}
		}
	}
	return resp, nil
}

// offsetFetchGroups answers OffsetFetch v8 and v9 (KIP-709): several
// groups in one request, each fetched as a v7 request for one group is
// (each from its own coordinator, whichever listener is asked) and
// answered in its own entry with its own error code. v9's member id and
// epoch (KIP-848) are not checked: a fetch changes nothing, and commits
// are fenced.
func (b *Bridge) offsetFetchGroups(ctx context.Context, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetFetchResponse()
	for _, g := range req.Groups {
		one := kmsg.NewPtrOffsetFetchRequest()
		one.Group, one.RequireStable = g.Group, req.RequireStable
		if g.Topics != nil {
			one.Topics = []kmsg.OffsetFetchRequestTopic{}
		}
		for _, t := range g.Topics {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = t.Topic, t.Partitions
			one.Topics = append(one.Topics, rt)
		}
		r, err := b.offsetFetch(ctx, 7, one)
		if err != nil {
			return nil, err
		}
		v7 := r.(*kmsg.OffsetFetchResponse)
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, v7.ErrorCode
		for _, t := range v7.Topics {
			gt := kmsg.NewOffsetFetchResponseGroupTopic()
			gt.Topic = t.Topic
			for _, p := range t.Partitions {
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				gt.Partitions = append(gt.Partitions, gp)
			}
			rg.Topics = append(rg.Topics, gt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
