package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// txnLog builds a partition's batches as a leader writes them: data
// batches of three records, transactional when pid is not -1, and
// markers. Offsets run on from 0.
type txnLog struct {
	t    testing.TB
	next int64
	b    []byte
}

func (l *txnLog) data(pid int64) int64 {
	l.t.Helper()
	var recs []recordbatch.Record
	for j := range 3 {
		recs = append(recs, recordbatch.Record{Key: []byte(fmt.Sprintf("k%d", j)), Value: []byte(strings.Repeat("v", 50)), Timestamp: 1_700_000_000_000})
	}
	opts := recordbatch.BuildOptions{}
	if pid >= 0 {
		opts = recordbatch.BuildOptions{Idempotent: true, Transactional: true, ProducerID: pid, BaseSequence: int32(l.next)}
	}
	b, err := recordbatch.Build(opts, recs)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.add(b)
}

func (l *txnLog) marker(pid int64, typ recordbatch.ControlType) int64 {
	l.t.Helper()
	b, err := recordbatch.BuildMarker(pid, 0, 1_700_000_000_000, recordbatch.Marker{Type: typ})
	if err != nil {
		l.t.Fatal(err)
	}
	return l.add(b)
}

func (l *txnLog) add(b []byte) int64 {
	recordbatch.SetBaseOffset(b, l.next)
	recordbatch.SetPartitionLeaderEpoch(b, 1)
	h, _ := recordbatch.PeekHeader(b)
	off := l.next
	l.next = h.NextOffset()
	l.b = append(l.b, b...)
	return off
}

// cut returns the batches written since the last cut, as one segment.
func (l *txnLog) cut() (base int64, seg []byte) {
	h, _ := recordbatch.PeekHeader(l.b)
	base, seg, l.b = h.BaseOffset, l.b, nil
	return base, seg
}

// txnHeader is header() with the segment's transaction index.
func txnHeader(base int64, seg []byte, txns ...partlog.AbortedTxn) *tieringv1.SegmentHeader {
	h := header(base, seg, 1)
	h.TxnIndex = partlog.AppendAbortedTxns([]byte{}, txns)
	return h
}

// txnTier is three tiered segments with aborted transactions whose first
// batches and markers lie in different segments:
//
//	A  0- 2 p1 data     3- 5 p2 data   6 abort p1   7- 9 plain
//	B 10    commit p2  11-13 p3 data  14-16 plain
//	C 17    abort p3   18-20 p4 data  21 abort p4  22-24 plain
type txnTier struct {
	aborted []partlog.AbortedTxn // p1, p3, p4
	segs    [][]byte
	headers []*tieringv1.SegmentHeader
}

func newTxnTier(t testing.TB) txnTier {
	l := &txnLog{t: t}
	var tt txnTier
	p1 := l.data(1)
	l.data(2)
	m1 := l.marker(1, recordbatch.ControlAbort)
	l.data(-1)
	tt.aborted = append(tt.aborted, partlog.AbortedTxn{ProducerID: 1, FirstOffset: p1, LastOffset: m1, LastStableOffset: 3}) // p2 open at 3
	base, seg := l.cut()
	tt.segs, tt.headers = append(tt.segs, seg), append(tt.headers, txnHeader(base, seg, tt.aborted[0]))

	l.marker(2, recordbatch.ControlCommit)
	p3 := l.data(3)
	l.data(-1)
	base, seg = l.cut()
	tt.segs, tt.headers = append(tt.segs, seg), append(tt.headers, txnHeader(base, seg))

	m3 := l.marker(3, recordbatch.ControlAbort)
	p4 := l.data(4)
	m4 := l.marker(4, recordbatch.ControlAbort)
	l.data(-1)
	tt.aborted = append(tt.aborted,
		partlog.AbortedTxn{ProducerID: 3, FirstOffset: p3, LastOffset: m3, LastStableOffset: m3 + 1},
		partlog.AbortedTxn{ProducerID: 4, FirstOffset: p4, LastOffset: m4, LastStableOffset: m4 + 1})
	base, seg = l.cut()
	tt.segs, tt.headers = append(tt.segs, seg), append(tt.headers, txnHeader(base, seg, tt.aborted[1:]...))
	if m1 != 6 || p3 != 11 || m3 != 17 || m4 != 21 || l.next != 25 {
		t.Fatalf("offsets moved: %d %d %d %d %d", m1, p3, m3, m4, l.next)
	}
	return tt
}

