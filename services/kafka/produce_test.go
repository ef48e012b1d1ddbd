package kafka

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// produceStorage answers Produce and ProducePartitions from answer, by
// partition, and records every call.
type produceStorage struct {
	storagev1connect.StorageServiceClient
	answer func(topic string, partition int32) *storagev1.ProducePartitionResult

	mu     sync.Mutex
	single []*storagev1.ProduceRequest
	many   []*storagev1.ProducePartitionsRequest
}

func (f *produceStorage) Produce(_ context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	f.mu.Lock()
	f.single = append(f.single, req.Msg)
	f.mu.Unlock()
	r := f.answer(req.Msg.GetTopic(), req.Msg.GetPartition())
	if d := r.GetError(); d != nil {
		return nil, connect.NewError(connect.Code(d.GetCode()), nil) // no detail: never the case under test
	}
	return connect.NewResponse(&storagev1.ProduceResponse{BaseOffset: r.GetBaseOffset(), LogAppendTimeMs: -1, LogStartOffset: r.GetLogStartOffset(), ThrottleTimeMs: 3}), nil
}

func (f *produceStorage) ProducePartitions(_ context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	f.mu.Lock()
	// A copy: the caller's request is its own again after the call.
	f.many = append(f.many, proto.Clone(req.Msg).(*storagev1.ProducePartitionsRequest))
	f.mu.Unlock()
	out := &storagev1.ProducePartitionsResponse{ThrottleTimeMs: 5}
	for _, p := range req.Msg.GetPartitions() {
		out.Partitions = append(out.Partitions, f.answer(p.GetTopic(), p.GetPartition()))
	}
	return connect.NewResponse(out), nil
}

func okResult(topic string, partition int32, offset int64) *storagev1.ProducePartitionResult {
	return &storagev1.ProducePartitionResult{Topic: topic, Partition: partition, BaseOffset: offset, LogAppendTimeMs: -1, LogStartOffset: 0}
}

func errResult(topic string, partition int32, code commonv1.Code, reason commonv1.Reason) *storagev1.ProducePartitionResult {
	return &storagev1.ProducePartitionResult{Topic: topic, Partition: partition, BaseOffset: -1, LogAppendTimeMs: -1,
		Error: &commonv1.ErrorDetail{Code: code, Reason: reason, Message: "refused"}}
}

