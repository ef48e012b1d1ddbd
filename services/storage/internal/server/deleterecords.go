package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// maxDeleteRecordsWait bounds how long DeleteRecords waits for the
// followers, whatever timeout_ms asks.
const maxDeleteRecordsWait = 5 * time.Minute

// DeleteRecords raises the log start offset of partitions this node leads,
// as Kafka's ReplicaManager.deleteRecords: each leader moves its own at
// once (Replica.DeleteRecords), then the call waits until the low
// watermark of every partition that moved has reached its offset
// (Kafka's DelayedDeleteRecords), which the followers raise on their next
// fetch; a partition still short at timeout_ms is answered
// REQUEST_TIMED_OUT with the low watermark it has.
func (s *service) DeleteRecords(ctx context.Context, req *connect.Request[storagev1.DeleteRecordsRequest]) (*connect.Response[storagev1.DeleteRecordsResponse], error) {
	m := req.Msg
	if m.GetTimeoutMs() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("timeout_ms must not be negative"))
	}
	seen := map[tpKey]bool{}
	for _, p := range m.GetPartitions() {
		k := tpKey{p.GetTopic(), p.GetPartition()}
		if seen[k] {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partition %s/%d is named twice", k.topic, k.partition))
		}
		seen[k] = true
	}
	access := s.topicAccess(ctx, acl.Delete) // Kafka's DELETE on the topic
	type waiting struct {
		res    *storagev1.DeleteRecordsPartitionResult
		r      *replica.Replica
		epoch  int32
		offset int64
	}
	out := &storagev1.DeleteRecordsResponse{}
	var pending []waiting
	for _, p := range m.GetPartitions() {
		res := &storagev1.DeleteRecordsPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), LowWatermark: -1}
		out.Partitions = append(out.Partitions, res)
		r, d := s.led(access, p.GetTopic(), p.GetPartition(), p.GetCurrentLeaderEpoch())
		if res.Error = d; d != nil {
			continue
		}
		if d := s.deletePolicy(p.GetTopic()); d != nil {
			res.Error = d
			continue
		}
		// A tiered partition's tier deletes first, at the offset the
		// leader then takes: -1 is the high watermark.
		offset := p.GetOffset()
		if offset == -1 {
			offset = r.Log().HighWatermark()
		}
		if offset >= 0 && offset <= r.Log().HighWatermark() {
			if d := s.n.deleteTiered(ctx, r, offset); d != nil {
				res.Error = d
				continue
			}
		}
		start, err := r.DeleteRecords(p.GetCurrentLeaderEpoch(), offset)
		if err != nil {
			res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
			continue
		}
		s.n.logger.Info("records deleted", "topic", p.GetTopic(), "partition", p.GetPartition(), "log_start_offset", start)
		pending = append(pending, waiting{res: res, r: r, epoch: p.GetCurrentLeaderEpoch(), offset: start})
	}
	deadline := time.Now().Add(min(time.Duration(m.GetTimeoutMs())*time.Millisecond, maxDeleteRecordsWait))
	wait := newWaiter(&s.sessions().feed) // one channel for the call (changefeed.go)
	defer wait.close()
	for {
		rest := pending[:0]
		for _, w := range pending {
			wait.watch(w.r) // before the check, so no change after it is missed
			low, err := w.r.LowWatermark(w.epoch)
			w.res.LowWatermark = low
			switch {
			case err != nil:
				w.res.Error, w.res.LowWatermark = s.detail(w.res.GetTopic(), w.res.GetPartition(), w.r, err), -1
			case low < w.offset:
				rest = append(rest, w)
			}
		}
		pending = rest
		if len(pending) == 0 || !time.Now().Before(deadline) || !s.park(ctx, wait.wake, deadline) {
			break
		}
	}
	for _, w := range pending {
		w.res.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_DEADLINE_EXCEEDED, Reason: commonv1.Reason_REASON_REQUEST_TIMED_OUT,
			Message: fmt.Sprintf("the in-sync replicas' log start offsets (low watermark %d) did not reach %d within the timeout; the leader's has", w.res.GetLowWatermark(), w.offset)}
	}
	return connect.NewResponse(out), nil
}

// deletePolicy refuses DeleteRecords on a topic whose records it may not
// delete: one whose cleanup.policy does not include delete, as Kafka
// (Partition.deleteRecordsOnLeader: POLICY_VIOLATION); nil when it may. A
// tiered topic's tier deletes too (deleteTiered).
func (s *service) deletePolicy(topic string) *commonv1.ErrorDetail {
	t := s.n.currentView().Topics[topic]
	if t == nil {
		return nil // the replica exists; its leader check answers for it
	}
	cfg := t.GetConfigs()
	if _, del := topicconfig.Cleanup(cfg); !del {
		return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_POLICY_VIOLATION,
			Message: fmt.Sprintf("records of topic %s cannot be deleted: its cleanup.policy is %q, without delete", topic, cfg[topicconfig.CleanupPolicy])}
	}
	return nil
}
