package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// TestConsumerOutOfRangeMakesProgress: a consumer told OUT_OF_RANGE moves
// to the log start when its position is below it, and fails with
// ErrOffsetOutOfRange when the reported range holds its position (a gap in
// the log) instead of fetching the same offset forever.
func TestConsumerOutOfRangeMakesProgress(t *testing.T) {
	setup := func(t *testing.T, hint *commonv1.OffsetRangeHint, count int) (*fakecluster.Cluster, *Consumer) {
		t.Helper()
		fc := newFake(t, 1, "t", 1)
		p := newProducer(t, fc, Linger(0))
		for i := range 5 {
			if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		fc.AddFault(&fakecluster.Fault{Method: "Fetch", Topic: "t", Partition: 0, Count: count,
			Code: connect.CodeOutOfRange, Reason: commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE, Range: hint})
		c := newConsumer(t, fc)
		c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(1)}})
		return fc, c
	}
	t.Run("below the log start", func(t *testing.T) {
		_, c := setup(t, &commonv1.OffsetRangeHint{LogStartOffset: 3, HighWatermark: 5}, 1)
		got := pollN(t, c, 2)
		if got[0].Offset != 3 || got[1].Offset != 4 {
			t.Fatalf("read offsets %d, %d; want 3, 4", got[0].Offset, got[1].Offset)
		}
	})
	t.Run("inside the reported range", func(t *testing.T) {
		_, c := setup(t, &commonv1.OffsetRangeHint{LogStartOffset: 0, HighWatermark: 5}, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Poll(ctx)
		if !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Poll = %v, want ErrOffsetOutOfRange", err)
		}
		if pos, _ := c.Position("t", 0); pos != 1 {
			t.Fatalf("position %d, want 1 (unchanged)", pos)
		}
	})
}
