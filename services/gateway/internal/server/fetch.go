package server

import (
	"context"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Defaults and limits of FetchJSON.
const (
	defaultFetchRecords = 500
	defaultFetchBytes   = 1 << 20
	// fetchRetryBudget is how long FetchJSON keeps following leader changes
	// beyond max_wait_ms.
	fetchRetryBudget = 10 * time.Second
)

// FetchJSON reads one partition from its leader (resolving -2 and -1 with
// ListOffsets there first) and returns the records decoded, text where the
// bytes are valid UTF-8.
//
// It runs in the caller's name: the leader checks read on the topic and
// charges the caller's fetch quota on the record batch bytes it answers,
// holding it back while it owes a throttle; the answer carries the
// leader's throttle time.
func (g *Gateway) FetchJSON(ctx context.Context, req *connect.Request[gatewayv1.FetchJSONRequest]) (*connect.Response[gatewayv1.FetchJSONResponse], error) {
	m := req.Msg
	switch {
	case m.GetOffset() < -2:
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "offset %d: want -2 (earliest), -1 (latest) or an offset", m.GetOffset())
	case m.GetMaxRecords() < 0, m.GetMaxBytes() < 0, m.GetMaxWaitMs() < 0:
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "max_records, max_bytes and max_wait_ms must not be negative")
	}
	// Unknown topic or partition, or no metadata yet, fail at once; a
	// missing leader is retried below.
	if _, err := g.leaderOf(m.GetTopic(), m.GetPartition()); err != nil && (connect.CodeOf(err) == connect.CodeNotFound || !g.cache.Ready()) {
		return nil, err
	}
	maxRecords := int(m.GetMaxRecords())
	if maxRecords == 0 {
		maxRecords = defaultFetchRecords
	}
	maxBytes := m.GetMaxBytes()
	if maxBytes == 0 {
		maxBytes = defaultFetchBytes
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.GetMaxWaitMs())*time.Millisecond+fetchRetryBudget)
	defer cancel()

	out := &gatewayv1.FetchJSONResponse{}
	var result *storagev1.FetchPartitionResult
	var offset int64
	var upstream int32 // the leader's throttle of the caller, in ms
	err := g.onLeader(ctx, m.GetTopic(), m.GetPartition(), func(ctx context.Context, c storagev1connect.StorageServiceClient, l leader) error {
		offset = m.GetOffset()
		if offset < 0 {
			spec := storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
			if offset == -1 {
				spec = storagev1.OffsetSpec_OFFSET_SPEC_LATEST
			}
			res, err := unwrap(c.ListOffsets(ctx, connect.NewRequest(&storagev1.ListOffsetsRequest{
				Partitions:     []*storagev1.ListOffsetsPartition{{Topic: m.GetTopic(), Partition: m.GetPartition(), CurrentLeaderEpoch: l.epoch, Spec: spec}},
				IsolationLevel: m.GetIsolationLevel(),
			})))
			if err != nil {
				return err
			}
			if len(res.GetPartitions()) != 1 {
				return apierr.New(connect.CodeInternal, commonv1.Reason_REASON_UNSPECIFIED, "leader answered ListOffsets with %d partitions for 1", len(res.GetPartitions()))
			}
			if ed := res.GetPartitions()[0].GetError(); ed != nil {
				return apierr.Error(ed)
			}
			offset = res.GetPartitions()[0].GetOffset()
		}
		minBytes := int32(0)
		if m.GetMaxWaitMs() > 0 {
			minBytes = 1
		}
		res, err := unwrap(c.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
			Partitions: []*storagev1.FetchPartition{{
				Topic: m.GetTopic(), Partition: m.GetPartition(), FetchOffset: offset, CurrentLeaderEpoch: l.epoch, MaxBytes: maxBytes,
			}},
			MaxWaitMs: m.GetMaxWaitMs(), MinBytes: minBytes, MaxBytes: maxBytes, IsolationLevel: m.GetIsolationLevel(),
		})))
		if err != nil {
			return err
		}
		upstream = max(upstream, res.GetThrottleTimeMs())
		if len(res.GetPartitions()) != 1 {
			return apierr.New(connect.CodeInternal, commonv1.Reason_REASON_UNSPECIFIED, "leader answered Fetch with %d partitions for 1", len(res.GetPartitions()))
		}
		if ed := res.GetPartitions()[0].GetError(); ed != nil {
			return apierr.Error(ed)
		}
		result = res.GetPartitions()[0]
		return nil
	})
	if err != nil {
		return nil, apierr.Forward(err)
	}
	out.HighWatermark = result.GetHighWatermark()
	out.LogStartOffset = result.GetLogStartOffset()
	out.NextOffset = offset
	var aborted *recordbatch.AbortedFilter
	if m.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		txns := make([]recordbatch.AbortedTxn, len(result.GetAbortedTransactions()))
		for i, a := range result.GetAbortedTransactions() {
			txns[i] = recordbatch.AbortedTxn{ProducerID: a.GetProducerId(), FirstOffset: a.GetFirstOffset()}
		}
		aborted = recordbatch.NewAbortedFilter(txns)
	}
	if _, err := decodeInto(out, m.GetTopic(), m.GetPartition(), offset, maxRecords, result.GetRecords(), aborted); err != nil {
		return nil, err
	}
	out.ThrottleTimeMs = upstream
	return connect.NewResponse(out), nil
}

