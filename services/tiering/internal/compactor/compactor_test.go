package compactor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/objstore/s3test"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

const testTopicID = "0b7e1f4e-5a0c-4d8e-8f6a-3c2d1b0a9f88"

var testPart = manifest.Partition{Topic: "orders", TopicID: testTopicID, Partition: 0}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixture struct {
	faulty *objstore.Faulty
	store  *manifest.Store
	up     *uploader.Uploader
	rd     *reader.Reader
	comp   *Compactor

	mu      sync.Mutex
	retired []string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	b := s3test.Bucket(t)
	f := &fixture{faulty: objstore.NewFaulty(b)}
	f.store = &manifest.Store{Bucket: f.faulty, Prefix: "strata"}
	f.up = &uploader.Uploader{Store: f.store, SpoolDir: t.TempDir(), Logger: discard()}
	f.rd = reader.New(reader.Config{Store: f.store, BlockSize: 64 << 10, CacheBytes: 1 << 20})
	f.comp = &Compactor{Store: f.store, MinObjectBytes: 1 << 20, MaxObjectBytes: 64 << 20, SpoolDir: t.TempDir(), Logger: discard(),
		Retire: func(keys []string) {
			f.mu.Lock()
			f.retired = append(f.retired, keys...)
			f.mu.Unlock()
		}}
	return f
}

// stamp sets a built batch's base offset and leader epoch as a leader would.
func stamp(t testing.TB, b []byte, base int64, epoch int32) []byte {
	t.Helper()
	recordbatch.SetBaseOffset(b, base)
	recordbatch.SetPartitionLeaderEpoch(b, epoch)
	return b
}

// segmentBytes builds n batches of three records from base.
func segmentBytes(t testing.TB, base int64, n, size int, epoch int32) []byte {
	t.Helper()
	var out []byte
	off := base
	for i := range n {
		var recs []recordbatch.Record
		for j := range 3 {
			recs = append(recs, recordbatch.Record{Key: []byte(fmt.Sprintf("k%d", j)), Value: []byte(fmt.Sprintf("%d-%d-%s", off, j, strings.Repeat("x", size))), Timestamp: 1_700_000_000_000 + int64(i)})
		}
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stamp(t, b, off, epoch)...)
		off += 3
	}
	return out
}

func header(data []byte, epoch int32) *tieringv1.SegmentHeader {
	first, _ := recordbatch.PeekHeader(data)
	last := first.BaseOffset
	for b := data; len(b) > 0; {
		h, _ := recordbatch.PeekHeader(b)
		last, b = h.LastOffset(), b[h.Size():]
	}
	return &tieringv1.SegmentHeader{Topic: testPart.Topic, TopicId: testTopicID, Partition: 0, LeaderEpoch: epoch,
		BaseOffset: first.BaseOffset, LastOffset: last, SizeBytes: int64(len(data))}
}

func (f *fixture) upload(t testing.TB, seg []byte, epoch int32) {
	t.Helper()
	if _, err := f.up.Upload(context.Background(), header(seg, epoch), bytes.NewReader(seg)); err != nil {
		t.Fatal(err)
	}
}

// uploadSegments uploads n segments of batches batches each from 0 and
// returns every batch by base offset.
func (f *fixture) uploadSegments(t testing.TB, n, batches int) (map[int64][]byte, int64) {
	t.Helper()
	all := map[int64][]byte{}
	var off int64
	for i := range n {
		seg := segmentBytes(t, off, batches, 200, int32(1+i/3))
		f.upload(t, seg, int32(1+i/3))
		it := recordbatch.NewIter(seg, true)
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			all[h.BaseOffset] = b
		}
		off += int64(batches) * 3
	}
	return all, off
}

// readAll reads the tier from offset 0 to end in small fetches and checks
// that batches come contiguous: no gap, no duplicate.
func readAll(ctx context.Context, rd *reader.Reader, end int64, maxBytes int) ([][]byte, error) {
	var out [][]byte
	var next int64
	for next < end {
		res, err := rd.Read(ctx, testPart, next, maxBytes)
		if err != nil {
			return nil, fmt.Errorf("read %d: %w", next, err)
		}
		if len(res.Records) == 0 {
			return nil, fmt.Errorf("read %d: nothing returned", next)
		}
		it := recordbatch.NewIter(res.Records, true)
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			if h.BaseOffset != next {
				return nil, fmt.Errorf("batch at %d, expected %d (gap or duplicate)", h.BaseOffset, next)
			}
			out = append(out, b)
			next = h.NextOffset()
		}
		if it.Err() != nil {
			return nil, it.Err()
		}
	}
	return out, nil
}

