package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// TestProduceAcksZeroFailureClosesConnection: with acks=0 a request whose
// partitions all succeed is answered with nothing, and one where any
// partition fails closes the connection (the handler's error), as Kafka
// does, so the producer refreshes its metadata.
func TestProduceAcksZeroFailureClosesConnection(t *testing.T) {
	fs := &produceStorage{answer: func(topic string, p int32) *storagev1.ProducePartitionResult {
		if topic == "a" && p == 0 {
			return errResult(topic, p, commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER)
		}
		return okResult(topic, p, 1)
	}}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: fs})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		parts map[string][]int32
		close bool
	}{
		{"all appended, several partitions", map[string][]int32{"a": {1, 2}, "b": {0}}, false},
		{"all appended, one partition", map[string][]int32{"b": {0}}, false},
		{"one refused among several", map[string][]int32{"a": {0, 1}, "b": {0}}, true},
		{"the one partition refused", map[string][]int32{"a": {0}}, true},
	} {
		resp, err := b.produce(context.Background(), 9, produceRequest(0, tc.parts))
		if resp != nil {
			t.Errorf("%s: answered %v, want no answer", tc.name, resp)
		}
		if (err != nil) != tc.close {
			t.Errorf("%s: handler error %v, want a closed connection: %v", tc.name, err, tc.close)
		}
	}

	// A listener without Storage leads nothing: an acks=0 produce closes
	// the connection too, so the producer looks for the leader.
	nb, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := nb.produce(context.Background(), 9, produceRequest(0, map[string][]int32{"b": {0}})); resp != nil || err == nil {
		t.Fatalf("acks=0 to a listener without Storage: answer %v, err %v; want the connection closed", resp, err)
	}
}

// TestProduceInvalidAcks: acks other than -1, 0 and 1 answer every
// partition INVALID_REQUIRED_ACKS and reach no storage node.
func TestProduceInvalidAcks(t *testing.T) {
	fs := &produceStorage{answer: func(topic string, p int32) *storagev1.ProducePartitionResult { return okResult(topic, p, 1) }}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: fs})
	if err != nil {
		t.Fatal(err)
	}
	for _, acks := range []int16{2, -2, 5} {
		resp, err := b.produce(context.Background(), 9, produceRequest(acks, map[string][]int32{"a": {0, 1}}))
		if err != nil {
			t.Fatal(err)
		}
		got := codes(t, resp)
		for _, k := range []string{"a/0", "a/1"} {
			if got[k][0] != 21 {
				t.Errorf("acks=%d: %s answered %v, want INVALID_REQUIRED_ACKS (21)", acks, k, got[k])
			}
		}
	}
	if len(fs.single)+len(fs.many) != 0 {
		t.Fatalf("invalid acks reached the storage node: %d calls", len(fs.single)+len(fs.many))
	}
}

// unknownProducerStorage refuses every partition UNKNOWN_PRODUCER_ID with
// the partition's log start offset in the detail, as the storage node
// does, on both its single and its many-partition produce.
type unknownProducerStorage struct {
	storagev1connect.StorageServiceClient
	logStart int64
}

func (f unknownProducerStorage) refusal() *commonv1.ErrorDetail {
	return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID, Message: "unknown producer",
		Hint: &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{LogStartOffset: f.logStart, HighWatermark: f.logStart + 10}}}
}

func (f unknownProducerStorage) Produce(context.Context, *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	return nil, apierr.Error(f.refusal())
}

func (f unknownProducerStorage) ProducePartitions(_ context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	out := &storagev1.ProducePartitionsResponse{}
	for _, p := range req.Msg.GetPartitions() {
		out.Partitions = append(out.Partitions, &storagev1.ProducePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(),
			BaseOffset: -1, LogAppendTimeMs: -1, LogStartOffset: -1, Error: f.refusal()})
	}
	return connect.NewResponse(out), nil
}

// TestProduceUnknownProducerIDCarriesLogStart: UNKNOWN_PRODUCER_ID is
// answered with the partition's log start offset, not -1, over one
// partition and several.
func TestProduceUnknownProducerIDCarriesLogStart(t *testing.T) {
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: unknownProducerStorage{logStart: 17}})
	if err != nil {
		t.Fatal(err)
	}
	for _, parts := range []map[string][]int32{{"a": {0}}, {"a": {0, 1}, "b": {0}}} {
		resp, err := b.produce(context.Background(), 9, produceRequest(-1, parts))
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range resp.(*kmsg.ProduceResponse).Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != kerr.UnknownProducerID.Code || rp.LogStartOffset != 17 || rp.BaseOffset != -1 {
					t.Errorf("%d partitions, %s/%d: code %d, log start %d, base %d; want UNKNOWN_PRODUCER_ID with log start 17",
						len(parts), rt.Topic, rp.Partition, rp.ErrorCode, rp.LogStartOffset, rp.BaseOffset)
				}
			}
		}
	}
}

// listOffsetsStorage answers ListOffsets as the storage node does: by
// timestamp, the record found (offset 3 at 1500) or, past the last
// record, the high watermark 9 with timestamp -1; latest, the high
// watermark with the leader epoch.
type listOffsetsStorage struct {
	storagev1connect.StorageServiceClient
}

func (listOffsetsStorage) ListOffsets(_ context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	out := &storagev1.ListOffsetsResponse{}
	for _, p := range req.Msg.GetPartitions() {
		r := &storagev1.ListOffsetsPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 9, TimestampMs: -1, LeaderEpoch: -1}
		switch p.GetSpec() {
		case storagev1.OffsetSpec_OFFSET_SPEC_LATEST:
			r.LeaderEpoch = 4
		case storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			r.Offset = 0
		case storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			if p.GetTimestampMs() <= 1500 {
				r.Offset, r.TimestampMs, r.LeaderEpoch = 3, 1500, 2
			}
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

// TestListOffsetsPastLastRecord: a timestamp after every record is
// answered offset -1 and timestamp -1 with no error, as Kafka answers it
// (Java's offsetsForTimes reads that as "no record"), not the high
// watermark; a record found and "latest" pass through with their
// timestamps and leader epochs.
func TestListOffsetsPastLastRecord(t *testing.T) {
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: listOffsetsStorage{}})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	for i, ts := range []int64{1000, 2000, -1, -2} {
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp = int32(i), ts
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := b.listOffsets(context.Background(), 6, req)
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]int64{
		{3, 1500, 2}, // the record found
		{-1, -1, -1}, // past the last record
		{9, -1, 4},   // latest, with the leader epoch
		{0, -1, -1},  // earliest
	}
	for i, rp := range resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions {
		if got := [3]int64{rp.Offset, rp.Timestamp, int64(rp.LeaderEpoch)}; rp.ErrorCode != 0 || got != want[i] {
			t.Errorf("partition %d: code %d, offset/timestamp/epoch %v, want none and %v", rp.Partition, rp.ErrorCode, got, want[i])
		}
	}
}

// TestInvalidRecordCode: a batch that breaks a rule is INVALID_RECORD
// (87), a damaged one CORRUPT_MESSAGE (2), as Kafka answers them.
func TestInvalidRecordCode(t *testing.T) {
	if c := kafkaCode(apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_RECORD, "x"), dataPlane); c != 87 {
		t.Errorf("INVALID_RECORD reason: %d, want 87", c)
	}
	if c := kafkaCode(apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_CORRUPT_RECORD, "x"), dataPlane); c != 2 {
		t.Errorf("CORRUPT_RECORD reason: %d, want 2", c)
	}
}
