package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) fetchAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.Fetch, MinVersion: 4, MaxVersion: 12, Handle: handler(b.fetch)}
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
			r.aborted = res.GetAbortedTransactions()
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
		if req.IsolationLevel == 1 {
			// As Kafka: a read_committed answer lists the aborted
			// transactions of its records (none is an empty list, not
			// null), which the consumer drops.
			rp.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(r.aborted))
			for _, a := range r.aborted {
				ka := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				ka.ProducerID, ka.FirstOffset = a.GetProducerId(), a.GetFirstOffset()
				rp.AbortedTransactions = append(rp.AbortedTransactions, ka)
			}
		}
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
