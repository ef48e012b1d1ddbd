package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partitioner"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Defaults of ProduceJSON.
const (
	// defaultProduceTimeout applies when timeout_ms is 0: the same 30 s the
	// storage node uses for acks=all.
	defaultProduceTimeout = 30 * time.Second
)

// ProduceJSON builds one RecordBatch per target partition from the JSON
// records and produces the batches to the leaders concurrently, retrying
// through leader changes until timeout_ms. Records with a partition go
// there; keyed records go where Kafka's default partitioner sends them;
// keyless records of one request all go to one partition, which advances
// round-robin from request to request.
//
// It runs in the caller's name: each partition's leader checks write on
// the topic and charges the caller's produce quota, holding it back while
// it owes a throttle; the answer carries the longest throttle a leader
// answered.
func (g *Gateway) ProduceJSON(ctx context.Context, req *connect.Request[gatewayv1.ProduceJSONRequest]) (*connect.Response[gatewayv1.ProduceJSONResponse], error) {
	m := req.Msg
	if len(m.GetRecords()) == 0 {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "no records to produce")
	}
	if m.GetTimeoutMs() < 0 {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "timeout_ms %d is negative", m.GetTimeoutMs())
	}
	st := g.cache.Load()
	if st == nil {
		return nil, errNoMetadata()
	}
	topic := st.Topics[m.GetTopic()]
	if topic == nil {
		return nil, errTopicNotFound(m.GetTopic())
	}
	n := int32(len(topic.GetPartitions()))
	if n == 0 {
		return nil, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "topic %q has no partitions", m.GetTopic())
	}

	// Route every record; keep each partition's records in request order.
	now := time.Now().UnixMilli()
	keyless := int32(-1)
	type group struct {
		indexes []int // positions in the request
		records []recordbatch.Record
	}
	groups := map[int32]*group{}
	var order []int32
	traceHdrs := jsonTraceHeaders(ctx, req.Header()) // telemetry.go
	for i, r := range m.GetRecords() {
		var p int32
		key := recordKey(r)
		switch {
		case r.Partition != nil:
			p = r.GetPartition()
			if p < 0 || p >= n {
				return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED,
					"record %d: partition %d is out of range: topic %q has %d partitions", i, p, m.GetTopic(), n)
			}
		case key != nil:
			p = partitioner.ForKey(key, n)
		default:
			if keyless < 0 {
				keyless = g.nextKeylessPartition(topic.GetPartitions())
			}
			p = keyless
		}
		ts := r.GetTimestampMs()
		if ts == 0 {
			ts = now
		}
		grp := groups[p]
		if grp == nil {
			grp = &group{}
			groups[p] = grp
			order = append(order, p)
		}
		grp.indexes = append(grp.indexes, i)
		grp.records = append(grp.records, recordbatch.Record{
			Key: key, Value: recordValue(r), Headers: withTraceHeaders(recordHeaders(r.GetHeaders()), traceHdrs), Timestamp: ts,
		})
	}

	timeout := defaultProduceTimeout
	if m.GetTimeoutMs() > 0 {
		timeout = time.Duration(m.GetTimeoutMs()) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	codec := codecOf(topic.GetConfigs()["compression.type"])
	acks := m.GetAcks()
	if acks == commonv1.Acks_ACKS_UNSPECIFIED {
		acks = commonv1.Acks_ACKS_ALL
	}

	results := make([]*gatewayv1.ProduceJSONResult, len(m.GetRecords()))
	// The throttle each partition's leader answered, by position in
	// order.
	upstream := make([]int32, len(order))
	var wg sync.WaitGroup
	for k, p := range order {
		grp := groups[p]
		wg.Go(func() {
			fail := func(ed *commonv1.ErrorDetail) {
				for _, i := range grp.indexes {
					results[i] = &gatewayv1.ProduceJSONResult{Partition: p, Offset: -1, Error: ed}
				}
			}
			batch, err := recordbatch.Build(recordbatch.BuildOptions{Codec: codec}, grp.records)
			if err != nil {
				fail(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_INVALID_ARGUMENT, Message: err.Error()})
				return
			}
			var res *storagev1.ProduceResponse
			err = g.onLeader(ctx, m.GetTopic(), p, func(ctx context.Context, c storagev1connect.StorageServiceClient, l leader) error {
				remaining := timeout
				if dl, ok := ctx.Deadline(); ok {
					remaining = time.Until(dl)
				}
				r, err := unwrap(c.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
					Topic: m.GetTopic(), Partition: p, Acks: acks, TimeoutMs: int32(max(remaining.Milliseconds(), 1)),
					LeaderEpoch: l.epoch, Records: batch,
				})))
				res = r
				if r != nil {
					upstream[k] = max(upstream[k], r.GetThrottleTimeMs())
				}
				return err
			})
			if err != nil {
				fail(apierr.AsDetail(err))
				return
			}
			for k, i := range grp.indexes {
				out := &gatewayv1.ProduceJSONResult{Partition: p, Offset: -1, TimestampMs: grp.records[k].Timestamp}
				if acks != commonv1.Acks_ACKS_NONE && res.GetBaseOffset() >= 0 {
					out.Offset = res.GetBaseOffset() + int64(k)
				}
				if res.GetLogAppendTimeMs() >= 0 {
					out.TimestampMs = res.GetLogAppendTimeMs()
				}
				results[i] = out
			}
		})
	}
	wg.Wait()
	return connect.NewResponse(&gatewayv1.ProduceJSONResponse{Results: results, ThrottleTimeMs: slices.Max(upstream)}), nil
}

