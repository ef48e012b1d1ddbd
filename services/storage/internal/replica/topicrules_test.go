package replica

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
	"github.com/strata-mq/strata/services/storage/internal/clock"
)

// ruledLeader is a sole leader with the produce rules p and a fake clock
// at now.
func ruledLeader(t *testing.T, p ProduceRules, now time.Time) *Replica {
	t.Helper()
	return leaderOf(t, Config{MinISR: 1, Produce: p}, Options{Clock: clock.NewFake(now)},
		State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
}

// readBack returns the one batch at offset 0 of r's log.
func readBack(t *testing.T, r *Replica) []byte {
	t.Helper()
	res, err := r.Log().Read(0, 1<<20, r.Log().LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	return res.Batches
}

// A compacted topic's leader refuses a batch holding a record without a
// key, whole, and appends nothing (Kafka's INVALID_RECORD).
func TestProduceRequiresKeys(t *testing.T) {
	r := ruledLeader(t, ProduceRules{RequireKeys: true}, time.Now())
	keyless := batchtest.Build(t, recordbatch.BuildOptions{}, []recordbatch.Record{
		{Key: []byte("k"), Value: []byte("v"), Timestamp: time.Now().UnixMilli()}, {Value: []byte("no key"), Timestamp: time.Now().UnixMilli()}})
	_, err := r.Produce(context.Background(), keyless, AcksAll, 1, time.Second)
	if !errors.Is(err, recordbatch.ErrKeyRequired) || r.Log().LogEndOffset() != 0 {
		t.Fatalf("a record without a key: %v, log end %d; want ErrKeyRequired and nothing appended", err, r.Log().LogEndOffset())
	}
	keyed := batchtest.Build(t, recordbatch.BuildOptions{Codec: recordbatch.CodecLZ4}, []recordbatch.Record{
		{Key: []byte("k"), Value: []byte("v"), Timestamp: time.Now().UnixMilli()}})
	if _, err := r.Produce(context.Background(), keyed, AcksAll, 1, time.Second); err != nil {
		t.Fatalf("keyed records: %v", err)
	}
}

// With CreateTime, a record further than the window from the leader's
// clock is refused (INVALID_TIMESTAMP); at the edge it is accepted.
func TestProduceTimestampWindow(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	r := ruledLeader(t, ProduceRules{LimitTimestamps: true, TimestampBeforeMaxMs: 1000, TimestampAfterMaxMs: math.MaxInt64}, now)
	at := func(ts int64) []byte {
		return batchtest.Build(t, recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte("v"), Timestamp: ts}})
	}
	if _, err := r.Produce(context.Background(), at(now.UnixMilli()-1001), AcksAll, 1, time.Second); !errors.Is(err, recordbatch.ErrInvalidTimestamp) {
		t.Fatalf("a timestamp 1001 ms behind with before.max.ms=1000: %v, want ErrInvalidTimestamp", err)
	}
	for _, ts := range []int64{now.UnixMilli() - 1000, now.UnixMilli() + 100*365*24*3600*1000} {
		if _, err := r.Produce(context.Background(), at(ts), AcksAll, 1, time.Second); err != nil {
			t.Fatalf("timestamp %d: %v", ts, err)
		}
	}
}

// LogAppendTime: the leader stamps its clock as the batch's max timestamp
// and sets the timestamp-type bit, the batch stays valid (CRC computed
// again), the result carries the time, and a timestamp window does not
// apply. CreateTime answers -1.
func TestProduceLogAppendTime(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	r := ruledLeader(t, ProduceRules{LogAppendTime: true}, now)
	old := batchtest.Build(t, recordbatch.BuildOptions{Codec: recordbatch.CodecGzip}, []recordbatch.Record{{Value: []byte("v"), Timestamp: 1000}})
	res, err := r.Produce(context.Background(), old, AcksAll, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.LogAppendTime != now.UnixMilli() {
		t.Fatalf("log append time %d, want %d", res.LogAppendTime, now.UnixMilli())
	}
	h, err := recordbatch.Verify(readBack(t, r))
	if err != nil {
		t.Fatalf("stored batch: %v", err)
	}
	if !h.LogAppendTime() || h.MaxTimestamp != now.UnixMilli() || h.Codec() != recordbatch.CodecGzip {
		t.Fatalf("stored header %+v", h)
	}

	c := ruledLeader(t, ProduceRules{}, now)
	res, err = c.Produce(context.Background(), batchtest.Build(t, recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte("v"), Timestamp: 1000}}), AcksAll, 1, time.Second)
	if err != nil || res.LogAppendTime != -1 {
		t.Fatalf("CreateTime: %+v %v, want log append time -1", res, err)
	}
}

// compression.type other than producer: the stored batch has the topic's
// codec, the same records and the producer's sequence (idempotence keeps
// working across the rewrite: a retry is still a duplicate).
func TestProduceRecompresses(t *testing.T) {
	r := ruledLeader(t, ProduceRules{Recompress: true, Codec: recordbatch.CodecZstd}, time.Now())
	recs := batchtest.Records(50)
	b := batchtest.Build(t, recordbatch.BuildOptions{Codec: recordbatch.CodecSnappy, Idempotent: true, ProducerID: 4, BaseSequence: 0}, recs)
	retry := append([]byte(nil), b...)
	if _, err := r.Produce(context.Background(), b, AcksAll, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	stored := readBack(t, r)
	h, err := recordbatch.Verify(stored)
	if err != nil {
		t.Fatal(err)
	}
	if h.Codec() != recordbatch.CodecZstd || h.ProducerID != 4 || h.BaseSequence != 0 || h.BaseOffset != 0 || h.PartitionLeaderEpoch != 1 {
		t.Fatalf("stored header %+v", h)
	}
	got, err := recordbatch.Records(stored)
	if err != nil || len(got) != len(recs) || string(got[49].Value) != string(recs[49].Value) {
		t.Fatalf("stored records: %d, %v", len(got), err)
	}
	res, err := r.Produce(context.Background(), retry, AcksAll, 1, time.Second)
	if err != nil || !res.Duplicate || r.Log().LogEndOffset() != 50 {
		t.Fatalf("retry: %+v %v, log end %d; want a duplicate", res, err, r.Log().LogEndOffset())
	}
}
