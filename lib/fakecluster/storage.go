package fakecluster

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/topicconfig"
)

// storage is one node's StorageService.
type storage struct {
	storagev1connect.UnimplementedStorageServiceHandler
	c  *Cluster
	id int32
}

// checkLocked finds a partition this node leads and checks the epoch.
func (s *storage) checkLocked(topicName string, part, epoch int32) (*partition, *commonv1.ErrorDetail) {
	c := s.c
	t := c.topics[topicName]
	if t == nil || part < 0 || int(part) >= len(t.parts) {
		return nil, detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
	}
	p := t.parts[part]
	leader, leaderEpoch := p.md.GetLeaderId(), p.md.GetLeaderEpoch()
	if leader != s.id {
		d := detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "this node does not lead the partition")
		d.Hint = &commonv1.ErrorDetail_Leader{Leader: &commonv1.LeaderHint{
			TopicPartition: &commonv1.TopicPartition{Topic: topicName, Partition: part},
			LeaderId:       leader, LeaderAddress: c.addrLocked(leader), LeaderEpoch: leaderEpoch,
		}}
		return nil, d
	}
	if epoch >= 0 && epoch < leaderEpoch {
		return nil, detail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, "leader epoch is stale")
	}
	if epoch > leaderEpoch {
		return nil, detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH, "leader epoch is newer than this node knows")
	}
	return p, nil
}

func asError(d *commonv1.ErrorDetail) error { return apierr.Error(d) }

// ProduceCall is one partition of a Produce or ProducePartitions a
// storage node answered, as Produced lists it: a call carrying several
// partitions is listed once per partition (Calls counts the calls).
type ProduceCall struct {
	Node        int32 // the node that answered
	Topic       string
	Partition   int32
	LeaderEpoch int32 // the epoch the request carried
	Acks        commonv1.Acks
	Records     int   // records in the request's batches
	Err         error // the answer's error; nil when appended
}

// Produced lists every partition of every Produce and ProducePartitions
// the storage nodes answered, in order.
func (c *Cluster) Produced() []ProduceCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.produced)
}

// holdBound is the longest a leader holds a batch that arrived ahead of
// its sequence, as the storage service's (shorter when the request's
// timeout is).
const holdBound = time.Second

// Held returns how many produced batches a leader held because they
// arrived ahead of their sequence (whether the gap then filled or not).
func (c *Cluster) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

