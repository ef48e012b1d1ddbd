package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) listOffsetsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ListOffsets, MinVersion: 1, MaxVersion: 6, Handle: handler(b.listOffsets)}
}

// listOffsets answers earliest (-2), latest (-1) and by-timestamp lookups
// through this node's StorageService.
func (b *Bridge) listOffsets(ctx context.Context, version int16, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrListOffsetsResponse()
	sreq := &storagev1.ListOffsetsRequest{IsolationLevel: commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED}
	if req.IsolationLevel == 1 {
		sreq.IsolationLevel = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if p.Timestamp < -2 {
				continue
			}
			sp := &storagev1.ListOffsetsPartition{Topic: t.Topic, Partition: p.Partition, CurrentLeaderEpoch: p.CurrentLeaderEpoch}
			switch p.Timestamp {
			case -2:
				sp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
			case -1:
				sp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_LATEST
			default:
				sp.Spec, sp.TimestampMs = storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, p.Timestamp
			}
			sreq.Partitions = append(sreq.Partitions, sp)
		}
	}
	var results []*storagev1.ListOffsetsPartitionResult
	var err error
	if len(sreq.Partitions) > 0 && b.cfg.Storage == nil {
		err = errNoStorage
	} else if len(sreq.Partitions) > 0 {
		var out *connect.Response[storagev1.ListOffsetsResponse]
		out, err = b.cfg.Storage.ListOffsets(ctx, connect.NewRequest(sreq))
		if err == nil {
			results = out.Msg.GetPartitions()
		}
		if err == nil && len(results) != len(sreq.Partitions) {
			err = connect.NewError(connect.CodeInternal, nil)
		}
	}
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Offset, rp.Timestamp = p.Partition, -1, -1
			switch {
			case p.Timestamp < -2:
				// -3 (max timestamp, v7) and the tiered specs (KIP-1005)
				// are not served at the versions answered.
				rp.ErrorCode = kerr.UnsupportedVersion.Code
			case err != nil:
				rp.ErrorCode = kafkaCode(err, dataPlane)
			default:
				r := results[i]
				i++
				if rp.ErrorCode = detailCode(r.GetError(), dataPlane, nil); rp.ErrorCode == 0 {
					rp.Offset, rp.Timestamp, rp.LeaderEpoch = r.GetOffset(), r.GetTimestampMs(), r.GetLeaderEpoch()
				}
				if rp.ErrorCode == 0 && p.Timestamp >= 0 && r.GetTimestampMs() < 0 {
					// No record at or after the time: the storage node
					// answers its high watermark (what Strata's consumers
					// start at), Kafka no error with offset -1 and
					// timestamp -1 (ReplicaManager.fetchOffset), which
					// Java's offsetsForTimes reads as no such record.
					rp.Offset, rp.Timestamp, rp.LeaderEpoch = -1, -1, -1
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
