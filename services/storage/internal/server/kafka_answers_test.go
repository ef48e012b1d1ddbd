package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// timedBatch builds one batch whose records have the given timestamps.
func timedBatch(t *testing.T, codec recordbatch.Codec, stamps ...int64) []byte {
	t.Helper()
	var recs []recordbatch.Record
	for i, ts := range stamps {
		recs = append(recs, recordbatch.Record{Value: []byte(fmt.Sprint("v", i)), Timestamp: ts})
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{Codec: codec}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestListOffsetsByTimestampFindsTheRecord: ListOffsets by timestamp
// answers the first record at or after the time, with that record's own
// timestamp and its batch's leader epoch, not the batch's base offset and
// max timestamp (Kafka's LogSegment.findOffsetByTimestamp), compressed
// batches included; past the last record it answers the high watermark
// with timestamp -1; "latest" carries the leader epoch, "earliest" the
// first batch's.
func TestListOffsetsByTimestampFindsTheRecord(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("times", 1, 1)
	leader := c.storage(1)
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	for _, b := range [][]byte{
		timedBatch(t, recordbatch.CodecNone, t0, t0+10, t0+20),    // offsets 0-2
		timedBatch(t, recordbatch.CodecGzip, t0+30, t0+40, t0+50), // offsets 3-5
	} {
		if _, err := produce(leader, "times", acksAll, 1, b, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	list := func(spec storagev1.OffsetSpec, ts int64) *storagev1.ListOffsetsPartitionResult {
		t.Helper()
		resp, err := leader.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
			{Topic: "times", Spec: spec, TimestampMs: ts, CurrentLeaderEpoch: -1}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPartitions()[0]
	}
	for _, tc := range []struct {
		ts, offset, tsOut int64
	}{
		{t0 - 1000, 0, t0},
		{t0, 0, t0},
		{t0 + 5, 1, t0 + 10}, // inside the first batch: its second record
		{t0 + 20, 2, t0 + 20},
		{t0 + 21, 3, t0 + 30}, // between the batches
		{t0 + 45, 5, t0 + 50}, // inside the compressed batch
		{t0 + 51, 6, -1},      // past the last record: the high watermark
	} {
		res := list(storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, tc.ts)
		if res.GetError() != nil || res.GetOffset() != tc.offset || res.GetTimestampMs() != tc.tsOut {
			t.Errorf("timestamp %+d ms: offset %d timestamp %d (%v), want offset %d timestamp %d",
				tc.ts-t0, res.GetOffset(), res.GetTimestampMs(), res.GetError(), tc.offset, tc.tsOut)
		}
		if tc.tsOut >= 0 && res.GetLeaderEpoch() != 1 {
			t.Errorf("timestamp %+d ms: leader epoch %d, want the batch's 1", tc.ts-t0, res.GetLeaderEpoch())
		}
	}
	if res := list(storagev1.OffsetSpec_OFFSET_SPEC_LATEST, 0); res.GetOffset() != 6 || res.GetLeaderEpoch() != 1 {
		t.Errorf("latest: offset %d leader epoch %d, want 6 and the leader's epoch 1", res.GetOffset(), res.GetLeaderEpoch())
	}
	if res := list(storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0); res.GetOffset() != 0 || res.GetLeaderEpoch() != 1 {
		t.Errorf("earliest: offset %d leader epoch %d, want 0 and the first batch's epoch 1", res.GetOffset(), res.GetLeaderEpoch())
	}
}

// TestFetchKeepsToMaxBytes: only the first partition of a Fetch that has
// records may go over the request's and its own byte limit with its first
// batch (KIP-74); the partitions after it get only what fits, so an
// answer over many lagging partitions stays near max_bytes.
func TestFetchKeepsToMaxBytes(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	big := strings.Repeat("x", 8<<10)
	topics := []string{"empty", "f1", "f2", "f3"}
	for _, topic := range topics {
		c.createTopic(topic, 1, 1)
		if topic == "empty" {
			continue
		}
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte(big)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := produce(c.storage(1), topic, acksAll, 1, b, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	fetchAll := func(maxBytes, partitionMax int32) []*storagev1.FetchPartitionResult {
		t.Helper()
		req := &storagev1.FetchRequest{MaxBytes: maxBytes}
		for _, topic := range topics {
			req.Partitions = append(req.Partitions, &storagev1.FetchPartition{Topic: topic, CurrentLeaderEpoch: -1, MaxBytes: partitionMax})
		}
		resp, err := c.storage(1).Fetch(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPartitions()
	}
	for _, tc := range []struct {
		name                   string
		maxBytes, partitionMax int32
		want                   []bool // which partitions have records
	}{
		{"request limit below one batch", 1000, 0, []bool{false, true, false, false}},
		{"partition limit below one batch", 0, 1000, []bool{false, true, false, false}},
		{"room for two batches", 2 * (8<<10 + 200), 0, []bool{false, true, true, false}},
	} {
		got := fetchAll(tc.maxBytes, tc.partitionMax)
		for i, res := range got {
			if res.GetError() != nil || res.GetHighWatermark() != map[bool]int64{true: 1, false: 0}[topics[i] != "empty"] {
				t.Fatalf("%s: %s answered %v high watermark %d", tc.name, topics[i], res.GetError(), res.GetHighWatermark())
			}
			if has := len(res.GetRecords()) > 0; has != tc.want[i] {
				t.Errorf("%s: %s returned %d bytes, want records: %v", tc.name, topics[i], len(res.GetRecords()), tc.want[i])
			}
		}
	}
}

// TestUnknownProducerCarriesLogStart: the storage node's
// UNKNOWN_PRODUCER_ID refusal carries the partition's log start offset,
// which a Kafka producer needs to recover (the bridge answers it).
func TestUnknownProducerCarriesLogStart(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("pid", 1, 1)
	for range 3 {
		if _, err := produce(c.storage(1), "pid", acksAll, 1, batch(t, "a"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := c.node(1).node.replica("pid", 0)
	if err := r.Log().DeleteRecordsBefore(2); err != nil {
		t.Fatal(err)
	}
	d := c.handler(1).detail("pid", 0, r, fmt.Errorf("append: %w", replica.ErrUnknownProducer))
	if d.GetReason() != commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID || d.GetOffsetRange() == nil || d.GetOffsetRange().GetLogStartOffset() != 2 {
		t.Fatalf("unknown producer: %v, want UNKNOWN_PRODUCER_ID with log start 2", d)
	}
}

// TestListOffsetsByTimestampFindsTheTieredRecord: below the local log
// start the tier finds the batch and the node answers its record, as on
// local disk.
func TestListOffsetsByTimestampFindsTheTieredRecord(t *testing.T) {
	s := newTieredSingle(t, "tierrec", map[string]string{"local.retention.ms": "0"})
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	first := timedBatch(t, recordbatch.CodecNone, t0, t0+10, t0+20) // offsets 0-2
	testwait.Until(t, 15*time.Second, "the first batch to be acknowledged", func() error {
		_, err := produce(s.leader, s.topic, commonv1.Acks_ACKS_ALL, -1, first, 5*time.Second)
		if err != nil && reason(err) != commonv1.Reason_REASON_NOT_LEADER {
			t.Fatalf("produce: %v", err)
		}
		return err
	})
	val := strings.Repeat("v", 900)
	for i := range 40 {
		s.put(fmt.Sprintf("%d-%s", i, val), t0+1000+int64(i))
	}
	r := s.n.replica(s.topic, 0)
	s.c.eventually("the first batch only in the tier", func() bool {
		st, ok := s.n.tieredState(s.topic, 0)
		return ok && st.logStart == 0 && st.end > 3 && r.Log().LogStartOffset() > 3
	})
	resp, err := s.leader.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
		{Topic: s.topic, Spec: storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, TimestampMs: t0 + 5, CurrentLeaderEpoch: -1}}}))
	if err != nil {
		t.Fatal(err)
	}
	if res := resp.Msg.GetPartitions()[0]; res.GetError() != nil || res.GetOffset() != 1 || res.GetTimestampMs() != t0+10 || res.GetLeaderEpoch() != 1 {
		t.Fatalf("timestamp +5 ms: offset %d timestamp %+d ms epoch %d (%v), want offset 1 at +10 ms, epoch 1",
			res.GetOffset(), res.GetTimestampMs()-t0, res.GetLeaderEpoch(), res.GetError())
	}
}
