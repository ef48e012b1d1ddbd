package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// AddPartitionsToTxn (24) adds partitions to the producer's transaction,
// on the coordinator that owns the transactional id (txn.go).
//   - Versions 0–3, the clients' (v4 batches transactions for brokers
//     verifying a partition, KIP-890, and is not offered to clients).
//   - Each partition is answered alone: the coordinator's refusal of one
//     (write on its topic, TOPIC_AUTHORIZATION_FAILED) leaves the others
//     OPERATION_NOT_ATTEMPTED, as Kafka's; a failed call answers every
//     partition with its error (NOT_COORDINATOR and
//     COORDINATOR_NOT_AVAILABLE send the client to FindCoordinator).
//   - PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before (KIP-588).
func (b *Bridge) addPartitionsToTxnAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.AddPartitionsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: !b.cfg.Transactions, Handle: handler(b.addPartitionsToTxn)}
}

func (b *Bridge) addPartitionsToTxn(ctx context.Context, version int16, req *kmsg.AddPartitionsToTxnRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	creq := &coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: req.TransactionalID, ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch)}
	for _, t := range req.Topics {
		creq.Partitions = append(creq.Partitions, &commonv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	var out *connect.Response[coordinatorv1.AddPartitionsToTxnResponse]
	c, err := b.txnCoordinator(ctx, req.TransactionalID)
	if err == nil {
		out, err = c.AddPartitionsToTxn(ctx, connect.NewRequest(creq))
	}
	results := map[[2]any]*commonv1.ErrorDetail{}
	if err == nil {
		for _, r := range out.Msg.GetPartitions() {
			results[[2]any{r.GetTopic(), r.GetPartition()}] = r.GetError()
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition = p
			if err != nil {
				rp.ErrorCode = kafkaCode(err, groupPlane)
			} else {
				rp.ErrorCode = detailCode(results[[2]any{t.Topic, p}], groupPlane, nil)
			}
			rp.ErrorCode = fencedCode(rp.ErrorCode, version, 2)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
