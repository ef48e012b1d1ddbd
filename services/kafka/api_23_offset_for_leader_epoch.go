package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// OffsetForLeaderEpoch (23), v0–4: where a leader epoch ended, from the
// storage node's OffsetForLeaderEpoch. A consumer asks it after a leader
// change to find out whether the log it read was truncated (KIP-320).
//
//   - Served by the partition's leader only, as Kafka's
//     ReplicaManager.lastOffsetForLeaderEpoch (fetchOnlyFromLeader = true
//     whatever the replica id): a follower answers
//     NOT_LEADER_OR_FOLLOWER, a node without the partition
//     UNKNOWN_TOPIC_OR_PARTITION (Kafka says NOT_LEADER_OR_FOLLOWER when
//     its metadata knows the partition; both are retriable and make the
//     client refresh its metadata), a current leader epoch older than the
//     leader's
//     FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH. The
//     gateway's and the coordinator's listeners lead nothing and answer
//     NOT_LEADER_OR_FOLLOWER.
//   - An epoch older than the log's first is answered -1 and -1, as
//     Kafka's EpochEndOffset defaults.
//   - ACL: describe on the topic, partition by partition, checked by the storage node;
//     a refused partition is TOPIC_AUTHORIZATION_FAILED. Kafka lets
//     CLUSTER_ACTION skip that check; Strata has no such operation, so a
//     request with a replica id (a Kafka follower's) is served as a
//     consumer's: Strata's followers replicate over Connect.
//   - v0 and v1 carry no current leader epoch: not checked.
func (b *Bridge) offsetForLeaderEpochAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.OffsetForLeaderEpoch, MinVersion: 0, MaxVersion: 4, Handle: handler(b.offsetForLeaderEpoch)}
}

func (b *Bridge) offsetForLeaderEpoch(ctx context.Context, version int16, req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	// Always the consumer's replica id: the node's own rule for a
	// follower is its service identity, which a Kafka principal is not.
	sreq := &storagev1.OffsetForLeaderEpochRequest{ReplicaId: -1}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			current := p.CurrentLeaderEpoch
			if version < 2 {
				current = -1
			}
			sreq.Partitions = append(sreq.Partitions, &storagev1.OffsetForLeaderEpochPartition{
				Topic: t.Topic, Partition: p.Partition, CurrentLeaderEpoch: current, LeaderEpoch: p.LeaderEpoch,
			})
		}
	}
	results, err := onStorage(b, len(sreq.Partitions), func(s storagev1connect.StorageServiceClient) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
		return s.OffsetForLeaderEpoch(ctx, connect.NewRequest(sreq))
	}, (*storagev1.OffsetForLeaderEpochResponse).GetPartitions)
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
			if err != nil {
				rp.ErrorCode = kafkaCode(err, dataPlane)
			} else {
				r := results[i]
				if rp.ErrorCode = detailCode(r.GetError(), dataPlane, nil); rp.ErrorCode == 0 {
					rp.LeaderEpoch, rp.EndOffset = r.GetLeaderEpoch(), r.GetEndOffset()
				}
			}
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
