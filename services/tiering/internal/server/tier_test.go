package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/objstore/s3test"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

const testTopicID = "0b7e1f4e-5a0c-4d8e-8f6a-3c2d1b0a9f88"

var testPart = manifest.Partition{Topic: "orders", TopicID: testTopicID, Partition: 0}

// fixture is the embedded S3 server over real HTTP, a fault-injecting
// bucket over it, and the tiering pieces on top.
type fixture struct {
	faulty *objstore.Faulty
	store  *manifest.Store
	up     *uploader.Uploader
	rd     *reader.Reader
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	b := s3test.Bucket(t)
	f := &fixture{faulty: objstore.NewFaulty(b)}
	f.store = &manifest.Store{Bucket: f.faulty, Prefix: "strata"}
	f.up = &uploader.Uploader{Store: f.store, SpoolDir: t.TempDir(), Logger: discardLogger()}
	f.rd = reader.New(reader.Config{Store: f.store, BlockSize: 64 << 10, CacheBytes: 1 << 20})
	return f
}

// segmentBytes builds a segment of n batches starting at base, each with
// three records of about size bytes, stamped as a leader would.
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
		recordbatch.SetBaseOffset(b, off)
		recordbatch.SetPartitionLeaderEpoch(b, epoch)
		out = append(out, b...)
		off += 3
	}
	return out
}

func header(base int64, data []byte, epoch int32) *tieringv1.SegmentHeader {
	last := base
	for b := data; len(b) > 0; {
		h, _ := recordbatch.PeekHeader(b)
		last, b = h.LastOffset(), b[h.Size():]
	}
	return &tieringv1.SegmentHeader{Topic: testPart.Topic, TopicId: testTopicID, Partition: 0, LeaderEpoch: epoch,
		BaseOffset: base, LastOffset: last, SizeBytes: int64(len(data))}
}

func TestUploadIsIdempotent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	seg := segmentBytes(t, 0, 50, 100, 1)
	r1, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Existing || r2.Entry.GetSegmentId() != r1.Entry.GetSegmentId() {
		t.Fatalf("second upload made a new entry: %v", r2.Entry)
	}
	m, _, _ := f.store.Load(ctx, testPart)
	if len(m.GetSegments()) != 1 || manifest.TieredEnd(m) != 150 || m.GetVersion() != 1 {
		t.Fatalf("manifest after two uploads: %v", m)
	}
	// A stale leader is fenced; a gap is refused; a corrupt batch is refused.
	seg2 := segmentBytes(t, 150, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(150, seg2, 0), bytes.NewReader(seg2)); !errors.Is(err, uploader.ErrFenced) {
		t.Fatalf("stale epoch: %v", err)
	}
	seg3 := segmentBytes(t, 200, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(200, seg3, 1), bytes.NewReader(seg3)); !errors.Is(err, uploader.ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	bad := bytes.Clone(seg2)
	bad[len(bad)-1] ^= 0xff
	if _, err := f.up.Upload(ctx, header(150, bad, 1), bytes.NewReader(bad)); !errors.Is(err, uploader.ErrInvalid) {
		t.Fatalf("corrupt: %v", err)
	}
	// A new leader's segment that overlaps the tier is trimmed to continue it.
	over := segmentBytes(t, 120, 20, 100, 2)
	res, err := f.up.Upload(ctx, header(120, over, 2), bytes.NewReader(over))
	if err != nil {
		t.Fatal(err)
	}
	if res.Entry.GetBaseOffset() != 150 || res.Entry.GetLastOffset() != 179 {
		t.Fatalf("trimmed entry: %v", res.Entry)
	}
}

// TestCrashMidUploadLeavesNoPartialEntry: an upload that fails after some
// objects are written (the process dying, simulated by an injected
// failure) leaves the manifest unchanged; the retry completes.
func TestCrashMidUploadLeavesNoPartialEntry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	seg := segmentBytes(t, 0, 40, 200, 1)

	// The .log object is written, the index upload fails.
	f.faulty.AddFault(objstore.Fault{Op: objstore.OpUpload, Key: func(k string) bool { return strings.HasSuffix(k, ".index") }, Err: objstore.ErrInjected, Count: 1})
	if _, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg)); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("want the injected error, got %v", err)
	}
	// Dying between the objects and the manifest write.
	f.up.AfterObjects = func(string) error { return errors.New("killed") }
	if _, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg)); err == nil {
		t.Fatal("want the crash")
	}
	f.up.AfterObjects = nil
	m, _, err := f.store.Load(ctx, testPart)
	if err != nil || len(m.GetSegments()) != 0 {
		t.Fatalf("manifest names a partial upload: %v %v", m, err)
	}
	res, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	got, err := objstore.ReadAll(ctx, f.store.Bucket, res.Entry.GetObjectKey(), 0, -1)
	if err != nil || !bytes.Equal(got, seg) {
		t.Fatalf("object differs from the segment: %v", err)
	}
	// The orphan from the crash is collected after the grace period.
	ret := &retention{store: f.store, topics: &topics{}, reader: f.rd, grace: time.Millisecond, logger: discardLogger(), now: func() time.Time { return time.Now().Add(time.Hour) }}
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	var keys []string
	f.store.Bucket.List(ctx, manifest.Dir("strata", testPart)+"/", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil })
	if len(keys) != 4 { // manifest, .log, .index, .timeindex
		t.Fatalf("objects after garbage collection: %v", keys)
	}
}

