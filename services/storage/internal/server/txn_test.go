package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

const (
	readCommitted   = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	readUncommitted = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
)

// txnRecords builds a transactional batch of producer pid (epoch 0) from
// sequence seq, one record per value.
func txnRecords(t *testing.T, pid int64, seq int32, values ...string) []byte {
	t.Helper()
	var recs []recordbatch.Record
	for _, v := range values {
		recs = append(recs, recordbatch.Record{Value: []byte(v), Timestamp: time.Now().UnixMilli()})
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, Transactional: true, ProducerID: pid, BaseSequence: seq}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appendTxnRecords appends a transactional batch on the leader's log
// directly: producers cannot send one yet (recordbatch.ValidateProduced
// refuses them until the transaction coordinator exists). The followers
// copy it as any other batch.
func appendTxnRecords(t *testing.T, r *replica.Replica, pid int64, seq int32, values ...string) {
	t.Helper()
	if _, err := r.Log().AppendAsLeader(context.Background(), txnRecords(t, pid, seq, values...), r.View().State.LeaderEpoch); err != nil {
		t.Fatal(err)
	}
}

// fetchAs is fetch at an isolation level, waiting up to wait for a byte.
func fetchAs(ctx context.Context, t *testing.T, c storagev1connect.StorageServiceClient, topic string, offset int64, wait time.Duration,
	iso commonv1.IsolationLevel) *storagev1.FetchPartitionResult {
	t.Helper()
	resp, err := c.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: topic, FetchOffset: offset, CurrentLeaderEpoch: -1}},
		MaxWaitMs:  int32(wait / time.Millisecond), MinBytes: 1, IsolationLevel: iso,
	}))
	if err != nil {
		t.Fatalf("fetch %s at %d: %v", iso, offset, err)
	}
	res := resp.Msg.GetPartitions()[0]
	if res.GetError() != nil {
		t.Fatalf("fetch %s at %d: %v", iso, offset, res.GetError())
	}
	return res
}

// dataValues is values without the control batches (markers).
func dataValues(t *testing.T, b []byte) []string {
	t.Helper()
	var data []byte
	it := recordbatch.NewIter(b, true)
	for h, raw, ok := it.Next(); ok; h, raw, ok = it.Next() {
		if !h.Control() {
			data = append(data, raw...)
		}
	}
	return values(t, data)
}

// aborted lists a fetch answer's aborted transactions as producer id and
// first offset pairs.
func aborted(res *storagev1.FetchPartitionResult) [][2]int64 {
	var out [][2]int64
	for _, a := range res.GetAbortedTransactions() {
		out = append(out, [2]int64{a.GetProducerId(), a.GetFirstOffset()})
	}
	return out
}

func listLatest(t *testing.T, c storagev1connect.StorageServiceClient, topic string, iso commonv1.IsolationLevel) int64 {
	t.Helper()
	resp, err := c.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{IsolationLevel: iso,
		Partitions: []*storagev1.ListOffsetsPartition{{Topic: topic, CurrentLeaderEpoch: -1, Spec: storagev1.OffsetSpec_OFFSET_SPEC_LATEST}}}))
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Msg.GetPartitions()[0]
	if res.GetError() != nil {
		t.Fatal(res.GetError())
	}
	return res.GetOffset()
}

