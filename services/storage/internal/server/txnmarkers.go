package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// WriteTxnMarkers appends the markers the transaction coordinator sends
// once a transaction's decision is durable (docs/design/transactions.md,
// "Markers"), each through Replica.AppendMarker: gated as an acks=all
// produce and answered once the high watermark passes it. Only the
// coordinator's service identity may call it, as only Kafka's
// transaction coordinator sends WriteTxnMarkers (CLUSTER_ACTION): a
// marker ends transactions, so a user who could send one could commit or
// abort another producer's.
//
// Every partition is appended at once: the coordinator waits for the
// slowest, and one partition's refusal is that partition's answer only.
func (s *service) WriteTxnMarkers(ctx context.Context, req *connect.Request[storagev1.WriteTxnMarkersRequest]) (*connect.Response[storagev1.WriteTxnMarkersResponse], error) {
	if _, err := s.n.cfg.Guard.RequireService(ctx, tlsconfig.RoleCoordinator); err != nil {
		return nil, err
	}
	m := req.Msg
	for _, mk := range m.GetMarkers() {
		if mk.GetProducerId() < 0 || mk.GetProducerEpoch() < 0 || mk.GetProducerEpoch() > math.MaxInt16 || mk.GetCoordinatorEpoch() < 0 {
			return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED,
				"write txn markers: producer id %d, producer epoch %d or coordinator epoch %d out of range",
				mk.GetProducerId(), mk.GetProducerEpoch(), mk.GetCoordinatorEpoch())
		}
	}
	timeout := defaultProduceTimeout
	if t := m.GetTimeoutMs(); t > 0 {
		timeout = time.Duration(t) * time.Millisecond
	}
	out := &storagev1.WriteTxnMarkersResponse{Markers: make([]*storagev1.TxnMarkerResult, len(m.GetMarkers()))}
	var wg sync.WaitGroup
	for i, mk := range m.GetMarkers() {
		res := &storagev1.TxnMarkerResult{ProducerId: mk.GetProducerId()}
		out.Markers[i] = res
		marker := recordbatch.Marker{Type: recordbatch.ControlAbort, CoordinatorEpoch: mk.GetCoordinatorEpoch()}
		if mk.GetCommit() {
			marker.Type = recordbatch.ControlCommit
		}
		for _, tp := range mk.GetPartitions() {
			for _, p := range tp.GetPartitions() {
				pr := &storagev1.TxnMarkerPartitionResult{Topic: tp.GetTopic(), Partition: p, Offset: -1}
				res.Partitions = append(res.Partitions, pr)
				wg.Go(func() {
					pr.Offset, pr.Error = s.appendMarker(ctx, pr.Topic, pr.Partition, mk.GetProducerId(), int16(mk.GetProducerEpoch()), marker, timeout)
				})
			}
		}
	}
	wg.Wait()
	return connect.NewResponse(out), nil
}

// appendMarker writes one partition's marker as its leader, answering the
// marker's offset or the partition's error.
func (s *service) appendMarker(ctx context.Context, topic string, partition int32, pid int64, epoch int16, m recordbatch.Marker, timeout time.Duration) (int64, *commonv1.ErrorDetail) {
	r := s.n.replica(topic, partition)
	if r == nil {
		return -1, s.detail(topic, partition, nil, nil)
	}
	if s.n.meta.Fenced() {
		return -1, s.detail(topic, partition, r, errNodeFenced)
	}
	res, err := r.AppendMarker(ctx, pid, epoch, m, -1, timeout)
	if err != nil {
		d := s.detail(topic, partition, r, err)
		d.Message = fmt.Sprintf("%s-%d: %s", topic, partition, d.GetMessage())
		return -1, d
	}
	return res.BaseOffset, nil
}