func TestMergeKeepsEveryByte(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	batches, end := f.uploadSegments(t, 6, 20) // ~13 KiB each
	// A big object in the middle breaks the run.
	big := segmentBytes(t, end, 400, 200, 3)
	f.upload(t, big, 3)
	end += 1200
	small := segmentBytes(t, end, 20, 200, 3)
	f.upload(t, small, 3)
	end += 60
	f.comp.MinObjectBytes = int64(len(big)) // the big object is not below it

	before, err := readAll(ctx, f.rd, end, 1)
	if err != nil {
		t.Fatal(err)
	}
	m0, _, _ := f.store.Load(ctx, testPart)
	res, err := f.comp.Partition(ctx, testPart, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 1 || res.ObjectsRemoved != 6 {
		t.Fatalf("result %+v", res)
	}
	m, _, _ := f.store.Load(ctx, testPart)
	a := manifest.Active(m)
	if len(a) != 3 || a[0].GetBaseOffset() != 0 || a[0].GetLastOffset() != 359 || a[1].GetBaseOffset() != 360 || a[0].GetCompacted() {
		t.Fatalf("manifest after merge: %v", a)
	}
	if m.GetLogStartOffset() != m0.GetLogStartOffset() || manifest.TieredEnd(m) != manifest.TieredEnd(m0) || m.GetLeaderEpoch() != m0.GetLeaderEpoch() {
		t.Fatalf("merge moved the tier: %v vs %v", m, m0)
	}
	if len(a[0].GetLeaderEpochs()) != 2 || a[0].GetLeaderEpochs()[1].GetStartOffset() != 180 {
		t.Fatalf("epochs %v", a[0].GetLeaderEpochs())
	}
	// The merged object is the source objects concatenated.
	var want []byte
	for _, e := range manifest.Active(m0)[:6] {
		b, err := objstore.ReadAll(ctx, f.store.Bucket, e.GetObjectKey(), 0, -1)
		if err != nil {
			t.Fatal(err) // old objects are retired, not deleted
		}
		want = append(want, b...)
	}
	got, err := objstore.ReadAll(ctx, f.store.Bucket, a[0].GetObjectKey(), 0, -1)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("merged object differs: %v", err)
	}
	if len(f.retired) != 18 {
		t.Fatalf("retired %d keys", len(f.retired))
	}
	// Every offset reads the same bytes, through a fresh reader and through
	// the one that cached the old manifest.
	for _, rd := range []*reader.Reader{reader.New(reader.Config{Store: f.store, BlockSize: 4096}), f.rd} {
		after, err := readAll(ctx, rd, end, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Fatalf("%d batches after, %d before", len(after), len(before))
		}
		for i := range after {
			if !bytes.Equal(after[i], before[i]) {
				t.Fatalf("batch %d differs", i)
			}
		}
		for off := int64(0); off < end; off += 7 {
			r, err := rd.Read(ctx, testPart, off, 1)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := recordbatch.PeekHeader(r.Records)
			if h.BaseOffset > off || h.LastOffset() < off || (off < 360 && !bytes.Equal(r.Records, batches[h.BaseOffset])) {
				t.Fatalf("read %d got batch %d", off, h.BaseOffset)
			}
		}
	}
	// Nothing left to merge.
	if res, err := f.comp.Partition(ctx, testPart, Options{}); err != nil || res.Runs != 0 {
		t.Fatalf("second round: %+v %v", res, err)
	}
}

