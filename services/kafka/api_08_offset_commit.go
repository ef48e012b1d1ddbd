package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) offsetCommitAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.OffsetCommit, MinVersion: 0, MaxVersion: 9, Handle: handler(b.offsetCommit)}
}

func (b *Bridge) offsetCommit(ctx context.Context, version int16, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	creq := &coordinatorv1.OffsetCommitRequest{GroupId: req.Group, MemberEpoch: -1}
	var code int16
	kip848 := false // a KIP-848 member's commit (consumergroup.go)
	if req.MemberID != "" || req.Generation >= 0 {
		// A group member's commit, checked by the coordinator: a classic
		// member's against its group's generation, a KIP-848 member's
		// (whose generation is its member epoch) against its epoch. A
		// standalone one (no member, generation -1) is not checked.
		creq.MemberId, creq.MemberEpoch = req.MemberID, req.Generation
		switch {
		case b.consumers.get(req.Group, req.MemberID) != nil && version < 9:
			// As Kafka: KIP-848 members commit with version 9 or above.
			code = kerr.UnsupportedVersion.Code
		case version >= 9:
			kip848 = true
		}
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			cp := &coordinatorv1.OffsetCommitPartition{Topic: t.Topic, Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: p.LeaderEpoch}
			if version < 6 {
				cp.CommittedLeaderEpoch = -1
			}
			if p.Metadata != nil {
				cp.Metadata = *p.Metadata
			}
			creq.Partitions = append(creq.Partitions, cp)
		}
	}
	var results []*coordinatorv1.OffsetCommitPartitionResult
	if code == 0 && len(creq.Partitions) > 0 {
		c, err := b.coordinator(ctx, req.Group)
		if err == nil {
			var out *connect.Response[coordinatorv1.OffsetCommitResponse]
			out, err = c.OffsetCommit(ctx, connect.NewRequest(creq))
			if err == nil {
				results = out.Msg.GetPartitions()
			}
			if err == nil && len(results) != len(creq.Partitions) {
				err = connect.NewError(connect.CodeInternal, nil)
			}
		}
		if err != nil {
			code = classicCode(err) // classicgroup.go
			if kip848 && code == kerr.FencedMemberEpoch.Code {
				// As Kafka answers from OffsetCommit v9: an epoch that is
				// not the member's is STALE_MEMBER_EPOCH, after which the
				// member retries with its newer epoch the partitions it
				// still owns.
				code = kerr.StaleMemberEpoch.Code
			} else if code == kerr.FencedMemberEpoch.Code || code == kerr.StaleMemberEpoch.Code {
				code = kerr.UnknownMemberID.Code // a KIP-848 member committing below v9
			}
		}
	}
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == 0 {
				if rp.ErrorCode = detailCode(results[i].GetError(), groupPlane, nil); rp.ErrorCode == kerr.FencedMemberEpoch.Code || rp.ErrorCode == kerr.StaleMemberEpoch.Code {
					rp.ErrorCode = kerr.IllegalGeneration.Code
					if kip848 {
						rp.ErrorCode = kerr.StaleMemberEpoch.Code
					}
				}
			}
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