func (s *storage) Produce(ctx context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	m := req.Msg
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["Produce"]++
	resp, err := s.producePartLocked(ctx, m.GetTopic(), m.GetPartition(), m.GetLeaderEpoch(), m.GetRecords(), m.GetAcks(), m.GetTimeoutMs())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// ProducePartitions answers each partition on its own, as a storage node
// does; a fault on "ProducePartitions" (Topic "", Partition -1) answers
// the whole call, and a fault that kills the node fails it.
func (s *storage) ProducePartitions(ctx context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	m := req.Msg
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["ProducePartitions"]++
	if err := c.faultLocked(s.id, "ProducePartitions", "", -1, false); err != nil {
		var hang *hangError
		if errors.As(err, &hang) {
			return nil, c.holdLocked(ctx, hang.f)
		}
		return nil, err
	}
	out := &storagev1.ProducePartitionsResponse{}
	for _, pp := range m.GetPartitions() {
		resp, err := s.producePartLocked(ctx, pp.GetTopic(), pp.GetPartition(), pp.GetLeaderEpoch(), pp.GetRecords(), m.GetAcks(), m.GetTimeoutMs())
		if err != nil && c.killedNode(s.id) {
			return nil, err
		}
		r := &storagev1.ProducePartitionResult{Topic: pp.GetTopic(), Partition: pp.GetPartition(), BaseOffset: -1, LogAppendTimeMs: -1}
		if err != nil {
			r.Error = detailOf(err)
		} else {
			r.BaseOffset, r.LogAppendTimeMs, r.LogStartOffset, r.Duplicate = resp.GetBaseOffset(), resp.GetLogAppendTimeMs(), resp.GetLogStartOffset(), resp.GetDuplicate()
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

// killedNode reports whether node id has been killed (KillNode).
func (c *Cluster) killedNode(id int32) bool {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.killed[id-1]
}

// producePartLocked appends one partition's batches and lists the call in
// Produced. An idempotent batch that arrives ahead of its sequence (the
// batches before it are still on their way, in other calls) is held, as
// the storage service holds it: Cluster.mu is released until the log
// changes, and the batch is tried again, until the gap fills, the call
// ends or holdBound (or the request's timeout, when shorter) passes; then
// it is refused with OUT_OF_ORDER_SEQUENCE.
func (s *storage) producePartLocked(ctx context.Context, topic string, part, epoch int32, records []byte, acks commonv1.Acks, timeoutMs int32) (*storagev1.ProduceResponse, error) {
	c := s.c
	call := ProduceCall{Node: s.id, Topic: topic, Partition: part, LeaderEpoch: epoch, Acks: acks}
	for b := records; len(b) > 0; {
		h, err := recordbatch.PeekHeader(b)
		if err != nil || h.Size() > len(b) {
			break
		}
		call.Records += int(h.RecordCount)
		b = b[h.Size():]
	}
	bound := holdBound
	if timeoutMs > 0 {
		bound = min(bound, time.Duration(timeoutMs)*time.Millisecond)
	}
	until := time.Now().Add(bound)
	resp, ahead, err := s.produceLocked(topic, part, epoch, records, acks, false)
	if ahead {
		c.held++
	}
	for ahead && time.Now().Before(until) && ctx.Err() == nil {
		changed := c.changed
		c.mu.Unlock()
		t := time.NewTimer(time.Until(until))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		c.mu.Lock()
		resp, ahead, err = s.produceLocked(topic, part, epoch, records, acks, true)
	}
	var hang *hangError
	if errors.As(err, &hang) {
		err = c.holdLocked(ctx, hang.f)
		resp = nil
	}
	call.Err = err
	c.produced = append(c.produced, call)
	return resp, err
}

// produceLocked appends one partition's batches; ahead reports a batch
// refused because it is ahead of its producer's next sequence, which the
// caller may hold and try again (held: the before-append faults have
// had their turn).
func (s *storage) produceLocked(topic string, part, epoch int32, records []byte, acks commonv1.Acks, held bool) (resp *storagev1.ProduceResponse, ahead bool, err error) {
	c := s.c
	if !held {
		if err := c.faultLocked(s.id, "Produce", topic, part, false); err != nil {
			return nil, false, err
		}
	}
	p, d := s.checkLocked(topic, part, epoch)
	if d != nil {
		return nil, false, asError(d)
	}
	maxBatch := -1 // max.message.bytes, with the framing the storage node allows
	if v, err := strconv.Atoi(c.topics[topic].configs[topicconfig.MaxMessageBytes]); err == nil && v > 0 {
		maxBatch = v + 64<<10
	}
	b := records
	var batches [][]byte
	var headers []recordbatch.Header
	for len(b) > 0 {
		if size, err := recordbatch.PeekSize(b); err == nil && maxBatch >= 0 && size > maxBatch {
			// As the storage node refuses it (partlog.ErrBatchTooLarge).
			return nil, false, errorf(connect.CodeResourceExhausted, commonv1.Reason_REASON_RECORD_TOO_LARGE,
				"partlog: batch too large: batch %d is %d bytes, limit %d", len(batches), size, maxBatch)
		}
		h, err := recordbatch.Verify(b)
		if err != nil {
			return nil, false, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_CORRUPT_RECORD, "corrupt batch: %v", err)
		}
		batches = append(batches, b[:h.Size()])
		headers = append(headers, h)
		b = b[h.Size():]
	}
	if len(batches) == 0 {
		return nil, false, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_CORRUPT_RECORD, "no batches")
	}
	first := int64(-1)
	dup := false
	for i, raw := range batches {
		h := headers[i]
		if h.ProducerID >= 0 {
			ps := p.producers[h.ProducerID]
			if ps == nil {
				// A producer the partition has no state for is accepted
				// at any sequence, as by the storage service.
				ps = &producerState{epoch: h.ProducerEpoch, nextSeq: h.BaseSequence, recent: map[int32]int64{}}
				p.producers[h.ProducerID] = ps
			}
			// The storage service's epoch rules: an older epoch is
			// fenced; a newer one (the producer bumped it, KIP-360)
			// starts again at sequence 0 and forgets the old batches.
			switch {
			case h.ProducerEpoch < ps.epoch:
				return nil, false, errorf(connect.CodeAborted, commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH,
					"producer %d epoch %d, partition has seen %d", h.ProducerID, h.ProducerEpoch, ps.epoch)
			case h.ProducerEpoch > ps.epoch:
				if h.BaseSequence != 0 {
					return nil, false, errorf(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE,
						"producer %d new epoch %d must start at sequence 0, got %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
				}
				ps.epoch, ps.nextSeq, ps.recent = h.ProducerEpoch, 0, map[int32]int64{}
			}
			if base, ok := ps.recent[h.BaseSequence]; ok {
				if first < 0 {
					first, dup = base, true
				}
				continue
			}
			if h.BaseSequence != ps.nextSeq {
				return nil, h.BaseSequence > ps.nextSeq, errorf(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE,
					"sequence %d, expected %d", h.BaseSequence, ps.nextSeq)
			}
			ps.recent[h.BaseSequence] = p.next
			ps.nextSeq = h.BaseSequence + h.LastOffsetDelta + 1
		}
		if first < 0 {
			first = p.next
		}
		p.batches = append(p.batches, stamp(raw, p.next, p.md.GetLeaderEpoch()))
		p.bases = append(p.bases, p.next)
		p.next += int64(h.LastOffsetDelta) + 1
	}
	c.notifyLocked()
	if err := c.faultLocked(s.id, "Produce", topic, part, true); err != nil {
		return nil, false, err
	}
	if acks == commonv1.Acks_ACKS_NONE {
		first = -1
	}
	return &storagev1.ProduceResponse{BaseOffset: first, LogAppendTimeMs: -1, LogStartOffset: p.start, Duplicate: dup}, false, nil
}

func (s *storage) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	m := req.Msg
	c := s.c
	deadline := time.Now().Add(time.Duration(m.GetMaxWaitMs()) * time.Millisecond)
	for {
		c.mu.Lock()
		c.calls["Fetch"]++
		resp := &storagev1.FetchResponse{}
		bytes, failed := 0, false
		for _, fp := range m.GetPartitions() {
			r := &storagev1.FetchPartitionResult{Topic: fp.GetTopic(), Partition: fp.GetPartition()}
			resp.Partitions = append(resp.Partitions, r)
			if err := c.faultLocked(s.id, "Fetch", fp.GetTopic(), fp.GetPartition(), false); err != nil {
				r.Error, failed = detailOf(err), true
				continue
			}
			p, d := s.checkLocked(fp.GetTopic(), fp.GetPartition(), fp.GetCurrentLeaderEpoch())
			if d != nil {
				r.Error, failed = d, true
				continue
			}
			r.HighWatermark, r.LastStableOffset, r.LogStartOffset = p.next, p.next, p.start
			off := fp.GetFetchOffset()
			if off < p.start || off > p.next {
				d := detail(connect.CodeOutOfRange, commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE, "offset out of range")
				d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{LogStartOffset: p.start, HighWatermark: p.next}}
				r.Error, failed = d, true
				continue
			}
			limit := int(fp.GetMaxBytes())
			if limit == 0 {
				limit = 1 << 20
			}
			if m.GetMaxBytes() > 0 {
				limit = max(min(limit, int(m.GetMaxBytes())-bytes), 0)
			}
			for _, raw := range p.batches {
				h, _ := recordbatch.PeekHeader(raw)
				if h.NextOffset() <= off {
					continue
				}
				// As a storage node: only the first partition with records
				// may go over the limits with its first batch (KIP-74).
				if (len(r.Records) > 0 || bytes > 0) && len(r.Records)+len(raw) > limit {
					break
				}
				r.Records = append(r.Records, raw...)
			}
			bytes += len(r.Records)
		}
		changed := c.changed
		c.mu.Unlock()
		// A partition error is answered at once, as the storage service does.
		if bytes > 0 || failed || m.GetMaxWaitMs() == 0 || time.Now().After(deadline) {
			return connect.NewResponse(resp), nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		t.Stop()
	}
}

func (s *storage) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["ListOffsets"]++
	resp := &storagev1.ListOffsetsResponse{}
	for _, lp := range req.Msg.GetPartitions() {
		r := &storagev1.ListOffsetsPartitionResult{Topic: lp.GetTopic(), Partition: lp.GetPartition(), TimestampMs: -1, LeaderEpoch: -1}
		resp.Partitions = append(resp.Partitions, r)
		if err := c.faultLocked(s.id, "ListOffsets", lp.GetTopic(), lp.GetPartition(), false); err != nil {
			r.Error = detailOf(err)
			continue
		}
		p, d := s.checkLocked(lp.GetTopic(), lp.GetPartition(), lp.GetCurrentLeaderEpoch())
		if d != nil {
			r.Error = d
			continue
		}
		switch lp.GetSpec() {
		case storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			r.Offset = p.start
		case storagev1.OffsetSpec_OFFSET_SPEC_LATEST:
			r.Offset = p.next
		case storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			r.Offset = p.next
		search:
			for _, raw := range p.batches {
				batch, err := recordbatch.Decode(raw)
				if err != nil {
					continue
				}
				for _, rec := range batch.Records {
					if rec.Timestamp >= lp.GetTimestampMs() {
						r.Offset, r.TimestampMs = rec.Offset, rec.Timestamp
						break search
					}
				}
			}
		default:
			return nil, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "offset spec unset")
		}
	}
	return connect.NewResponse(resp), nil
}

