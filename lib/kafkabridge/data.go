package kafkabridge

import (
	"context"
	"errors"
	"sync"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// errNoStorage answers the data path on a listener that is not a storage
// node's: it leads no partition.
var errNoStorage error = apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "this listener leads no partition; ask the leader in Metadata")

// acksOf maps Kafka's acks to Strata's.
func acksOf(acks int16) commonv1.Acks {
	switch acks {
	case 0:
		return commonv1.Acks_ACKS_NONE
	case 1:
		return commonv1.Acks_ACKS_LEADER
	}
	return commonv1.Acks_ACKS_ALL
}

// produce appends each partition's batches through this node's
// StorageService. The batches are passed on as the bytes the client sent;
// the storage node checks them and assigns offsets (and answers a retried
// idempotent batch with its first offsets). A request naming one
// partition is one Produce; one naming several is one ProducePartitions
// carrying them all, each answered on its own as a Produce of its own
// would be. With acks=0 nothing is answered.
func (b *Bridge) produce(ctx context.Context, version int16, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrProduceResponse()
	if req.TransactionID != nil || b.cfg.Storage == nil {
		code := errTransactionalIDAuthFailed
		if b.cfg.Storage == nil {
			code = errNotLeaderOrFollower
		}
		// Transactional batches need the transaction coordinator Strata
		// does not have yet; a listener without Storage leads nothing.
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if req.Acks == 0 {
			return nil, nil
		}
		return resp, nil
	}
	// rounds[k] holds each partition's (k+1)th entry: a call names a
	// partition at most once, so a request naming one twice (no client
	// does) sends the repeat in a call of its own, alongside, as before.
	type entry struct {
		topic string
		p     *kmsg.ProduceRequestTopicPartition
		rp    *kmsg.ProduceResponseTopicPartition
	}
	type key struct {
		topic     string
		partition int32
	}
	var rounds [][]entry
	seen := make(map[key]int)
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
	}
	for ti := range req.Topics {
		t, rt := &req.Topics[ti], &resp.Topics[ti]
		for i := range t.Partitions {
			p, rp := &t.Partitions[i], &rt.Partitions[i]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			k := seen[key{t.Topic, p.Partition}]
			seen[key{t.Topic, p.Partition}] = k + 1
			if k == len(rounds) {
				rounds = append(rounds, nil)
			}
			rounds[k] = append(rounds[k], entry{t.Topic, p, rp})
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	throttle := int32(0)
	fail := func(rp *kmsg.ProduceResponseTopicPartition, err error) {
		rp.ErrorCode, rp.ErrorMessage = kafkaCode(err, dataPlane), message(err)
		rp.BaseOffset = -1
	}
	call := func(es []entry) {
		if len(es) == 1 {
			e := es[0]
			out, err := b.cfg.Storage.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
				Topic: e.topic, Partition: e.p.Partition, Acks: acksOf(req.Acks),
				TimeoutMs: req.TimeoutMillis, LeaderEpoch: -1, Records: e.p.Records,
			}))
			if err != nil {
				fail(e.rp, err)
				return
			}
			e.rp.BaseOffset = out.Msg.GetBaseOffset()
			e.rp.LogAppendTime = out.Msg.GetLogAppendTimeMs()
			e.rp.LogStartOffset = out.Msg.GetLogStartOffset()
			mu.Lock()
			throttle = max(throttle, out.Msg.GetThrottleTimeMs())
			mu.Unlock()
			return
		}
		sreq := &storagev1.ProducePartitionsRequest{
			Partitions: make([]*storagev1.ProducePartition, len(es)),
			Acks:       acksOf(req.Acks), TimeoutMs: req.TimeoutMillis,
		}
		for i, e := range es {
			sreq.Partitions[i] = &storagev1.ProducePartition{Topic: e.topic, Partition: e.p.Partition, LeaderEpoch: -1, Records: e.p.Records}
		}
		out, err := b.cfg.Storage.ProducePartitions(ctx, connect.NewRequest(sreq))
		var results []*storagev1.ProducePartitionResult
		if err == nil {
			if results = out.Msg.GetPartitions(); len(results) != len(es) {
				err = connect.NewError(connect.CodeInternal, errors.New("produce answered a different number of partitions"))
			}
		}
		if err != nil {
			for _, e := range es {
				fail(e.rp, err)
			}
			return
		}
		for i, e := range es {
			r := results[i]
			if d := r.GetError(); d != nil {
				e.rp.ErrorCode, e.rp.BaseOffset = detailCode(d, dataPlane, nil), -1
				m := d.GetMessage()
				e.rp.ErrorMessage = &m
				continue
			}
			e.rp.BaseOffset, e.rp.LogAppendTime, e.rp.LogStartOffset = r.GetBaseOffset(), r.GetLogAppendTimeMs(), r.GetLogStartOffset()
		}
		mu.Lock()
		throttle = max(throttle, out.Msg.GetThrottleTimeMs())
		mu.Unlock()
	}
	for _, es := range rounds[min(1, len(rounds)):] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(es)
		}()
	}
	if len(rounds) > 0 {
		call(rounds[0])
	}
	wg.Wait()
	resp.ThrottleMillis = throttle
	if req.Acks == 0 {
		return nil, nil
	}
	return resp, nil
}

