package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DescribeProducers (61), v0: the idempotent producers a partition's
// leader remembers (KIP-664), from the storage node's DescribeProducers.
// kafka-transactions.sh describe-producers and kadm's DescribeProducers
// send it to each partition's leader.
//
//   - Served by the leader: a follower answers NOT_LEADER_OR_FOLLOWER, a
//     node without the partition UNKNOWN_TOPIC_OR_PARTITION; the gateway's
//     and the coordinator's listeners lead nothing and answer
//     NOT_LEADER_OR_FOLLOWER.
//   - Each producer with its epoch and the last sequence of its last
//     batch. LastTimestamp is when the leader appended that batch (Kafka
//     gives the batch's largest record timestamp); CoordinatorEpoch is
//     that of its last transaction marker, CurrentTxnStartOffset the first
//     offset of its open transaction (kafka-transactions.sh
//     find-hanging reads it), each -1 when there is none.
//   - ACL: read on the topic, partition by partition, checked by the storage node; a
//     refused partition is TOPIC_AUTHORIZATION_FAILED.
func (b *Bridge) describeProducersAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeProducers, MinVersion: 0, MaxVersion: 0, Handle: handler(b.describeProducers)}
}

func (b *Bridge) describeProducers(ctx context.Context, version int16, req *kmsg.DescribeProducersRequest) (kmsg.Response, error) {
	sreq := &storagev1.DescribeProducersRequest{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			sreq.Partitions = append(sreq.Partitions, &commonv1.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	results, err := onStorage(b, len(sreq.Partitions), func(s storagev1connect.StorageServiceClient) (*connect.Response[storagev1.DescribeProducersResponse], error) {
		return s.DescribeProducers(ctx, connect.NewRequest(sreq))
	}, (*storagev1.DescribeProducersResponse).GetPartitions)
	resp := kmsg.NewPtrDescribeProducersResponse()
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = p
			if err != nil {
				rp.ErrorCode = kafkaCode(err, dataPlane)
			} else {
				r := results[i]
				if rp.ErrorCode = detailCode(r.GetError(), dataPlane, nil); rp.ErrorCode != 0 {
					m := r.GetError().GetMessage()
					rp.ErrorMessage = &m
				}
				for _, ap := range r.GetProducers() {
					a := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					a.ProducerID, a.ProducerEpoch, a.LastSequence, a.LastTimestamp = ap.GetProducerId(), ap.GetProducerEpoch(), ap.GetLastSequence(), ap.GetLastAppendTimeMs()
					a.CoordinatorEpoch, a.CurrentTxnStartOffset = ap.GetCoordinatorEpoch(), ap.GetCurrentTxnStartOffset()
					rp.ActiveProducers = append(rp.ActiveProducers, a)
				}
			}
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