func detailOf(err error) *commonv1.ErrorDetail {
	if ed := apierr.DetailOf(err); ed != nil {
		return ed
	}
	return detail(connect.CodeUnknown, commonv1.Reason_REASON_UNSPECIFIED, err.Error())
}

// DescribeLog answers for every replica this node holds, leader or
// follower, as the real node does. The local extent is the whole in-memory
// log unless SetTiered moved it; a DescribeLog fault fails one partition's
// entry with the fault's error.
func (s *storage) DescribeLog(ctx context.Context, req *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["DescribeLog"]++
	resp := &storagev1.DescribeLogResponse{NodeId: s.id}
	asked := req.Msg.GetPartitions()
	if len(asked) == 0 {
		// None named: every replica this node holds, by topic and partition.
		for _, name := range slices.Sorted(maps.Keys(c.topics)) {
			for i, p := range c.topics[name].parts {
				if slices.Contains(p.md.GetReplicas(), s.id) {
					asked = append(asked, &commonv1.TopicPartition{Topic: name, Partition: int32(i)})
				}
			}
		}
	}
	for _, tp := range asked {
		r := &storagev1.DescribeLogPartitionResult{Topic: tp.GetTopic(), Partition: tp.GetPartition(), TieredEndOffset: -1}
		resp.Partitions = append(resp.Partitions, r)
		if err := c.faultLocked(s.id, "DescribeLog", tp.GetTopic(), tp.GetPartition(), false); err != nil {
			r.Error = detailOf(err)
			continue
		}
		t := c.topics[tp.GetTopic()]
		if t == nil || tp.GetPartition() < 0 || int(tp.GetPartition()) >= len(t.parts) || !slices.Contains(t.parts[tp.GetPartition()].md.GetReplicas(), s.id) {
			r.Error = detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "no replica of this partition on this node")
			continue
		}
		p := t.parts[tp.GetPartition()]
		r.Leader, r.LeaderEpoch = p.md.GetLeaderId() == s.id, p.md.GetLeaderEpoch()
		r.LogStartOffset, r.LocalLogStartOffset = p.start, max(p.start, p.tier.localStart)
		r.LogEndOffset, r.HighWatermark = p.next, p.next
		for i, b := range p.batches {
			h, err := recordbatch.PeekHeader(b)
			if err == nil && h.NextOffset() > r.LocalLogStartOffset && p.bases[i] >= p.start {
				r.LocalSizeBytes += int64(len(b))
			}
		}
		r.LocalSegmentCount = 1
		if p.tier.set {
			r.TieredEndOffset, r.TieredSizeBytes = p.tier.end, p.tier.size
		}
	}
	return connect.NewResponse(resp), nil
}