// fetch reads every partition of the request, or of its fetch session
// (fetchsession.go), through this node's StorageService in one long poll.
func (b *Bridge) fetch(ctx context.Context, version int16, req *kmsg.FetchRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFetchResponse()
	plan := b.sessions.open(version, req)
	if plan.errCode != errNone {
		resp.ErrorCode = plan.errCode
		return resp, nil
	}
	resp.SessionID = plan.sessionID
	if len(plan.parts) == 0 {
		return resp, nil
	}
	sreq := &storagev1.FetchRequest{
		MaxWaitMs: req.MaxWaitMillis, MinBytes: req.MinBytes, MaxBytes: req.MaxBytes,
		IsolationLevel: commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED,
	}
	if req.IsolationLevel == 1 {
		sreq.IsolationLevel = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	if sreq.MaxBytes < 0 {
		sreq.MaxBytes = 0
	}
	for _, p := range plan.parts {
		sreq.Partitions = append(sreq.Partitions, &storagev1.FetchPartition{
			Topic: p.topic, Partition: p.partition, FetchOffset: p.offset,
			CurrentLeaderEpoch: p.leaderEpoch, MaxBytes: p.maxBytes,
		})
	}
	var out *connect.Response[storagev1.FetchResponse]
	var results []*storagev1.FetchPartitionResult
	var err error = errNoStorage
	if b.cfg.Storage != nil {
		out, err = b.cfg.Storage.Fetch(ctx, connect.NewRequest(sreq))
	}
	if err == nil {
		results = out.Msg.GetPartitions()
	}
	if err == nil && len(results) != len(sreq.Partitions) {
		err = connect.NewError(connect.CodeInternal, nil)
	}
	read := make([]fetchResult, len(plan.parts))
	for i := range plan.parts {
		r := &read[i]
		r.hw, r.lso, r.logStart = -1, -1, -1
		if err != nil {
			r.errCode = kafkaCode(err, dataPlane)
			continue
		}
		res := results[i]
		if r.errCode = detailCode(res.GetError(), dataPlane, nil); r.errCode == errNone {
			r.hw, r.lso, r.logStart, r.records = res.GetHighWatermark(), res.GetLastStableOffset(), res.GetLogStartOffset(), res.GetRecords()
		}
	}
	include := b.sessions.answer(plan, read)
	for i, p := range plan.parts {
		if !include[i] {
			continue
		}
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != p.topic {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = p.topic
			resp.Topics = append(resp.Topics, rt)
		}
		r := read[i]
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.ErrorCode = p.partition, r.errCode
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = r.hw, r.lso, r.logStart
		// Empty, not null: librdkafka refuses a null record set.
		rp.RecordBatches = []byte{}
		if len(r.records) > 0 {
			rp.RecordBatches = r.records
		}
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Partitions = append(rt.Partitions, rp)
	}
	if err == nil {
		resp.ThrottleMillis = out.Msg.GetThrottleTimeMs()
	}
	return resp, nil
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
				rp.ErrorCode = errUnsupportedVersion
			case err != nil:
				rp.ErrorCode = kafkaCode(err, dataPlane)
			default:
				r := results[i]
				i++
				if rp.ErrorCode = detailCode(r.GetError(), dataPlane, nil); rp.ErrorCode == errNone {
					rp.Offset, rp.Timestamp, rp.LeaderEpoch = r.GetOffset(), r.GetTimestampMs(), r.GetLeaderEpoch()
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