func (tt txnTier) upload(t testing.TB, f *fixture) []*tieringv1.SegmentEntry {
	t.Helper()
	var out []*tieringv1.SegmentEntry
	for i, seg := range tt.segs {
		res, err := f.up.Upload(context.Background(), tt.headers[i], bytes.NewReader(seg))
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		out = append(out, res.Entry)
	}
	return out
}

// An upload stores the transaction index the node sent beside the
// segment's other objects and records it as known; a segment without an
// abort marker stores none and is known too.
func TestUploadStoresTheTxnIndex(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tt := newTxnTier(t)
	entries := tt.upload(t, f)
	for i, e := range entries {
		if !e.GetTxnIndexKnown() {
			t.Fatalf("segment %d: index not known: %v", i, e)
		}
		if (e.GetTxnIndexKey() == "") != (len(tt.headers[i].GetTxnIndex()) == 0) {
			t.Fatalf("segment %d: index key %q for %d bytes of index", i, e.GetTxnIndexKey(), len(tt.headers[i].GetTxnIndex()))
		}
		if e.GetTxnIndexKey() == "" {
			continue
		}
		if !strings.HasSuffix(e.GetTxnIndexKey(), ".txnindex") || strings.TrimSuffix(e.GetTxnIndexKey(), ".txnindex") != strings.TrimSuffix(e.GetObjectKey(), ".log") {
			t.Fatalf("segment %d: index key %q beside %q", i, e.GetTxnIndexKey(), e.GetObjectKey())
		}
		got, err := objstore.ReadAll(ctx, f.store.Bucket, e.GetTxnIndexKey(), 0, -1)
		if err != nil || !bytes.Equal(got, tt.headers[i].GetTxnIndex()) {
			t.Fatalf("segment %d: stored index %x, %v; sent %x", i, got, err, tt.headers[i].GetTxnIndex())
		}
	}
	if m := mustManifest(t, f); len(manifest.ObjectKeys(m.GetSegments()[0])) != 4 || len(manifest.ObjectKeys(m.GetSegments()[1])) != 3 {
		t.Fatalf("object keys: %v, %v", manifest.ObjectKeys(m.GetSegments()[0]), manifest.ObjectKeys(m.GetSegments()[1]))
	}
}