// decodeInto appends the records at or after offset from whole batches to
// out, at most maxRecords, and sets out.NextOffset past what it consumed.
// Control batches, and the batches of aborted transactions that aborted
// drops (nil under read_uncommitted), are consumed without records.
// Control batches are skipped. A batch that fails to decode ends the answer
// there when records came before it, and fails the call otherwise. It
// returns the bytes of the batches it looked at: what the answer cost the
// caller's fetch quota (batches after maxRecords records were returned
// are not counted; they are read again by the next fetch).
func decodeInto(out *gatewayv1.FetchJSONResponse, topic string, partition int32, offset int64, maxRecords int, buf []byte, aborted *recordbatch.AbortedFilter) (int64, error) {
	it := recordbatch.NewIter(buf, false)
	var read int64
	for len(out.Records) < maxRecords {
		h, b, ok := it.Next()
		if !ok {
			break
		}
		read += int64(len(b))
		if aborted.Skip(h, b) || h.Control() {
			out.NextOffset = max(out.NextOffset, h.NextOffset())
			continue
		}
		batch, err := recordbatch.Decode(b)
		if err != nil {
			if len(out.Records) > 0 {
				return read, nil
			}
			return 0, apierr.New(connect.CodeDataLoss, commonv1.Reason_REASON_CORRUPT_RECORD,
				"batch at offset %d of partition %d of topic %q does not decode: %v", h.BaseOffset, partition, topic, err)
		}
		full := true
		for _, r := range batch.Records {
			if r.Offset < offset {
				continue
			}
			if len(out.Records) >= maxRecords {
				full = false
				break
			}
			ts := r.Timestamp
			if h.LogAppendTime() {
				ts = h.MaxTimestamp
			}
			fr := &gatewayv1.JSONFetchedRecord{
				Topic: topic, Partition: partition, Offset: r.Offset, TimestampMs: ts,
				Headers: jsonHeaders(r.Headers), LeaderEpoch: h.PartitionLeaderEpoch,
			}
			if r.Key != nil {
				if utf8.Valid(r.Key) {
					fr.KeyData = &gatewayv1.JSONFetchedRecord_Key{Key: string(r.Key)}
				} else {
					fr.KeyData = &gatewayv1.JSONFetchedRecord_KeyBytes{KeyBytes: clone(r.Key)}
				}
			}
			if r.Value != nil {
				if utf8.Valid(r.Value) {
					fr.ValueData = &gatewayv1.JSONFetchedRecord_Value{Value: string(r.Value)}
				} else {
					fr.ValueData = &gatewayv1.JSONFetchedRecord_ValueBytes{ValueBytes: clone(r.Value)}
				}
			}
			out.Records = append(out.Records, fr)
			out.NextOffset = r.Offset + 1
		}
		if full {
			// Compaction may leave gaps at a batch's end: move past all of it.
			out.NextOffset = max(out.NextOffset, h.NextOffset())
		}
	}
	return read, nil
}

func jsonHeaders(hs []recordbatch.RecordHeader) []*gatewayv1.JSONHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*gatewayv1.JSONHeader, len(hs))
	for i, h := range hs {
		jh := &gatewayv1.JSONHeader{Key: h.Key}
		if h.Value != nil {
			if utf8.Valid(h.Value) {
				jh.ValueData = &gatewayv1.JSONHeader_Value{Value: string(h.Value)}
			} else {
				jh.ValueData = &gatewayv1.JSONHeader_ValueBytes{ValueBytes: clone(h.Value)}
			}
		}
		out[i] = jh
	}
	return out
}

func clone(b []byte) []byte { return append([]byte{}, b...) }
