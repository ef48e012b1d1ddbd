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
)

// TestListOffsetsByTimestampBelowLocalStart: with offsets below the local
// log start only in the tier, ListOffsets by timestamp finds them there
// (the first batch whose timestamp is at or after the time asked), then
// on local disk, then the high watermark; with the tiering service down
// it answers UNAVAILABLE rather than a later offset from local disk.
func TestListOffsetsByTimestampBelowLocalStart(t *testing.T) {
	s := newTieredSingle(t, "times", map[string]string{"local.retention.ms": "0"})
	c, n, tier, topic, leader := s.c, s.n, s.tier, s.topic, s.leader
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	val := strings.Repeat("v", 900) // 16 one-record batches per segment
	for i := range 70 {
		s.put(fmt.Sprintf("%d-%s", i, val), t0+int64(i)*1000)
	}
	r := n.replica(topic, 0)
	c.eventually("offsets below 64 only in the tier", func() bool {
		st, ok := n.tieredState(topic, 0)
		return ok && st.end == 64 && st.logStart == 0 && r.Log().LogStartOffset() == 64
	})
	byTime := func(ts int64) *storagev1.ListOffsetsPartitionResult {
		t.Helper()
		resp, err := leader.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
			{Topic: topic, Spec: storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, TimestampMs: ts, CurrentLeaderEpoch: -1}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPartitions()[0]
	}
	for _, tc := range []struct {
		ts, offset, tsOut int64
	}{
		{t0 - 5000, 0, t0},                   // before everything: the tier's first batch
		{t0 + 10*1000, 10, t0 + 10*1000},     // in the tier
		{t0 + 10*1000 - 1, 10, t0 + 10*1000}, // between two batches
		{t0 + 63*1000, 63, t0 + 63*1000},     // the tier's last batch
		{t0 + 66*1000, 66, t0 + 66*1000},     // on local disk
		{t0 + 100*1000, 70, -1},              // after everything: the high watermark
	} {
		res := byTime(tc.ts)
		if res.GetError() != nil || res.GetOffset() != tc.offset || res.GetTimestampMs() != tc.tsOut {
			t.Errorf("timestamp %+d ms: offset %d timestamp %d (%v), want offset %d timestamp %d",
				tc.ts-t0, res.GetOffset(), res.GetTimestampMs(), res.GetError(), tc.offset, tc.tsOut)
		}
		if tc.offset < 64 && res.GetLeaderEpoch() != 1 {
			t.Errorf("timestamp %+d ms: leader epoch %d, want 1", tc.ts-t0, res.GetLeaderEpoch())
		}
	}

	tier.kill()
	if res := byTime(t0 + 10*1000); res.GetError().GetCode() != commonv1.Code_CODE_UNAVAILABLE {
		t.Fatalf("tier down: %v offset %d, want UNAVAILABLE", res.GetError(), res.GetOffset())
	}
}
