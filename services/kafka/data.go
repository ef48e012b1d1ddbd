package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
)

// errNoStorage answers the data path on a listener that is not a storage
// node's: it leads no partition.
var errNoStorage error = apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "this listener leads no partition; ask the leader in Metadata")

// onStorage calls this node's StorageService with a request of n
// partitions and returns its results, one per partition in order, or the
// error to answer every partition with: errNoStorage on a listener that
// has no StorageService (the gateway's, the coordinator's), an answer
// with another number of results an internal error. With no partition
// nothing is called.
func onStorage[Resp, R any](b *Bridge, n int, call func(storagev1connect.StorageServiceClient) (*connect.Response[Resp], error), results func(*Resp) []R) ([]R, error) {
	if n == 0 {
		return nil, nil
	}
	if b.cfg.Storage == nil {
		return nil, errNoStorage
	}
	out, err := call(b.cfg.Storage)
	if err != nil {
		return nil, err
	}
	rs := results(out.Msg)
	if len(rs) != n {
		return nil, connect.NewError(connect.CodeInternal, nil)
	}
	return rs, nil
}

// validAcks reports whether acks is one Kafka accepts: -1 (all), 0
// (none) or 1 (leader). Any other is answered INVALID_REQUIRED_ACKS on
// every partition, nothing appended (ReplicaManager.appendRecords).
func validAcks(acks int16) bool { return acks >= -1 && acks <= 1 }

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
// would be. With acks=0 nothing is answered, unless a partition failed
// (answerProduce).
func (b *Bridge) produce(ctx context.Context, version int16, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrProduceResponse()
	var refuse int16
	switch {
	case b.cfg.Storage == nil:
		refuse = kerr.NotLeaderForPartition.Code // a listener without Storage leads nothing
	case req.TransactionID != nil:
		// Transactional batches need the transaction coordinator Strata
		// does not have yet.
		refuse = kerr.TransactionalIDAuthorizationFailed.Code
	case !validAcks(req.Acks):
		refuse = kerr.InvalidRequiredAcks.Code
	}
	if refuse != 0 {
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, refuse
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return answerProduce(req.Acks, resp)
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
		rp.BaseOffset, rp.LogStartOffset = -1, logStartOf(apierr.AsDetail(err))
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
				e.rp.ErrorCode, e.rp.BaseOffset, e.rp.LogStartOffset = detailCode(d, dataPlane, nil), -1, logStartOf(d)
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
	return answerProduce(req.Acks, resp)
}

// answerProduce is the answer to a Produce: resp, or with acks=0 nothing
// when every partition succeeded and a closed connection when one failed.
// A producer with acks=0 reads no answer, so Kafka closes the connection
// on any partition error (KafkaApis.handleProduceRequest) to make it
// refresh its metadata and find the new leader; an answer it never reads
// would leave it sending to a stale leader until its metadata.max.age.ms.
func answerProduce(acks int16, resp *kmsg.ProduceResponse) (kmsg.Response, error) {
	if acks != 0 {
		return resp, nil
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				return nil, fmt.Errorf("kafka: closing the connection after an acks=0 produce failed on %s/%d with Kafka error %d",
					rt.Topic, rp.Partition, rp.ErrorCode)
			}
		}
	}
	return nil, nil
}

// logStartOf is the partition's log start offset an error carries (the
// storage node's offset range hint, which it gives with UNKNOWN_PRODUCER_ID
// as Kafka does), or -1 (Kafka's unknown) when it carries none.
func logStartOf(d *commonv1.ErrorDetail) int64 {
	if h := d.GetOffsetRange(); h != nil {
		return h.GetLogStartOffset()
	}
	return -1
}

// fetch reads every partition of the request, or of its fetch session
// (fetchsession.go), through this node's StorageService in one long poll.
func (b *Bridge) fetch(ctx context.Context, version int16, req *kmsg.FetchRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFetchResponse()
	plan := b.sessions.open(version, req, b.sessionOwner(ctx))
	if plan.errCode != 0 {
		resp.ErrorCode = plan.errCode
		return resp, nil
	}
	if len(plan.parts) == 0 {
		resp.SessionID = plan.sessionID
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
		sp := &storagev1.FetchPartition{
			Topic: p.topic, Partition: p.partition, FetchOffset: p.offset,
			CurrentLeaderEpoch: p.leaderEpoch, MaxBytes: p.maxBytes,
		}
		if p.lastFetchedEpoch >= 0 {
			sp.LastFetchedEpoch = &p.lastFetchedEpoch
		}
		sreq.Partitions = append(sreq.Partitions, sp)
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
		if r.errCode = detailCode(res.GetError(), dataPlane, nil); r.errCode == 0 {
			r.hw, r.lso, r.logStart, r.records, r.diverging = res.GetHighWatermark(), res.GetLastStableOffset(), res.GetLogStartOffset(), res.GetRecords(), res.GetDivergingEpoch()
		}
	}
	include := b.sessions.answer(&plan, read)
	resp.SessionID = plan.sessionID
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
		if d := r.diverging; d != nil && version >= 12 {
			rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = d.GetEpoch(), d.GetEndOffset()
		}
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

// sessionOwner is whom a fetch session belongs to: the connection's
// principal on a listener that authenticates, else "" (every client is
// the same anonymous one).
func (b *Bridge) sessionOwner(ctx context.Context) string {
	if b.cfg.Guard == nil {
		return ""
	}
	if p, ok := authn.PrincipalFrom(ctx); ok {
		return p.String()
	}
	return acl.Anonymous.String()
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
