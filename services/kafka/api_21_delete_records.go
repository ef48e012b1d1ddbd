package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DeleteRecords (21), v0–2: raise partitions' log start offsets, from the
// storage node's DeleteRecords. Kafka Streams calls it to purge its
// repartition topics once their records are committed, and
// kafka-delete-records.sh and kadm's DeleteRecords send it.
//
//   - Served by the partition's leader, as Kafka's
//     ReplicaManager.deleteRecords: a follower answers
//     NOT_LEADER_OR_FOLLOWER, a node without the partition
//     UNKNOWN_TOPIC_OR_PARTITION; the gateway's and the coordinator's
//     listeners lead nothing and answer NOT_LEADER_OR_FOLLOWER.
//   - Offset -1 is the high watermark; one above it or below -1 is
//     OFFSET_OUT_OF_RANGE. The answer waits, up to the request's timeout,
//     until every in-sync replica has moved its log start (the low
//     watermark), then gives that low watermark; short of it,
//     REQUEST_TIMED_OUT (the leader's has moved all the same).
//   - A topic whose cleanup.policy lacks delete is POLICY_VIOLATION, as
//     Kafka's. A tiered one (remote.storage.enable=true) deletes from the
//     tier too: the leader raises the tier's delete-records offset first,
//     so no deleted record is served from the tier.
//   - ACL: delete on the topic, partition by partition, checked by the storage node;
//     a refused partition is TOPIC_AUTHORIZATION_FAILED.
func (b *Bridge) deleteRecordsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DeleteRecords, MinVersion: 0, MaxVersion: 2, Handle: handler(b.deleteRecords)}
}

func (b *Bridge) deleteRecords(ctx context.Context, version int16, req *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	sreq := &storagev1.DeleteRecordsRequest{TimeoutMs: max(req.TimeoutMillis, 0)}
	// A partition named again is answered INVALID_REQUEST there, not sent.
	type key struct {
		topic     string
		partition int32
	}
	named := map[key]bool{}
	var again []bool
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := key{t.Topic, p.Partition}
			again = append(again, named[k])
			if named[k] {
				continue
			}
			named[k] = true
			sreq.Partitions = append(sreq.Partitions, &storagev1.DeleteRecordsPartition{
				Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, CurrentLeaderEpoch: -1,
			})
		}
	}
	results, err := onStorage(b, len(sreq.Partitions), func(s storagev1connect.StorageServiceClient) (*connect.Response[storagev1.DeleteRecordsResponse], error) {
		return s.DeleteRecords(ctx, connect.NewRequest(sreq))
	}, (*storagev1.DeleteRecordsResponse).GetPartitions)
	resp := kmsg.NewPtrDeleteRecordsResponse()
	i, n := 0, 0
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			switch {
			case again[n]:
				rp.ErrorCode = kerr.InvalidRequest.Code
			case err != nil:
				rp.ErrorCode = kafkaCode(err, dataPlane)
				i++
			default:
				r := results[i]
				rp.ErrorCode, rp.LowWatermark = detailCode(r.GetError(), dataPlane, nil), r.GetLowWatermark()
				i++
			}
			n++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
