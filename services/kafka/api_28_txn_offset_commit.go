package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// TxnOffsetCommit (28) stages a consumer group's offsets in the producer's
// transaction; they become the group's committed offsets when it commits.
//   - Routed by the group, to the coordinator that owns it (txn.go), as
//     Kafka's.
//   - Versions 0–3: from v3 the member id and generation are checked
//     (KIP-447), so a zombie consumer's transaction cannot commit; before,
//     the member is not checked.
//   - The coordinator checks read on the group and on each topic; a
//     refused partition is answered alone.
//   - PRODUCER_FENCED from v3, INVALID_PRODUCER_EPOCH before.
func (b *Bridge) txnOffsetCommitAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.TxnOffsetCommit, MinVersion: 0, MaxVersion: 3, Hidden: !b.cfg.Transactions, Handle: handler(b.txnOffsetCommit)}
}

func (b *Bridge) txnOffsetCommit(ctx context.Context, version int16, req *kmsg.TxnOffsetCommitRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	creq := &coordinatorv1.TxnOffsetCommitRequest{
		TransactionalId: req.TransactionalID, GroupId: req.Group, ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), MemberEpoch: -1,
	}
	if version >= 3 {
		creq.MemberId, creq.MemberEpoch = req.MemberID, req.Generation
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			cp := &coordinatorv1.TxnOffsetCommitPartition{Topic: t.Topic, Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: -1}
			if version >= 2 {
				cp.CommittedLeaderEpoch = p.LeaderEpoch
			}
			if p.Metadata != nil {
				cp.Metadata = *p.Metadata
			}
			creq.Partitions = append(creq.Partitions, cp)
		}
	}
	var out *connect.Response[coordinatorv1.TxnOffsetCommitResponse]
	c, err := b.coordinator(ctx, req.Group)
	if err == nil {
		out, err = c.TxnOffsetCommit(ctx, connect.NewRequest(creq))
	}
	results := map[[2]any]*commonv1.ErrorDetail{}
	if err == nil {
		for _, r := range out.Msg.GetPartitions() {
			results[[2]any{r.GetTopic(), r.GetPartition()}] = r.GetError()
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			if err != nil {
				rp.ErrorCode = kafkaCode(err, groupPlane)
			} else {
				rp.ErrorCode = detailCode(results[[2]any{t.Topic, p.Partition}], groupPlane, nil)
			}
			rp.ErrorCode = fencedCode(rp.ErrorCode, version, 3)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