// Tiering checks the index it is sent against the segment: one that does
// not decode, or names an offset that is not an abort marker of its
// producer, is refused, and nothing is tiered.
func TestUploadRefusesABadTxnIndex(t *testing.T) {
	tt := newTxnTier(t)
	good := tt.aborted[0]
	for _, tc := range []struct {
		name  string
		index []byte
	}{
		{"torn", partlog.AppendAbortedTxns(nil, []partlog.AbortedTxn{good})[:30]},
		{"a data batch", partlog.AppendAbortedTxns(nil, []partlog.AbortedTxn{{ProducerID: 1, FirstOffset: 0, LastOffset: 3, LastStableOffset: 3}})},
		{"another producer's marker", partlog.AppendAbortedTxns(nil, []partlog.AbortedTxn{{ProducerID: 2, FirstOffset: 3, LastOffset: 6, LastStableOffset: 7}})},
		{"past the segment", partlog.AppendAbortedTxns(nil, []partlog.AbortedTxn{good, {ProducerID: 3, FirstOffset: 11, LastOffset: 17, LastStableOffset: 18}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			h := txnHeader(0, tt.segs[0])
			h.TxnIndex = tc.index
			if _, err := f.up.Upload(context.Background(), h, bytes.NewReader(tt.segs[0])); !errors.Is(err, uploader.ErrInvalid) {
				t.Fatalf("upload: %v, want ErrInvalid", err)
			}
			if end := manifest.TieredEnd(mustManifest(t, f)); end != -1 {
				t.Fatalf("tiered end %d after a refused upload", end)
			}
		})
	}
	// A commit marker is not an abort.
	f2 := newFixture(t)
	if _, err := f2.up.Upload(context.Background(), tt.headers[0], bytes.NewReader(tt.segs[0])); err != nil {
		t.Fatal(err)
	}
	h := txnHeader(10, tt.segs[1], partlog.AbortedTxn{ProducerID: 2, FirstOffset: 3, LastOffset: 10, LastStableOffset: 11})
	if _, err := f2.up.Upload(context.Background(), h, bytes.NewReader(tt.segs[1])); !errors.Is(err, uploader.ErrInvalid) {
		t.Fatalf("an entry naming a commit marker: %v, want ErrInvalid", err)
	}
}

type abortedWant struct {
	offset   int64
	maxBytes int
	next     int64 // end of what the read returns
	aborted  []int64
	complete bool
}

func checkAborted(t *testing.T, f *fixture, tt txnTier, cases []abortedWant, known bool) {
	t.Helper()
	for _, tc := range cases {
		res, err := f.rd.ReadCommitted(context.Background(), testPart, tc.offset, tc.maxBytes)
		if err != nil {
			t.Fatalf("read at %d: %v", tc.offset, err)
		}
		var pids []int64
		for _, a := range res.Aborted {
			pids = append(pids, a.ProducerID)
			if want := tt.aborted[map[int64]int{1: 0, 3: 1, 4: 2}[a.ProducerID]]; a != want {
				t.Fatalf("read at %d: entry %+v, want %+v", tc.offset, a, want)
			}
		}
		if res.Next != tc.next || fmt.Sprint(pids) != fmt.Sprint(tc.aborted) || res.AbortedComplete != tc.complete || res.TxnIndexKnown != known {
			t.Fatalf("read at %d, %d bytes: next %d, aborted %v, complete %v, known %v; want %d, %v, %v, %v",
				tc.offset, tc.maxBytes, res.Next, pids, res.AbortedComplete, res.TxnIndexKnown, tc.next, tc.aborted, tc.complete, known)
		}
	}
}

// A read_committed read from the tier answers the aborted transactions of
// the range it returns, walking on across segments to the markers and
// stopping at the first entry whose last stable offset reaches the end of
// the range, as a local log does; a walk that finds no such entry says it
// ran off the tier's end.
func TestReadCommittedFromTheTier(t *testing.T) {
	f := newFixture(t)
	tt := newTxnTier(t)
	tt.upload(t, f)
	checkAborted(t, f, tt, []abortedWant{
		// p1 starts in the batch read; its entry (LSO 3) stops the walk.
		{offset: 0, maxBytes: 1, next: 3, aborted: []int64{1}, complete: true},
		// Segment A whole: p1; p3 begins past it, and its entry's LSO
		// (18) in segment C stops the walk.
		{offset: 0, maxBytes: 1 << 20, next: 10, aborted: []int64{1}, complete: true},
		// p3's data is in B, its marker in C.
		{offset: 11, maxBytes: 1, next: 14, aborted: []int64{3}, complete: true},
		{offset: 10, maxBytes: 1 << 20, next: 17, aborted: []int64{3}, complete: true},
		// p4 in C; the entries after p4's marker are not in the tier.
		{offset: 17, maxBytes: 1 << 20, next: 25, aborted: []int64{3, 4}, complete: false},
		{offset: 18, maxBytes: 1, next: 21, aborted: []int64{4}, complete: true},
		// Past every marker: nothing, and the walk ran off the end.
		{offset: 22, maxBytes: 1, next: 25, aborted: nil, complete: false},
	}, true)
	// A plain Read lists nothing.
	if res, err := f.rd.Read(context.Background(), testPart, 0, 1); err != nil || res.Aborted != nil {
		t.Fatalf("Read: %+v, %v", res.Aborted, err)
	}
}

// A segment uploaded without a transaction index (by a node from before
// tiered segments carried it) is unknown, and so is any read_committed
// walk that reaches it; one that stops before it is not.
func TestOlderSegmentsHaveAnUnknownTxnIndex(t *testing.T) {
	f := newFixture(t)
	tt := newTxnTier(t)
	tt.headers[1].TxnIndex = nil // segment B from an older node
	entries := tt.upload(t, f)
	if entries[1].GetTxnIndexKnown() || entries[1].GetTxnIndexKey() != "" || !entries[0].GetTxnIndexKnown() {
		t.Fatalf("entries: %v", entries)
	}
	// A manifest written before the field decodes with the entry unknown.
	b, err := proto.Marshal(&tieringv1.Manifest{FormatVersion: manifest.FormatVersion, Topic: testPart.Topic, TopicId: testTopicID,
		LogStartOffset: 0, Segments: []*tieringv1.SegmentEntry{{SegmentId: "s", ObjectKey: "k", BaseOffset: 0, LastOffset: 9, SizeBytes: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := manifest.Decode(b); err != nil || m.GetSegments()[0].GetTxnIndexKnown() {
		t.Fatalf("an older manifest: %v, %v", m, err)
	}
	checkAborted(t, f, tt, []abortedWant{
		{offset: 0, maxBytes: 1, next: 3, aborted: []int64{1}, complete: true}, // stops in A
	}, true)
	checkAborted(t, f, tt, []abortedWant{
		{offset: 0, maxBytes: 1 << 20, next: 10, aborted: []int64{1}, complete: false}, // reaches B
		{offset: 11, maxBytes: 1, next: 14, aborted: nil, complete: false},
	}, false)
}

// The compactor's merge keeps the index: the merged object's is the
// inputs' entries in order when every input's is known, and unknown
// otherwise; reads answer as before the merge. Key compaction keeps every
// marker, so its output's index is the same.
func TestCompactionMergesTxnIndexes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ known, compact bool }{{true, false}, {false, false}, {true, true}} {
		known := tc.known
		t.Run(fmt.Sprintf("inputs known %v, key compaction %v", tc.known, tc.compact), func(t *testing.T) {
			f := newFixture(t)
			tt := newTxnTier(t)
			if !known {
				tt.headers[2].TxnIndex = nil
			}
			tt.upload(t, f)
			c := &compactor.Compactor{Store: f.store, SpoolDir: t.TempDir(), Logger: discardLogger()}
			res, err := c.Partition(ctx, testPart, compactor.Options{Compact: tc.compact, TombstoneRetention: time.Hour})
			if err != nil || res.Runs != 1 {
				t.Fatalf("compaction: %+v, %v", res, err)
			}
			a := manifest.Active(res.Manifest)
			if len(a) != 1 || a[0].GetTxnIndexKnown() != known {
				t.Fatalf("merged entries: %v", a)
			}
			f.rd.SetManifest(testPart, res.Manifest)
			if !known {
				if a[0].GetTxnIndexKey() != "" {
					t.Fatalf("an unknown merged index is stored: %v", a[0])
				}
				return
			}
			got, err := objstore.ReadAll(ctx, f.store.Bucket, a[0].GetTxnIndexKey(), 0, -1)
			if err != nil || !bytes.Equal(got, partlog.AppendAbortedTxns(nil, tt.aborted)) {
				t.Fatalf("merged index %x, %v", got, err)
			}
			checkAborted(t, f, tt, []abortedWant{
				{offset: 0, maxBytes: 1, next: 3, aborted: []int64{1}, complete: true},
				{offset: 11, maxBytes: 1, next: 14, aborted: []int64{3}, complete: true},
				{offset: 22, maxBytes: 1, next: 25, aborted: nil, complete: false},
			}, true)
		})
	}
}

// An empty transaction index (a segment without an abort marker) stays
// told apart from none (a node from before the field) on the wire.
func TestEmptyTxnIndexHasPresence(t *testing.T) {
	for _, tc := range []struct {
		sent  []byte
		known bool
	}{{[]byte{}, true}, {nil, false}} {
		b, err := proto.Marshal(&tieringv1.SegmentHeader{Topic: "t", TxnIndex: tc.sent})
		if err != nil {
			t.Fatal(err)
		}
		var h tieringv1.SegmentHeader
		if err := proto.Unmarshal(b, &h); err != nil {
			t.Fatal(err)
		}
		if (h.TxnIndex != nil) != tc.known {
			t.Fatalf("sent %#v, received %#v", tc.sent, h.TxnIndex)
		}
	}
}

// Retention's orphan collection leaves a named transaction index alone,
// and expiry deletes it with its segment.
func TestRetentionKnowsTxnIndexes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	entries := newTxnTier(t).upload(t, f)
	ti := &topicInfo{ID: testTopicID, Partitions: 1, Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}}
	tp := &topics{describe: func(context.Context) ([]*controllerv1.TopicDescription, error) { return nil, nil }, loaded: true, lastTry: time.Now(),
		byName: map[string]*topicInfo{testPart.Topic: ti}}
	// A clock a minute ahead: every object is past the 1ms grace.
	ret := &retention{store: f.store, topics: tp, reader: f.rd, grace: time.Millisecond, logger: discardLogger(),
		now: func() time.Time { return time.Now().Add(time.Minute) }}
	exists := func(key string) bool {
		t.Helper()
		ok, err := f.store.Bucket.Exists(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	var keys []string
	for _, e := range entries {
		if e.GetTxnIndexKey() != "" {
			keys = append(keys, e.GetTxnIndexKey())
		}
	}
	if len(keys) != 2 {
		t.Fatalf("index keys %v, want two", keys)
	}
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !exists(k) {
			t.Fatalf("orphan collection deleted the named index %s", k)
		}
	}
	ti.Configs["retention.ms"] = "1000" // the batches are stamped in 2023
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	if n := len(manifest.Active(mustManifest(t, f))); n != 0 {
		t.Fatalf("%d entries left after expiry", n)
	}
	for _, k := range keys {
		if exists(k) {
			t.Fatalf("expiry left the index %s", k)
		}
	}
}
