package server

import (
	"context"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
)

// DescribeProducers lists the idempotent producers each led partition's
// log remembers (partlog.Log.Producers), as Kafka's
// ReplicaManager.activeProducerState: only a leader answers.
func (s *service) DescribeProducers(ctx context.Context, req *connect.Request[storagev1.DescribeProducersRequest]) (*connect.Response[storagev1.DescribeProducersResponse], error) {
	access := s.topicAccess(ctx, acl.Read) // Kafka's READ on the topic
	out := &storagev1.DescribeProducersResponse{}
	for _, p := range req.Msg.GetPartitions() {
		res := &storagev1.DescribeProducersPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		out.Partitions = append(out.Partitions, res)
		r, d := s.led(access, p.GetTopic(), p.GetPartition(), -1)
		if res.Error = d; d != nil {
			continue
		}
		for _, ap := range r.Log().Producers() {
			pr := &storagev1.ActiveProducer{ProducerId: ap.ID, ProducerEpoch: int32(ap.Epoch), LastSequence: -1,
				LastAppendTimeMs: ap.LastSeen.UnixMilli(), LastBatchOffset: -1, CurrentTxnStartOffset: ap.TxnFirstOffset, CoordinatorEpoch: ap.CoordinatorEpoch}
			if n := len(ap.Batches); n > 0 {
				pr.LastSequence, pr.LastBatchOffset = ap.Batches[n-1].LastSeq, ap.Batches[n-1].FirstOffset
			}
			res.Producers = append(res.Producers, pr)
		}
	}
	return connect.NewResponse(out), nil
}
