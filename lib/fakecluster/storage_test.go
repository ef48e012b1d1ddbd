package fakecluster

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
)

func produceTo(ctx context.Context, t *testing.T, c *Cluster, value string, epoch int16, seq int32) error {
	t.Helper()
	b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, ProducerID: 7, ProducerEpoch: epoch, BaseSequence: seq},
		[]recordbatch.Record{{Value: []byte(value)}})
	if err != nil {
		t.Fatal(err)
	}
	st := storagev1connect.NewStorageServiceClient(http.DefaultClient, c.NodeURL(1))
	_, err = st.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{Topic: "t", Partition: 0, LeaderEpoch: -1, Acks: commonv1.Acks_ACKS_ALL, Records: b}))
	return err
}

func reasonOf(err error) commonv1.Reason { return apierr.DetailOf(err).GetReason() }

// The storage service's producer epoch rules: a newer epoch starts at
// sequence 0 and forgets the older one's sequences; the older one is
// fenced from then on. A batch over max.message.bytes plus the framing
// allowance is refused as too large.
func TestProduceEpochsAndSizeLimit(t *testing.T) {
	c := New(1)
	defer c.Close()
	if err := c.CreateTopic("t", 1, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []struct {
		value string
		epoch int16
		seq   int32
		want  commonv1.Reason // UNSPECIFIED: appended
	}{
		{"a", 0, 0, 0},
		{"b", 0, 1, 0},
		{"c", 1, 3, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE},
		{"c", 1, 0, 0},
		{"d", 0, 2, commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH},
		{"d", 1, 1, 0},
	} {
		err := produceTo(ctx, t, c, step.value, step.epoch, step.seq)
		if got := reasonOf(err); got != step.want || (step.want == 0 && err != nil) {
			t.Fatalf("%q at epoch %d sequence %d: %v, want %v", step.value, step.epoch, step.seq, err, step.want)
		}
	}
	c.UpdateTopicConfigs("t", func(m map[string]string) { m["max.message.bytes"] = "10" })
	err := produceTo(ctx, t, c, strings.Repeat("x", 64<<10), 1, 2)
	if reasonOf(err) != commonv1.Reason_REASON_RECORD_TOO_LARGE {
		t.Fatalf("a batch over the limit: %v, want RECORD_TOO_LARGE", err)
	}
	recs, err := c.Records("t", 0)
	if err != nil || len(recs) != 4 {
		t.Fatalf("log holds %d records (%v), want a, b, c, d", len(recs), err)
	}
}

// A Hang fault after the append holds the answer until the caller gives
// up; the batch is in the log.
func TestHangAfterAppend(t *testing.T) {
	c := New(1)
	defer c.Close()
	if err := c.CreateTopic("t", 1, 1); err != nil {
		t.Fatal(err)
	}
	f := c.AddFault(&Fault{Method: "Produce", Partition: -1, AfterAppend: true, Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := produceTo(ctx, t, c, "a", 0, 0)
	// The server side of the call may see the deadline (sent in the call's
	// timeout header) a moment before the client does: both answer
	// DeadlineExceeded.
	if !errors.Is(err, context.DeadlineExceeded) && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("held produce: %v, want the caller's deadline", err)
	}
	if c.Fired(f) != 1 {
		t.Fatalf("fault fired %d times", c.Fired(f))
	}
	if recs, _ := c.Records("t", 0); len(recs) != 1 {
		t.Fatalf("log holds %d records, want the held one", len(recs))
	}
}
