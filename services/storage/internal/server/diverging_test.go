package server

import (
	"context"
	"errors"
	"testing"
	"time"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// A consumer that sends its last fetched epoch (Kafka's Fetch v12) is
// checked against the leader's history as Kafka's Partition.readRecords
// checks it: told where its log diverged, or out of range for an epoch
// the leader never had; a consumer that sends none is not checked.
func TestFetchDivergingEpoch(t *testing.T) {
	r, err := replica.Open(t.TempDir(), "t", "id", 0, replica.Config{MinISR: 1}, replica.Options{NodeID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	produce := func(n int) {
		t.Helper()
		recs := make([]recordbatch.Record, n)
		for i := range recs {
			recs[i] = recordbatch.Record{Value: []byte("v")}
		}
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Produce(context.Background(), b, replica.AcksLeader, -1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 1 writes offsets 0..4, epoch 3 offsets 5..9.
	r.ApplyState(replica.State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
	produce(5)
	r.ApplyState(replica.State{LeaderID: 1, LeaderEpoch: 3, PartitionEpoch: 2, Replicas: []int32{1}, ISR: []int32{1}})
	produce(5)

	epoch := func(e int32) *int32 { return &e }
	for _, tc := range []struct {
		name       string
		last       *int32
		offset     int64
		want       *storagev1.DivergingEpoch
		outOfRange bool
	}{
		{name: "no epoch sent", last: nil, offset: 7},
		{name: "a negative epoch is none", last: epoch(-1), offset: 7},
		{name: "epoch 1 read to its end", last: epoch(1), offset: 5},
		{name: "epoch 1 read past its end", last: epoch(1), offset: 6, want: &storagev1.DivergingEpoch{Epoch: 1, EndOffset: 5}},
		{name: "epoch 2, which this log never had", last: epoch(2), offset: 7, want: &storagev1.DivergingEpoch{Epoch: 1, EndOffset: 5}},
		{name: "the current epoch", last: epoch(3), offset: 10},
		{name: "an epoch newer than the log's", last: epoch(4), offset: 10, outOfRange: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := diverging(r, &storagev1.FetchPartition{Topic: "t", FetchOffset: tc.offset, CurrentLeaderEpoch: 3, LastFetchedEpoch: tc.last})
			var oor *partlog.OffsetOutOfRangeError
			if tc.outOfRange != errors.As(err, &oor) || (!tc.outOfRange && err != nil) {
				t.Fatalf("error %v, want out of range: %v", err, tc.outOfRange)
			}
			if (d == nil) != (tc.want == nil) || d != nil && (d.GetEpoch() != tc.want.GetEpoch() || d.GetEndOffset() != tc.want.GetEndOffset()) {
				t.Fatalf("diverging %v, want %v", d, tc.want)
			}
		})
	}
	if _, err := diverging(r, &storagev1.FetchPartition{Topic: "t", FetchOffset: 7, CurrentLeaderEpoch: 1, LastFetchedEpoch: epoch(1)}); !errors.Is(err, replica.ErrFencedLeaderEpoch) {
		t.Fatalf("a stale current leader epoch: %v, want fenced", err)
	}
}