func produceRequest(acks int16, parts map[string][]int32) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 5000
	for _, topic := range []string{"a", "b", "granted", "hidden"} {
		if len(parts[topic]) == 0 {
			continue
		}
		t := kmsg.NewProduceRequestTopic()
		t.Topic = topic
		for _, p := range parts[topic] {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, []byte("batch")
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}

// codes is each answered partition's error code and base offset, by
// "topic/partition".
func codes(t *testing.T, resp kmsg.Response) map[string][2]int64 {
	t.Helper()
	pr, ok := resp.(*kmsg.ProduceResponse)
	if !ok {
		t.Fatalf("answer %T", resp)
	}
	out := map[string][2]int64{}
	for _, rt := range pr.Topics {
		for _, rp := range rt.Partitions {
			out[rt.Topic+"/"+string(rune('0'+rp.Partition))] = [2]int64{int64(rp.ErrorCode), rp.BaseOffset}
		}
	}
	return out
}

// TestProduceManyPartitionsOneCall: a Kafka Produce naming several
// partitions is one ProducePartitions carrying every one of them, and
// each partition's answer is mapped to its own Kafka error code: a
// partition led elsewhere NOT_LEADER_OR_FOLLOWER, a duplicate sequence
// DUPLICATE_SEQUENCE_NUMBER, a retried batch its first offset, the others
// their offsets.
func TestProduceManyPartitionsOneCall(t *testing.T) {
	fs := &produceStorage{answer: func(topic string, p int32) *storagev1.ProducePartitionResult {
		switch {
		case topic == "a" && p == 0:
			return errResult(topic, p, commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER)
		case topic == "a" && p == 1:
			return errResult(topic, p, commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_DUPLICATE_SEQUENCE)
		case topic == "a" && p == 2:
			return okResult(topic, p, 42)
		case topic == "b" && p == 0:
			r := okResult(topic, p, 7)
			r.Duplicate = true // a retried batch: its first offset, no error
			return r
		}
		return errResult(topic, p, commonv1.Code_CODE_UNAVAILABLE, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS)
	}}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: fs})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.produce(context.Background(), 9, produceRequest(-1, map[string][]int32{"a": {0, 1, 2}, "b": {0, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.single) != 0 || len(fs.many) != 1 {
		t.Fatalf("%d Produce and %d ProducePartitions calls, want 0 and 1", len(fs.single), len(fs.many))
	}
	call := fs.many[0]
	if n := len(call.GetPartitions()); n != 5 || call.GetAcks() != commonv1.Acks_ACKS_ALL || call.GetTimeoutMs() != 5000 {
		t.Fatalf("the call carries %d partitions, acks %v, timeout %d ms", n, call.GetAcks(), call.GetTimeoutMs())
	}
	for _, p := range call.GetPartitions() {
		if p.GetLeaderEpoch() != -1 || string(p.GetRecords()) != "batch" {
			t.Fatalf("partition %s/%d: epoch %d, records %q", p.GetTopic(), p.GetPartition(), p.GetLeaderEpoch(), p.GetRecords())
		}
	}
	want := map[string][2]int64{
		"a/0": {int64(kerr.NotLeaderForPartition.Code), -1},
		"a/1": {int64(kerr.DuplicateSequenceNumber.Code), -1},
		"a/2": {0, 42},
		"b/0": {0, 7},
		"b/1": {int64(kerr.NotEnoughReplicas.Code), -1},
	}
	got := codes(t, resp)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: code and offset %v, want %v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("answered %v", got)
	}
	if th := resp.(*kmsg.ProduceResponse).ThrottleMillis; th != 5 {
		t.Errorf("throttle %d ms, want the call's 5", th)
	}

	// acks=0: the same one call, and no answer.
	fs.many = nil
	resp, err = b.produce(context.Background(), 9, produceRequest(0, map[string][]int32{"a": {2}, "b": {0}}))
	if resp != nil || err != nil || len(fs.many) != 1 || fs.many[0].GetAcks() != commonv1.Acks_ACKS_NONE {
		t.Fatalf("acks=0: answer %v, err %v, calls %v", resp, err, fs.many)
	}

	// One partition: a Produce, as before.
	fs.many = nil
	resp, err = b.produce(context.Background(), 9, produceRequest(1, map[string][]int32{"a": {2}}))
	if err != nil || len(fs.single) != 1 || len(fs.many) != 0 {
		t.Fatalf("one partition: err %v, %d Produce and %d ProducePartitions calls", err, len(fs.single), len(fs.many))
	}
	if got := codes(t, resp); got["a/2"] != [2]int64{0, 42} {
		t.Fatalf("one partition answered %v", got)
	}

	// A partition named twice (no client does): the repeat goes in a
	// call of its own, as a storage node takes a partition once a call.
	fs.single, fs.many = nil, nil
	req := produceRequest(-1, map[string][]int32{"a": {2, 2}, "b": {0}})
	if _, err := b.produce(context.Background(), 9, req); err != nil {
		t.Fatal(err)
	}
	if len(fs.many) != 1 || len(fs.many[0].GetPartitions()) != 2 || len(fs.single) != 1 || fs.single[0].GetPartition() != 2 {
		t.Fatalf("a partition named twice: %v and %v", fs.many, fs.single)
	}
}

// TestProduceTransactionalID: a transactional id is refused
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED while the listener does not offer
// transactions, and passed to the storage node, which verifies the
// partition with the id's coordinator (KIP-890), when it does; the
// storage node's INVALID_TXN_STATE reaches the client as Kafka's.
func TestProduceTransactionalID(t *testing.T) {
	fs := &produceStorage{answer: func(topic string, p int32) *storagev1.ProducePartitionResult {
		if p == 1 {
			return errResult(topic, p, commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_TXN_STATE)
		}
		return okResult(topic, p, 3)
	}}
	id := "app"
	for _, offered := range []bool{false, true} {
		b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: fs, Transactions: offered})
		if err != nil {
			t.Fatal(err)
		}
		one := produceRequest(-1, map[string][]int32{"a": {0}})
		one.TransactionID = &id
		many := produceRequest(-1, map[string][]int32{"a": {0, 1}})
		many.TransactionID = &id
		r1, err := b.produce(context.Background(), 9, one)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := b.produce(context.Background(), 9, many)
		if err != nil {
			t.Fatal(err)
		}
		got1, got2 := codes(t, r1), codes(t, r2)
		if !offered {
			refused := int64(kerr.TransactionalIDAuthorizationFailed.Code)
			if got1["a/0"][0] != refused || got2["a/0"][0] != refused || got2["a/1"][0] != refused || len(fs.single)+len(fs.many) != 0 {
				t.Fatalf("not offered: %v %v, %d calls; want every partition refused and no call", got1, got2, len(fs.single)+len(fs.many))
			}
			continue
		}
		if got1["a/0"] != [2]int64{0, 3} || got2["a/0"] != [2]int64{0, 3} || got2["a/1"][0] != int64(kerr.InvalidTxnState.Code) {
			t.Fatalf("offered: %v %v", got1, got2)
		}
		if len(fs.single) != 1 || fs.single[0].GetTransactionalId() != id || len(fs.many) != 1 || fs.many[0].GetTransactionalId() != id {
			t.Fatalf("the storage node was not given the transactional id: %v %v", fs.single, fs.many)
		}
	}
}