// TestTieredReadsMatchSegmentBytes reads every offset of two tiered
// segments and compares with the segment bytes a local read returns: the
// batch holding the offset, whole, then whole batches up to max bytes.
func TestTieredReadsMatchSegmentBytes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	seg1 := segmentBytes(t, 0, 300, 700, 1) // ~ 700 KB, several cache blocks
	seg2 := segmentBytes(t, 900, 50, 100, 2)
	for _, s := range []struct {
		base int64
		b    []byte
		e    int32
	}{{0, seg1, 1}, {900, seg2, 2}} {
		if _, err := f.up.Upload(ctx, header(s.base, s.b, s.e), bytes.NewReader(s.b)); err != nil {
			t.Fatal(err)
		}
	}
	all := append(bytes.Clone(seg1), seg2...)
	// Positions of each batch in the concatenation.
	type bpos struct {
		base, last int64
		pos, size  int
	}
	var batches []bpos
	for p := 0; p < len(all); {
		h, _ := recordbatch.PeekHeader(all[p:])
		batches = append(batches, bpos{h.BaseOffset, h.LastOffset(), p, h.Size()})
		p += h.Size()
	}
	for _, maxBytes := range []int{1, 5000, 100000} {
		for off := int64(0); off < 1050; off += 7 {
			res, err := f.rd.Read(ctx, testPart, off, maxBytes)
			if err != nil {
				t.Fatalf("read %d: %v", off, err)
			}
			i := 0
			for batches[i].last < off {
				i++
			}
			want := batches[i].size
			segEnd := len(seg1)
			if batches[i].pos >= len(seg1) {
				segEnd = len(all)
			}
			for j := i + 1; j < len(batches) && batches[j].pos < segEnd && want+batches[j].size <= maxBytes; j++ {
				want += batches[j].size
			}
			if !bytes.Equal(res.Records, all[batches[i].pos:batches[i].pos+want]) {
				t.Fatalf("read %d max %d: %d bytes differ from the segment's %d", off, maxBytes, len(res.Records), want)
			}
		}
	}
	if _, err := f.rd.Read(ctx, testPart, 1050, 10); !errors.Is(err, reader.ErrOutOfRange) {
		t.Fatalf("past the tier: %v", err)
	}

	// A small cold read fetches a block or two, not the whole object.
	cold := reader.New(reader.Config{Store: f.store, BlockSize: 64 << 10})
	if _, err := cold.Read(ctx, testPart, 450, 1); err != nil {
		t.Fatal(err)
	}
	if st := cold.Stats(); st.FetchedBytes > 3*64<<10 || st.FetchedBytes >= int64(len(seg1)) {
		t.Fatalf("small read fetched %d bytes of a %d-byte object", st.FetchedBytes, len(seg1))
	}
}

// TestObjectStoreFaultsDelayButNeverLose: failing and slow object-store
// calls make uploads fail or take longer; retried uploads then land with
// no loss and no duplicate, and reads stay correct.
func TestObjectStoreFaultsDelayButNeverLose(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var segs [][]byte
	var base int64
	for range 6 {
		s := segmentBytes(t, base, 20, 300, 1)
		segs = append(segs, s)
		base += 60
	}
	f.faulty.AddFault(objstore.Fault{Op: objstore.OpUpload, Err: objstore.ErrInjected, Count: 5})
	f.faulty.AddFault(objstore.Fault{Op: objstore.OpPutIf, Err: objstore.ErrInjected, Count: 2})
	f.faulty.AddFault(objstore.Fault{Op: objstore.OpGet, Delay: 20 * time.Millisecond})
	failures := 0
	for i, s := range segs {
		for attempt := 0; ; attempt++ {
			_, err := f.up.Upload(ctx, header(int64(i)*60, s, 1), bytes.NewReader(s))
			if err == nil {
				break
			}
			failures++
			if attempt > 20 {
				t.Fatalf("segment %d never uploaded: %v", i, err)
			}
		}
	}
	if failures == 0 {
		t.Fatal("no fault fired")
	}
	m, _, err := f.store.Load(ctx, testPart)
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Active(m)) != len(segs) || manifest.TieredEnd(m) != 360 || m.GetLogStartOffset() != 0 {
		t.Fatalf("manifest after faults: %d entries, end %d", len(manifest.Active(m)), manifest.TieredEnd(m))
	}
	// Concurrent readers under slow GETs still read exact bytes.
	f.faulty.AddFault(objstore.Fault{Op: objstore.OpGetRange, Delay: 10 * time.Millisecond})
	var wg sync.WaitGroup
	for i, s := range segs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.rd.Read(ctx, testPart, int64(i)*60, 1<<20)
			if err != nil || !bytes.Equal(res.Records, s) {
				t.Errorf("segment %d read back: %v", i, err)
			}
		}()
	}
	wg.Wait()
}