// A read_committed fetch reads up to the last stable offset: not the
// records of an open transaction, nor anything after them, which
// read_uncommitted reads; once the abort marker is appended and
// replicated it reads them all, told that the producer's transaction was
// aborted. ListOffsets latest answers the offset each level reads to.
func TestReadCommittedFetchAndListOffsets(t *testing.T) {
	c := newCluster(t, 2, time.Hour)
	c.createTopic("txn", 2, 2)
	leader, r := c.storage(1), c.node(1).node.replica("txn", 0)
	const pid = 7
	if _, err := produce(leader, "txn", acksAll, 1, batch(t, "before"), 5*time.Second); err != nil { // 0
		t.Fatal(err)
	}
	appendTxnRecords(t, r, pid, 0, "t1", "t2") // 1-2
	// The plain batch after it is acknowledged once replicated, and with
	// it the transactional one before it.
	if _, err := produce(leader, "txn", acksAll, 1, batch(t, "after"), 5*time.Second); err != nil { // 3
		t.Fatal(err)
	}

	res := fetchAs(context.Background(), t, leader, "txn", 0, 0, readUncommitted)
	if got := dataValues(t, res.GetRecords()); !slices.Equal(got, []string{"before", "t1", "t2", "after"}) ||
		res.GetHighWatermark() != 4 || res.GetLastStableOffset() != 1 || len(res.GetAbortedTransactions()) != 0 {
		t.Fatalf("read_uncommitted: %q hw %d lso %d aborted %v; want all four, hw 4, lso 1, none",
			got, res.GetHighWatermark(), res.GetLastStableOffset(), aborted(res))
	}
	res = fetchAs(context.Background(), t, leader, "txn", 0, 0, readCommitted)
	if got := dataValues(t, res.GetRecords()); !slices.Equal(got, []string{"before"}) ||
		res.GetHighWatermark() != 4 || res.GetLastStableOffset() != 1 || len(res.GetAbortedTransactions()) != 0 {
		t.Fatalf("read_committed with the transaction open: %q hw %d lso %d aborted %v; want before, hw 4, lso 1, none",
			got, res.GetHighWatermark(), res.GetLastStableOffset(), aborted(res))
	}
	if res := fetchAs(context.Background(), t, leader, "txn", 1, 100*time.Millisecond, readCommitted); len(res.GetRecords()) != 0 {
		t.Fatalf("read_committed at the last stable offset read %q", dataValues(t, res.GetRecords()))
	}
	if u, c := listLatest(t, leader, "txn", readUncommitted), listLatest(t, leader, "txn", readCommitted); u != 4 || c != 1 {
		t.Fatalf("ListOffsets latest: read_uncommitted %d, read_committed %d; want 4 and 1", u, c)
	}

	if _, err := r.AppendMarker(context.Background(), pid, 0, recordbatch.Marker{Type: recordbatch.ControlAbort}, -1, 5*time.Second); err != nil { // 4
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from    int64
		want    []string
		aborted [][2]int64
	}{
		{0, []string{"before", "t1", "t2", "after"}, [][2]int64{{pid, 1}}},
		{3, []string{"after"}, [][2]int64{{pid, 1}}}, // the marker is among the batches returned
		{5, nil, nil},
	} {
		res := fetchAs(context.Background(), t, leader, "txn", tc.from, 0, readCommitted)
		if got := dataValues(t, res.GetRecords()); !slices.Equal(got, tc.want) || !slices.Equal(aborted(res), tc.aborted) ||
			res.GetHighWatermark() != 5 || res.GetLastStableOffset() != 5 {
			t.Errorf("read_committed from %d after the abort: %q aborted %v hw %d lso %d; want %q aborted %v, hw and lso 5",
				tc.from, got, aborted(res), res.GetHighWatermark(), res.GetLastStableOffset(), tc.want, tc.aborted)
		}
	}
	if res := fetchAs(context.Background(), t, leader, "txn", 0, 0, readUncommitted); len(res.GetAbortedTransactions()) != 0 {
		t.Errorf("read_uncommitted answered aborted transactions %v", aborted(res))
	}
	if u, c := listLatest(t, leader, "txn", readUncommitted), listLatest(t, leader, "txn", readCommitted); u != 5 || c != 5 {
		t.Fatalf("ListOffsets latest after the abort: read_uncommitted %d, read_committed %d; want 5 and 5", u, c)
	}
}