// TestSwapRetriesUnderConcurrentUpload: an upload lands between the
// compactor's manifest read and its conditional write; the write fails its
// condition, the compactor reapplies on the new manifest, and both the
// merged entry and the uploaded one are there.
func TestSwapRetriesUnderConcurrentUpload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, end := f.uploadSegments(t, 4, 10)
	next := segmentBytes(t, end, 10, 200, 5)
	calls := 0
	f.comp.beforeSwap = func(attempt int) {
		calls++
		if attempt == 0 {
			f.upload(t, next, 5)
		}
	}
	res, err := f.comp.Partition(ctx, testPart, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || res.Runs != 1 {
		t.Fatalf("swap attempts %d, result %+v", calls, res)
	}
	m, _, _ := f.store.Load(ctx, testPart)
	a := manifest.Active(m)
	if len(a) != 2 || a[0].GetLastOffset() != end-1 || a[1].GetBaseOffset() != end || manifest.TieredEnd(m) != end+30 || m.GetLeaderEpoch() != 5 {
		t.Fatalf("manifest: %v", m)
	}
	if _, err := readAll(ctx, reader.New(reader.Config{Store: f.store}), end+30, 1000); err != nil {
		t.Fatal(err)
	}
}

// TestRunChangedAbortsCleanly: retention moves the run meanwhile; the
// compactor changes nothing, deletes its new objects, and succeeds next
// round on what is left.
func TestRunChangedAbortsCleanly(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, end := f.uploadSegments(t, 4, 10)
	f.comp.beforeSwap = func(attempt int) {
		if attempt > 0 {
			return
		}
		_, err := f.store.Update(ctx, testPart, func(m *tieringv1.Manifest) error {
			m.Segments[0].State = tieringv1.SegmentState_SEGMENT_STATE_DELETING
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	_, err := f.comp.Partition(ctx, testPart, Options{})
	if !errors.Is(err, ErrRunChanged) {
		t.Fatalf("got %v", err)
	}
	m, _, _ := f.store.Load(ctx, testPart)
	if len(m.GetSegments()) != 4 || m.GetLogStartOffset() != 30 {
		t.Fatalf("manifest: %v", m)
	}
	if n := countObjects(t, f); n != 12 {
		t.Fatalf("%d objects in the bucket, want the 12 named", n)
	}
	f.comp.beforeSwap = nil
	if res, err := f.comp.Partition(ctx, testPart, Options{}); err != nil || res.Runs != 1 {
		t.Fatalf("next round: %+v %v", res, err)
	}
	m, _, _ = f.store.Load(ctx, testPart)
	if a := manifest.Active(m); len(a) != 1 || a[0].GetBaseOffset() != 30 || a[0].GetLastOffset() != end-1 {
		t.Fatalf("manifest: %v", m)
	}
}

func countObjects(t *testing.T, f *fixture) int {
	t.Helper()
	n := 0
	err := f.store.Bucket.List(context.Background(), manifest.Dir(f.store.Prefix, testPart)+"/", func(o objstore.ObjectInfo) error {
		if !strings.HasSuffix(o.Key, manifest.FileName) {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrentReadersSeeNoGap: readers scan the tier while the
// compactor merges it twice over, and retired objects are deleted at once
// (harsher than the grace period): every scan is contiguous and
// byte-identical.
func TestConcurrentReadersSeeNoGap(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, end := f.uploadSegments(t, 12, 10)
	before, err := readAll(ctx, f.rd, end, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	f.comp.Retire = func(keys []string) {
		for _, k := range keys {
			f.store.Bucket.Delete(ctx, k)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const readers = 4
	errs := make(chan error, 8)
	var scans [readers]atomic.Int64 // full scans each reader completed
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := reader.New(reader.Config{Store: f.store, BlockSize: 4096, CacheBytes: 64 << 10, ManifestTTL: time.Millisecond})
			for n := 0; ; n++ {
				select {
				case <-stop:
					if n > 0 {
						return
					}
				default:
				}
				got, err := readAll(ctx, rd, end, 500*(i+1))
				if err != nil {
					errs <- err
					return
				}
				for j := range got {
					if !bytes.Equal(got[j], before[j]) {
						errs <- fmt.Errorf("reader %d: batch %d differs", i, j)
						return
					}
				}
				scans[i].Add(1)
			}
		}()
	}
	// scanned waits until every reader has completed a scan that began
	// after the last compaction, so each state is read by all of them.
	scanned := func(what string) {
		t.Helper()
		var from [readers]int64
		for i := range from {
			from[i] = scans[i].Load()
		}
		testwait.Until(t, 60*time.Second, "every reader to scan "+what, func() error {
			if len(errs) > 0 {
				return nil // a reader failed and stopped; reported below
			}
			var behind []int
			for i := range from {
				if scans[i].Load() < from[i]+2 { // the scan under way may have begun before
					behind = append(behind, i)
				}
			}
			if len(behind) > 0 {
				return fmt.Errorf("readers %v have not", behind)
			}
			return nil
		})
	}
	var size int64
	for _, e := range manifest.Active(mustLoad(t, f)) {
		size = max(size, e.GetSizeBytes())
	}
	for _, maxB := range []int64{2 * size, 4 * size, 100 * size} {
		f.comp.MaxObjectBytes = maxB
		f.comp.MinObjectBytes = maxB
		if _, err := f.comp.Partition(ctx, testPart, Options{}); err != nil {
			t.Fatal(err)
		}
		scanned(fmt.Sprintf("after the compaction to %d-byte objects", maxB))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if a := manifest.Active(mustLoad(t, f)); len(a) != 1 {
		t.Fatalf("%d entries left", len(a))
	}
}

func mustLoad(t *testing.T, f *fixture) *tieringv1.Manifest {
	t.Helper()
	m, _, err := f.store.Load(context.Background(), testPart)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFaultsLeaveTheManifestWhole: a store error at any step (reading a
// source object, uploading the merged object or an index, the manifest
// write) fails the round without touching the manifest; a later round
// succeeds.
func TestFaultsLeaveTheManifestWhole(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, end := f.uploadSegments(t, 5, 10)
	before, err := readAll(ctx, f.rd, end, 1000)
	if err != nil {
		t.Fatal(err)
	}
	m0 := mustLoad(t, f)
	faults := []objstore.Fault{
		{Op: objstore.OpGetRange, Key: func(k string) bool { return strings.HasSuffix(k, ".log") }, Err: objstore.ErrInjected, Count: 1},
		{Op: objstore.OpUpload, Key: func(k string) bool { return strings.HasSuffix(k, ".log") }, Err: objstore.ErrInjected, Count: 1},
		{Op: objstore.OpUpload, Key: func(k string) bool { return strings.HasSuffix(k, ".timeindex") }, Err: objstore.ErrInjected, Count: 1},
		{Op: objstore.OpPutIf, Err: objstore.ErrInjected, Count: 1},
		{Op: objstore.OpGet, Err: objstore.ErrInjected, Count: 3}, // Load tries three times
	}
	for i, fault := range faults {
		f.faulty.AddFault(fault)
		if _, err := f.comp.Partition(ctx, testPart, Options{}); !errors.Is(err, objstore.ErrInjected) {
			t.Fatalf("fault %d: got %v", i, err)
		}
		f.faulty.Clear()
		m := mustLoad(t, f)
		if m.GetVersion() != m0.GetVersion() || len(m.GetSegments()) != 5 {
			t.Fatalf("fault %d: manifest changed: %v", i, m)
		}
		got, err := readAll(ctx, reader.New(reader.Config{Store: f.store}), end, 1000)
		if err != nil || len(got) != len(before) {
			t.Fatalf("fault %d: read after: %v", i, err)
		}
	}
	if res, err := f.comp.Partition(ctx, testPart, Options{}); err != nil || res.Runs != 1 {
		t.Fatalf("after faults: %+v %v", res, err)
	}
	got, err := readAll(ctx, reader.New(reader.Config{Store: f.store}), end, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for j := range got {
		if !bytes.Equal(got[j], before[j]) {
			t.Fatalf("batch %d differs", j)
		}
	}
}

type rec struct {
	key, value string // "" key: nil key; "-" value: tombstone
}

func buildBatch(t *testing.T, base int64, ts int64, codec recordbatch.Codec, recs ...rec) []byte {
	t.Helper()
	var rs []recordbatch.Record
	for i, r := range recs {
		x := recordbatch.Record{Timestamp: ts + int64(i), Headers: []recordbatch.RecordHeader{{Key: "h", Value: []byte(r.value)}}}
		if r.key != "" {
			x.Key = []byte(r.key)
		}
		if r.value != "-" {
			x.Value = []byte(r.value)
		}
		rs = append(rs, x)
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{Codec: codec}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return stamp(t, b, base, 1)
}

func TestKeyCompaction(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now()
	f.comp.Now = func() time.Time { return now }
	old, recent := now.Add(-48*time.Hour).UnixMilli(), now.Add(-time.Hour).UnixMilli()
	none := recordbatch.CodecNone
	segA := bytes.Join([][]byte{
		buildBatch(t, 0, old, none, rec{"k1", "a"}, rec{"k2", "a"}, rec{"", "x"}),
		buildBatch(t, 3, old, none, rec{"k1", "b"}, rec{"k2", "b"}), // all shadowed: empty batch
		buildBatch(t, 5, old, none, rec{"k3", "-"}, rec{"k4", "a"}), // expired tombstone, shadowed k4
	}, nil)
	last := buildBatch(t, 13, recent, none, rec{"", "y"})
	segB := bytes.Join([][]byte{
		buildBatch(t, 7, recent, none, rec{"k5", "-"}, rec{"k4", "b"}), // live tombstone
		buildBatch(t, 9, old, none, rec{"k1", "c"}, rec{"k2", "-"}),    // k2's newest: an expired tombstone
		buildBatch(t, 11, recent, recordbatch.CodecGzip, rec{"k6", "a"}, rec{"k6", "b"}),
		last,
	}, nil)
	f.upload(t, segA, 1)
	f.upload(t, segB, 1)

	res, err := f.comp.Partition(ctx, testPart, Options{Compact: true, TombstoneRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 1 || res.RecordsDropped != 8 {
		t.Fatalf("result %+v", res)
	}
	m := mustLoad(t, f)
	a := manifest.Active(m)
	if len(a) != 1 || a[0].GetBaseOffset() != 0 || a[0].GetLastOffset() != 13 || !a[0].GetCompacted() {
		t.Fatalf("manifest: %v", a)
	}
	got, err := readAll(ctx, reader.New(reader.Config{Store: f.store}), 14, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	var survivors []string
	for _, b := range got {
		batch, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, batch.Header.BaseOffset)
		for _, r := range batch.Records {
			v := string(r.Value)
			if r.Value == nil {
				v = "-"
			}
			if string(r.Headers[0].Value) != v && v != "-" {
				t.Fatalf("headers lost: %v", r)
			}
			survivors = append(survivors, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, v))
		}
		if batch.Header.ProducerID != -1 || batch.Header.PartitionLeaderEpoch != 1 {
			t.Fatalf("batch header %+v", batch.Header)
		}
	}
	if fmt.Sprint(bases) != "[0 3 5 7 9 11 13]" {
		t.Fatalf("batch bases %v", bases)
	}
	want := "[2:=x 7:k5=- 8:k4=b 9:k1=c 12:k6=b 13:=y]"
	if fmt.Sprint(survivors) != want {
		t.Fatalf("survivors %v, want %s", survivors, want)
	}
	if !bytes.Equal(got[len(got)-1], last) {
		t.Fatal("an untouched batch was re-encoded")
	}
	// Every offset is still readable (inside a batch, maybe an emptied one).
	rd := reader.New(reader.Config{Store: f.store})
	for off := range int64(14) {
		r, err := rd.Read(ctx, testPart, off, 1)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := recordbatch.PeekHeader(r.Records)
		if h.BaseOffset > off || h.LastOffset() < off {
			t.Fatalf("offset %d read batch %d..%d", off, h.BaseOffset, h.LastOffset())
		}
	}
	// Compacting again changes nothing; once the live tombstone expires it goes too.
	if res, err := f.comp.Partition(ctx, testPart, Options{Compact: true, TombstoneRetention: 24 * time.Hour}); err != nil || res.Runs != 0 {
		t.Fatalf("again: %+v %v", res, err)
	}
	if res, err := f.comp.Partition(ctx, testPart, Options{Compact: true, TombstoneRetention: time.Minute}); err != nil || res.Runs != 1 || res.RecordsDropped != 1 {
		t.Fatalf("expired: %+v %v", res, err)
	}
}
