package client

import (
	"slices"
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// TestReadCommittedDropsAbortedRecords: from a read_committed answer the
// consumer returns neither the records of an aborted transaction nor the
// markers, and its position moves past all of them; from a
// read_uncommitted answer it returns the aborted records too.
func TestReadCommittedDropsAbortedRecords(t *testing.T) {
	var log []byte
	add := func(b []byte, err error, base int64) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		recordbatch.SetBaseOffset(b, base)
		log = append(log, b...)
	}
	batch := func(pid int64, txn bool, values ...string) ([]byte, error) {
		recs := make([]recordbatch.Record, len(values))
		for i, v := range values {
			recs[i] = recordbatch.Record{Value: []byte(v), Timestamp: 1}
		}
		return recordbatch.Build(recordbatch.BuildOptions{ProducerID: pid, Idempotent: true, Transactional: txn}, recs)
	}
	b, err := batch(7, true, "aborted-1", "aborted-2")
	add(b, err, 0)
	b, err = batch(8, false, "plain")
	add(b, err, 2)
	b, err = recordbatch.BuildMarker(7, 0, 1, recordbatch.Marker{Type: recordbatch.ControlAbort})
	add(b, err, 3)
	b, err = batch(7, true, "committed")
	add(b, err, 4)
	b, err = recordbatch.BuildMarker(7, 0, 1, recordbatch.Marker{Type: recordbatch.ControlCommit})
	add(b, err, 5)

	pr := &storagev1.FetchPartitionResult{Records: log, AbortedTransactions: []*storagev1.AbortedTransaction{{ProducerId: 7, FirstOffset: 0}}}
	tp := topicPartition{topic: "t", partition: 0}
	for _, tc := range []struct {
		isolation commonv1.IsolationLevel
		want      []string
	}{
		{commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, []string{"plain", "committed"}},
		{commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, []string{"aborted-1", "aborted-2", "plain", "committed"}},
	} {
		req := &storagev1.FetchRequest{IsolationLevel: tc.isolation}
		recs, next, bad := decodeFrom(tp, "", log, 0, abortedFilter(req, pr))
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		if bad != nil || next != 6 || !slices.Equal(got, tc.want) {
			t.Errorf("%v: records %q, next %d, %v; want %q and 6", tc.isolation, got, next, bad, tc.want)
		}
	}
}