// nextKeylessPartition picks the partition for one request's keyless
// records: round-robin over the partitions that have a leader, or over all
// of them when none has.
func (g *Gateway) nextKeylessPartition(parts []*commonv1.PartitionMetadata) int32 {
	n := uint32(len(parts))
	start := g.keyless.Add(1) - 1
	for k := range n {
		p := parts[(start+k)%n]
		if p.GetLeaderId() >= 0 {
			return p.GetPartition()
		}
	}
	return parts[start%n].GetPartition()
}

// recordKey returns the key bytes, or nil for a null key.
func recordKey(r *gatewayv1.JSONRecord) []byte {
	switch k := r.GetKeyData().(type) {
	case *gatewayv1.JSONRecord_Key:
		return []byte(k.Key)
	case *gatewayv1.JSONRecord_KeyBytes:
		if k.KeyBytes == nil {
			return []byte{}
		}
		return k.KeyBytes
	}
	return nil
}

// recordValue returns the value bytes, or nil for a null value.
func recordValue(r *gatewayv1.JSONRecord) []byte {
	switch v := r.GetValueData().(type) {
	case *gatewayv1.JSONRecord_Value:
		return []byte(v.Value)
	case *gatewayv1.JSONRecord_ValueBytes:
		if v.ValueBytes == nil {
			return []byte{}
		}
		return v.ValueBytes
	}
	return nil
}

func recordHeaders(hs []*gatewayv1.JSONHeader) []recordbatch.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]recordbatch.RecordHeader, len(hs))
	for i, h := range hs {
		out[i].Key = h.GetKey()
		switch v := h.GetValueData().(type) {
		case *gatewayv1.JSONHeader_Value:
			out[i].Value = []byte(v.Value)
		case *gatewayv1.JSONHeader_ValueBytes:
			out[i].Value = v.ValueBytes
			if out[i].Value == nil {
				out[i].Value = []byte{}
			}
		}
	}
	return out
}

// codecOf maps a topic's compression.type to the codec the gateway builds
// batches with. "producer" (Kafka's default: keep what the producer chose)
// and "uncompressed" mean none, since the gateway is the producer here.
func codecOf(compressionType string) recordbatch.Codec {
	switch compressionType {
	case "gzip":
		return recordbatch.CodecGzip
	case "snappy":
		return recordbatch.CodecSnappy
	case "lz4":
		return recordbatch.CodecLZ4
	case "zstd":
		return recordbatch.CodecZstd
	}
	return recordbatch.CodecNone
}