// A read_committed long poll parked at the last stable offset, below the
// high watermark, wakes when the marker that ends the transaction is
// replicated, not at the end of its wait.
func TestReadCommittedLongPollWakesOnMarker(t *testing.T) {
	c := newCluster(t, 2, time.Hour)
	c.createTopic("txnwait", 2, 2)
	leader, r := c.storage(1), c.node(1).node.replica("txnwait", 0)
	const pid = 9
	appendTxnRecords(t, r, pid, 0, "t1")                                                                // 0
	if _, err := produce(leader, "txnwait", acksAll, 1, batch(t, "after"), 5*time.Second); err != nil { // 1
		t.Fatal(err)
	}
	if hw, lso := r.Log().HighWatermark(), r.Log().LastStableOffset(); hw != 2 || lso != 0 {
		t.Fatalf("hw %d lso %d, want 2 and 0", hw, lso)
	}

	// The fetch waits up to the longest long poll; the test gives up on
	// it well before that.
	ctx, cancel := context.WithTimeout(context.Background(), maxLongPoll/2)
	defer cancel()
	got := make(chan *storagev1.FetchPartitionResult, 1)
	go func() { got <- fetchAs(ctx, t, leader, "txnwait", 0, maxLongPoll, readCommitted) }()
	select {
	case res := <-got:
		t.Fatalf("read_committed fetch answered with the transaction open: %q", dataValues(t, res.GetRecords()))
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := r.AppendMarker(context.Background(), pid, 0, recordbatch.Marker{Type: recordbatch.ControlCommit}, -1, 5*time.Second); err != nil { // 2
		t.Fatal(err)
	}
	res := <-got
	if v := dataValues(t, res.GetRecords()); !slices.Equal(v, []string{"t1", "after"}) || len(res.GetAbortedTransactions()) != 0 || res.GetLastStableOffset() != 3 {
		t.Fatalf("woken fetch: %q aborted %v lso %d; want t1 and after, none, lso 3", v, aborted(res), res.GetLastStableOffset())
	}
}

// A read_committed read from the tier that walks a segment stored without
// its aborted transaction index (by an older version) answers only what
// needs none: the batches below the last stable offset before the first
// transactional one; a read that starts at a transactional batch is
// refused rather than answered as if nothing was aborted.
func TestCommittedFromTier(t *testing.T) {
	var log []byte
	add := func(b []byte, base int64) {
		recordbatch.SetBaseOffset(b, base) // outside the CRC
		log = append(log, b...)
	}
	marker, err := recordbatch.BuildMarker(7, 0, 0, recordbatch.Marker{Type: recordbatch.ControlAbort})
	if err != nil {
		t.Fatal(err)
	}
	add(batch(t, "a", "b"), 0)              // 0-1
	add(marker, 2)                          // 2: a marker (of a transaction below)
	add(batch(t, "c"), 3)                   // 3
	add(txnRecords(t, 7, 0, "t1", "t2"), 4) // 4-5
	add(batch(t, "d"), 6)                   // 6
	at := func(off int64) []byte {
		it := recordbatch.NewIter(log, false)
		for pos := 0; ; {
			h, raw, ok := it.Next()
			if !ok {
				t.Fatalf("no batch at %d", off)
			}
			if h.BaseOffset == off {
				return log[pos:]
			}
			pos += len(raw)
		}
	}
	for _, tc := range []struct {
		from, lso int64
		want      []string
		next      int64
		refused   bool
	}{
		{from: 0, lso: 7, want: []string{"a", "b", "c"}, next: 4},
		{from: 0, lso: 3, want: []string{"a", "b"}, next: 3},
		{from: 0, lso: 1, next: 0},
		{from: 3, lso: 7, want: []string{"c"}, next: 4},
		{from: 4, lso: 7, refused: true},
		{from: 4, lso: 4, next: 4}, // above the LSO nothing is read, transactional or not
		{from: 6, lso: 7, want: []string{"d"}, next: 7},
	} {
		rr, err := committedFromTier(partlog.ReadResult{Batches: at(tc.from), NextOffset: tc.from, LastStableOffset: tc.lso}, tc.from)
		if tc.refused {
			if _, ok := err.(*tierTxnError); !ok {
				t.Errorf("from %d lso %d: %v, %q; want refused", tc.from, tc.lso, err, dataValues(t, rr.Batches))
			}
			continue
		}
		if err != nil || !slices.Equal(dataValues(t, rr.Batches), tc.want) || rr.NextOffset != tc.next {
			t.Errorf("from %d lso %d: %q to %d (%v); want %q to %d", tc.from, tc.lso, dataValues(t, rr.Batches), rr.NextOffset, err, tc.want, tc.next)
		}
	}
}

// A read_committed read from the tier answers the batches below the last
// stable offset with the tier's aborted transactions and, when the tier's
// walk ran off its end, the local log's whose markers lie past the tier's
// end (a marker of a tiered transaction on local disk), never one twice.
func TestCommittedTierRead(t *testing.T) {
	l, err := partlog.Open(t.TempDir(), partlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	appendAt := func(b []byte) {
		t.Helper()
		if _, err := l.AppendAsLeader(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	marker := func(pid int64) {
		t.Helper()
		if _, err := l.AppendMarker(ctx, pid, 0, recordbatch.Marker{Type: recordbatch.ControlAbort}, 0); err != nil {
			t.Fatal(err)
		}
	}
	appendAt(txnRecords(t, 9, 0, "p9")) // 0
	appendAt(batch(t, "a"))             // 1
	marker(9)                           // 2: tiered with p9's entry
	appendAt(txnRecords(t, 7, 0, "p7")) // 3
	appendAt(batch(t, "b"))             // 4: the tier ends after it
	marker(7)                           // 5: p7's marker on local disk only
	appendAt(txnRecords(t, 8, 0, "p8")) // 6: open past the last stable offset
	l.SetHighWatermark(l.LogEndOffset())
	tiered := func(from, to int64) []byte { // the log's batches [from, to), as the tier returns them
		rr, err := l.Read(from, 1<<20, to)
		if err != nil {
			t.Fatal(err)
		}
		return rr.Batches
	}
	for _, tc := range []struct {
		name     string
		from     int64
		tier     *tieringv1.FetchTieredResponse
		want     [][2]int64
		wantNext int64
	}{
		{"the tier's walk stopped", 0, &tieringv1.FetchTieredResponse{TieredEndOffset: 5, AbortedComplete: true,
			AbortedTransactions: []*tieringv1.AbortedTransaction{{ProducerId: 9, FirstOffset: 0}}}, [][2]int64{{9, 0}}, 5},
		{"local markers past the tier's end add to it", 0, &tieringv1.FetchTieredResponse{TieredEndOffset: 5,
			AbortedTransactions: []*tieringv1.AbortedTransaction{{ProducerId: 9, FirstOffset: 0}}}, [][2]int64{{9, 0}, {7, 3}}, 5},
		{"from the middle", 3, &tieringv1.FetchTieredResponse{TieredEndOffset: 5}, [][2]int64{{7, 3}}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tier.Records = tiered(tc.from, 5)
			rr := partlog.ReadResult{Batches: tc.tier.GetRecords(), NextOffset: tc.from, LastStableOffset: l.LastStableOffset()}
			if rr.LastStableOffset != 6 {
				t.Fatalf("last stable offset %d, want 6", rr.LastStableOffset)
			}
			got, err := committedTierRead(rr, tc.from, tc.tier, l)
			if err != nil {
				t.Fatal(err)
			}
			var ab [][2]int64
			for _, a := range got.AbortedTxns {
				ab = append(ab, [2]int64{a.ProducerID, a.FirstOffset})
			}
			if fmt.Sprint(ab) != fmt.Sprint(tc.want) || got.NextOffset != tc.wantNext {
				t.Fatalf("aborted %v to %d, want %v to %d", ab, got.NextOffset, tc.want, tc.wantNext)
			}
		})
	}
	// Batches at or above the last stable offset are held back, with
	// their transactions.
	rr := partlog.ReadResult{Batches: tiered(5, 7), NextOffset: 5, LastStableOffset: l.LastStableOffset()}
	got, err := committedTierRead(rr, 5, &tieringv1.FetchTieredResponse{TieredEndOffset: 7, AbortedComplete: true}, l)
	if err != nil || len(got.Batches) == 0 || got.NextOffset != 6 || len(got.AbortedTxns) != 0 {
		t.Fatalf("read at 5: %d bytes to %d, aborted %v, %v; want the marker alone", len(got.Batches), got.NextOffset, got.AbortedTxns, err)
	}
}

// End to end through a tiering process: once a transaction's segment is
// only in the tier, read_committed reads it with its aborted transaction,
// from before it and from its first batch, as read_uncommitted reads it
// without.
func TestReadCommittedFromTheTier(t *testing.T) {
	s := newTieredSingle(t, "txntier", map[string]string{"local.retention.ms": "0"})
	r := s.n.replica(s.topic, 0)
	s.put("before", time.Now().UnixMilli())                                                                                                      // 0
	appendTxnRecords(t, r, 7, 0, "t1")                                                                                                           // 1
	if _, err := r.AppendMarker(context.Background(), 7, 0, recordbatch.Marker{Type: recordbatch.ControlAbort}, -1, 5*time.Second); err != nil { // 2
		t.Fatal(err)
	}
	val := strings.Repeat("v", 900)
	for i := range 40 {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	s.c.eventually("the transaction only in the tier", func() bool {
		st, ok := s.n.tieredState(s.topic, 0)
		return ok && st.logStart == 0 && st.end > 3 && r.Log().LogStartOffset() > 3
	})

	for _, from := range []int64{0, 1} {
		res := fetchAs(context.Background(), t, s.leader, s.topic, from, 0, readCommitted)
		got := dataValues(t, res.GetRecords())
		if len(got) < 2 || !slices.Contains(got, "t1") || fmt.Sprint(aborted(res)) != "[[7 1]]" {
			t.Fatalf("read_committed from the tier at %d: %d records from %.10q, aborted %v; want t1 among them with [[7 1]]", from, len(got), got, aborted(res))
		}
		if from == 0 && got[0] != "before" {
			t.Fatalf("read_committed from the tier at 0 starts with %.10q", got[0])
		}
	}
	res := fetchAs(context.Background(), t, s.leader, s.topic, 1, 0, readUncommitted)
	if got := dataValues(t, res.GetRecords()); len(got) == 0 || got[0] != "t1" || len(res.GetAbortedTransactions()) != 0 {
		t.Fatalf("read_uncommitted from the tier at the transaction: %.40q, aborted %v", got, aborted(res))
	}
}
