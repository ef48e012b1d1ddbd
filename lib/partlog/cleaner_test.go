package partlog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/vfs"
)

// kvBatch builds one batch of records written "key:value"; "key:" is a
// tombstone and ":value" a record without a key. Timestamps are ts.
func kvBatch(t testing.TB, opts recordbatch.BuildOptions, ts int64, kvs ...string) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, len(kvs))
	for i, kv := range kvs {
		k, v, _ := strings.Cut(kv, ":")
		r := recordbatch.Record{Timestamp: ts}
		if k != "" {
			r.Key = []byte(k)
		}
		if v != "" {
			r.Value = []byte(v)
		}
		recs[i] = r
	}
	b, err := recordbatch.Build(opts, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// logRecord is one record read back, with its batch.
type logRecord struct {
	offset int64
	key    string
	value  string // "" for a tombstone
	tomb   bool
	batch  recordbatch.Header
}

// readRecords reads the whole log as a consumer does, across the gaps
// cleaning left: every read returns the batch holding the offset asked
// for or a later one, batches never go back, and every batch decodes.
func readRecords(t testing.TB, l *Log) []logRecord {
	t.Helper()
	var out []logRecord
	next, end := l.LogStartOffset(), l.LogEndOffset()
	for next < end {
		res, err := l.Read(next, 1<<10, end)
		if err != nil {
			t.Fatalf("read at %d: %v", next, err)
		}
		if len(res.Batches) == 0 {
			t.Fatalf("empty read at %d below the log end %d", next, end)
		}
		it := recordbatch.NewIter(res.Batches, true)
		first := true
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			if h.BaseOffset < next && !(first && h.LastOffset() >= next) {
				t.Fatalf("read at %d returned batch [%d,%d]", next, h.BaseOffset, h.LastOffset())
			}
			first = false
			batch, err := recordbatch.Decode(b)
			if err != nil {
				t.Fatalf("batch at %d: %v", h.BaseOffset, err)
			}
			for _, r := range batch.Records {
				if r.Offset >= next {
					out = append(out, logRecord{offset: r.Offset, key: string(r.Key), value: string(r.Value), tomb: r.Value == nil, batch: h})
				}
			}
			next = h.NextOffset()
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		if res.NextOffset != next {
			t.Fatalf("NextOffset %d, batches end at %d", res.NextOffset, next)
		}
	}
	return out
}

// cleanerLog is a log with small segments whose every sealed segment is
// committed and fsynced, as the cleaner needs.
type cleanerLog struct {
	*Log
	t     testing.TB
	clock *fakeClock
	mem   *vfs.MemFS
	// offsets maps "key:value" to the offset it was appended at.
	offsets map[string]int64
}

func newCleanerLog(t testing.TB, segmentBytes int64) *cleanerLog {
	clock := newClock()
	mem := vfs.NewMem()
	l := mustOpen(t, mem, Config{SegmentBytes: segmentBytes, IndexIntervalBytes: 100}, WithClock(clock.Now))
	t.Cleanup(func() { l.Close() })
	return &cleanerLog{Log: l, t: t, clock: clock, mem: mem, offsets: map[string]int64{}}
}

func (c *cleanerLog) append(opts recordbatch.BuildOptions, kvs ...string) {
	c.t.Helper()
	info := mustAppend(c.t, c.Log, kvBatch(c.t, opts, c.clock.Now().UnixMilli(), kvs...), 0)
	for i, kv := range kvs {
		c.offsets[kv] = info.FirstOffset + int64(i)
	}
}

// commit moves the high watermark and the recovery point to the log end.
func (c *cleanerLog) commit() {
	c.t.Helper()
	c.SetHighWatermark(c.LogEndOffset())
	if err := c.Flush(ctx); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cleanerLog) clean(cc CleanConfig) CleanResult {
	c.t.Helper()
	res, err := c.Clean(ctx, cc)
	if err != nil {
		c.t.Fatalf("clean: %v", err)
	}
	return res
}

// live returns the newest value of every key (tombstones included) as the
// log holds it, checking each record kept its offset.
func (c *cleanerLog) live() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, r := range readRecords(c.t, c.Log) {
		kv := r.key + ":" + r.value
		if want, ok := c.offsets[kv]; ok && want != r.offset {
			c.t.Fatalf("%q read at offset %d, appended at %d", kv, r.offset, want)
		}
		out[r.key] = r.value
	}
	return out
}

func everything() CleanConfig {
	cc := DefaultCleanConfig()
	cc.MinCleanableDirtyRatio = 0
	return cc
}

func TestCleanerKeepsTheNewestRecordOfEachKey(t *testing.T) {
	c := newCleanerLog(t, 400)
	want := map[string]string{}
	for v := range 20 {
		var kvs []string
		for _, k := range []string{"a", "b", "c"} {
			kv := fmt.Sprintf("%s:%s%d", k, k, v)
			kvs = append(kvs, kv)
			want[k] = fmt.Sprintf("%s%d", k, v)
		}
		c.append(recordbatch.BuildOptions{}, kvs...)
	}
	c.append(recordbatch.BuildOptions{}, "a:final")
	want["a"] = "final"
	c.commit()
	before := c.Stats()
	res := c.clean(everything())
	if !res.Cleaned || res.RecordsRemoved == 0 || res.SegmentsIn < 2 {
		t.Fatalf("pass %+v", res)
	}
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("live keys %v, want %v", got, want)
	}
	// Only the active segment may hold a key twice.
	recs := readRecords(t, c.Log)
	active := c.Segments()[len(c.Segments())-1].BaseOffset
	seen := map[string]bool{}
	for _, r := range recs {
		if r.offset < active {
			if seen[r.key] {
				t.Fatalf("key %q kept twice below the active segment", r.key)
			}
			seen[r.key] = true
		}
	}
	after := c.Stats()
	if after.Bytes >= before.Bytes || after.LogEnd != before.LogEnd {
		t.Fatalf("stats before %+v after %+v", before, after)
	}
	// A second pass has nothing dirty.
	if res := c.clean(everything()); res.Cleaned || res.DirtyRatio != 0 {
		t.Fatalf("second pass %+v", res)
	}
	// The next pass merges the small cleaned segments (grouped by their
	// size before that pass, as Kafka's groupSegmentsBySize).
	for v := range 8 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("c:again%d", v))
	}
	want["c"] = "again7"
	c.commit()
	res = c.clean(everything())
	if !res.Cleaned || res.SegmentsOut >= res.SegmentsIn {
		t.Fatalf("third pass did not merge: %+v", res)
	}
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("after merging: live keys %v, want %v", got, want)
	}
	// The cleaned log survives a reopen (its indexes, the gaps).
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Log = mustOpen(t, c.mem, c.Config(), WithClock(c.clock.Now))
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("after reopen: live keys %v, want %v", got, want)
	}
}

// A pass whose offset map fills ends its mapped range at the first record
// the map could not take; the next pass goes on from there.
func TestCleanerStopsWhereTheOffsetMapFills(t *testing.T) {
	c := newCleanerLog(t, 300)
	want := map[string]string{}
	for v := range 3 {
		for k := range 6 {
			c.append(recordbatch.BuildOptions{}, fmt.Sprintf("k%d:v%d", k, v))
			want[fmt.Sprintf("k%d", k)] = fmt.Sprintf("v%d", v)
		}
	}
	c.commit()
	cc := everything()
	cc.MaxKeys = 4
	res := c.clean(cc)
	if !res.Cleaned || res.FirstDirty != 0 || res.CleanedTo != c.offsets["k4:v0"] {
		t.Fatalf("first pass %+v, want it to map offsets [0, %d)", res, c.offsets["k4:v0"])
	}
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("live keys %v, want %v", got, want)
	}
	next := c.clean(cc)
	if !next.Cleaned || next.FirstDirty != res.CleanedTo || next.CleanedTo <= next.FirstDirty {
		t.Fatalf("second pass %+v after %+v", next, res)
	}
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("live keys after the second pass %v, want %v", got, want)
	}
}

func TestCleanerTombstones(t *testing.T) {
	for _, tc := range []struct {
		name      string
		advance   time.Duration // clock moved between the first and second pass
		wantTombs bool          // the tombstone is still there after the second pass
	}{
		{"before delete.retention.ms", 23 * time.Hour, true},
		{"past delete.retention.ms", 25 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCleanerLog(t, 300)
			for v := range 5 {
				c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:a%d", v), fmt.Sprintf("b:b%d", v))
			}
			c.append(recordbatch.BuildOptions{}, "a:")
			for v := range 6 {
				c.append(recordbatch.BuildOptions{}, fmt.Sprintf("c:c%d", v))
			}
			c.commit()
			c.clean(everything())
			recs := readRecords(t, c.Log)
			var tomb *logRecord
			for i, r := range recs {
				if r.key == "a" {
					if !r.tomb || tomb != nil {
						t.Fatalf("after the first pass key a has %+v", r)
					}
					tomb = &recs[i]
				}
			}
			if tomb == nil {
				t.Fatal("the tombstone was removed by the pass that first saw it")
			}
			if hz, ok := tomb.batch.DeleteHorizon(); !ok || hz != c.clock.Now().Add(24*time.Hour).UnixMilli() {
				t.Fatalf("delete horizon %d %v", hz, ok)
			}
			c.clock.Advance(tc.advance)
			for v := range 6 { // something dirty to clean
				c.append(recordbatch.BuildOptions{}, fmt.Sprintf("d:d%d", v))
			}
			c.commit()
			if res := c.clean(everything()); !res.Cleaned {
				t.Fatalf("second pass did not run: %+v", res)
			}
			_, has := c.live()["a"]
			if has != tc.wantTombs {
				t.Fatalf("tombstone kept %v, want %v", has, tc.wantTombs)
			}
			if got := c.live()["b"]; got != "b4" {
				t.Fatalf("b = %q", got)
			}
		})
	}
}

func TestCleanerLagAndDirtyRatio(t *testing.T) {
	// fill appends n batches of 3 overwritten keys, one segment each or so.
	fill := func(c *cleanerLog, tag string, n int) {
		for v := range n {
			c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:%s%d", tag, v), fmt.Sprintf("b:%s%d", tag, v), fmt.Sprintf("c:%s%d", tag, v))
		}
	}
	t.Run("min.compaction.lag.ms leaves young segments dirty", func(t *testing.T) {
		c := newCleanerLog(t, 200)
		fill(c, "old", 5)
		c.clock.Advance(time.Hour)
		fill(c, "young", 5)
		c.commit()
		cc := everything()
		cc.MinCompactionLag = 30 * time.Minute
		res := c.clean(cc)
		old := c.offsets["a:young0"] // first offset of the young half
		if !res.Cleaned || res.CleanedTo > old {
			t.Fatalf("pass %+v cleaned past the young half at %d", res, old)
		}
		// The young half is untouched: every record of it is still there.
		n := 0
		for _, r := range readRecords(t, c.Log) {
			if r.offset >= old {
				n++
			}
		}
		if n != 15 {
			t.Fatalf("%d records of the young half, want 15", n)
		}
		c.clock.Advance(time.Hour)
		if res := c.clean(cc); !res.Cleaned || res.CleanedTo <= old {
			t.Fatalf("once old enough: %+v", res)
		}
	})
	t.Run("min.cleanable.dirty.ratio", func(t *testing.T) {
		c := newCleanerLog(t, 200)
		fill(c, "x", 10)
		c.commit()
		cc := DefaultCleanConfig()
		res := c.clean(cc)
		if res.DirtyRatio != 1 || !res.Cleaned {
			t.Fatalf("first pass %+v", res)
		}
		fill(c, "y", 1)
		c.append(recordbatch.BuildOptions{}, "z:z")
		c.commit()
		segs := c.Segments()
		var clean, dirty int64
		for _, s := range segs[:len(segs)-1] {
			if s.BaseOffset < res.CleanedTo {
				clean += s.Size
			} else {
				dirty += s.Size
			}
		}
		want := float64(dirty) / float64(clean+dirty)
		if got := c.DirtyRatio(cc); got != want || got == 0 || got == 1 {
			t.Fatalf("dirty ratio %v, want %v (dirty %d clean %d)", got, want, dirty, clean)
		}
		cc.MinCleanableDirtyRatio = want + 0.01
		if res := c.clean(cc); res.Cleaned || res.DirtyRatio != want {
			t.Fatalf("pass below the ratio ran: %+v", res)
		}
		cc.MinCleanableDirtyRatio = want
		if res := c.clean(cc); !res.Cleaned {
			t.Fatalf("pass at the ratio did not run: %+v", res)
		}
	})
	t.Run("max.compaction.lag.ms cleans below the ratio", func(t *testing.T) {
		c := newCleanerLog(t, 200)
		fill(c, "x", 10)
		c.commit()
		c.clean(DefaultCleanConfig())
		fill(c, "y", 1)
		c.append(recordbatch.BuildOptions{}, "z:z")
		c.commit()
		cc := DefaultCleanConfig()
		cc.MinCleanableDirtyRatio = 0.99
		cc.MaxCompactionLag = time.Hour
		if res := c.clean(cc); res.Cleaned {
			t.Fatalf("ran before the lag: %+v", res)
		}
		c.clock.Advance(2 * time.Hour)
		if res := c.clean(cc); !res.Cleaned || res.DirtyRatio >= 0.99 {
			t.Fatalf("did not run past the lag: %+v", res)
		}
	})
}

func TestCleanerReadsAcrossGaps(t *testing.T) {
	c := newCleanerLog(t, 300)
	for v := range 12 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:a%d", v), fmt.Sprintf("b:b%d", v))
	}
	c.append(recordbatch.BuildOptions{}, ":keyless")
	c.append(recordbatch.BuildOptions{}, "a:last")
	for v := range 4 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("b:tail%d", v))
	}
	c.commit()
	c.clean(everything())
	recs := readRecords(t, c.Log)
	if _, ok := c.live()[""]; ok {
		t.Fatal("a record without a key survived cleaning")
	}
	// A read at any offset returns the first record at or after it.
	for off := c.LogStartOffset(); off < c.LogEndOffset(); off++ {
		res, err := c.Read(off, 1, c.LogEndOffset())
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		h, err := recordbatch.Verify(res.Batches)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		i := slices.IndexFunc(recs, func(r logRecord) bool { return r.offset >= off })
		if h.LastOffset() < off || recs[i].batch.BaseOffset != h.BaseOffset {
			t.Fatalf("read %d returned [%d,%d], want the batch of offset %d", off, h.BaseOffset, h.LastOffset(), recs[i].offset)
		}
	}
	// A follower copying the cleaned log accepts its gaps and ends up with
	// the same bytes.
	f, err := Open(testDir, Config{SegmentBytes: 300}, WithFS(vfs.NewMem()))
	if err != nil {
		t.Fatal(err)
	}
	for next := int64(0); next < c.LogEndOffset(); {
		res, err := c.Read(next, 1<<20, c.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.AppendAsFollower(ctx, res.Batches); err != nil {
			t.Fatalf("follower append at %d: %v", next, err)
		}
		next = res.NextOffset
	}
	if f.LogEndOffset() != c.LogEndOffset() {
		t.Fatalf("follower LEO %d, leader %d", f.LogEndOffset(), c.LogEndOffset())
	}
	if got := readRecords(t, f); !slices.EqualFunc(got, recs, func(a, b logRecord) bool { return a.offset == b.offset && a.value == b.value }) {
		t.Fatalf("follower records differ: %v vs %v", got, recs)
	}
	// Truncating into a gap ends the log there, not at the next batch.
	gap := int64(-1)
	for i := 1; i < len(recs); i++ {
		if recs[i].offset > recs[i-1].offset+1 && recs[i].batch.BaseOffset > recs[i-1].offset+1 {
			gap = recs[i-1].offset + 1
			break
		}
	}
	if gap < 0 {
		t.Fatal("no gap between batches")
	}
	if err := f.TruncateTo(gap); err != nil {
		t.Fatal(err)
	}
	if f.LogEndOffset() != gap {
		t.Fatalf("truncated to %d: LEO %d", gap, f.LogEndOffset())
	}
	// Both logs, gaps and all, survive a reopen that scans every segment
	// (no recovery point, no index).
	for _, l := range []*Log{f, c.Log} {
		want := readRecords(t, l)
		reopened := reopenScanning(t, l)
		if got := readRecords(t, reopened); !slices.EqualFunc(got, want, func(a, b logRecord) bool { return a.offset == b.offset && a.value == b.value }) {
			t.Fatalf("after a full scan: %v, want %v", got, want)
		}
		reopened.Close()
	}
}

// reopenScanning closes l and reopens it without its log-checkpoint and
// index files, so recovery reads every batch.
func reopenScanning(t testing.TB, l *Log) *Log {
	t.Helper()
	mem := l.fs.(*vfs.MemFS)
	cfg := l.Config()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := mem.ReadDir(testDir)
	for _, n := range names {
		if n == logCheckpointFile || strings.HasSuffix(n, offsetIndexSuffix) || strings.HasSuffix(n, timeIndexSuffix) {
			if err := mem.Remove(testDir + "/" + n); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := mustOpen(t, mem, cfg)
	if r.LogEndOffset() == 0 {
		t.Fatal("reopened empty")
	}
	return r
}

func TestCleanerCompressedBatches(t *testing.T) {
	for _, codec := range []recordbatch.Codec{recordbatch.CodecGzip, recordbatch.CodecSnappy, recordbatch.CodecLZ4, recordbatch.CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			c := newCleanerLog(t, 400)
			for v := range 8 {
				c.append(recordbatch.BuildOptions{Codec: codec}, fmt.Sprintf("a:a%d", v), fmt.Sprintf("k%d:v%d", v, v), fmt.Sprintf("b:b%d", v))
			}
			c.append(recordbatch.BuildOptions{}, "z:z")
			c.commit()
			if res := c.clean(everything()); res.RecordsRemoved == 0 {
				t.Fatalf("nothing removed: %+v", res)
			}
			live := c.live()
			if live["a"] != "a7" || live["b"] != "b7" || live["k3"] != "v3" {
				t.Fatalf("live %v", live)
			}
			for _, r := range readRecords(t, c.Log) {
				if r.key != "z" && r.batch.Codec() != codec {
					t.Fatalf("record %+v in a batch of codec %v", r, r.batch.Codec())
				}
			}
		})
	}
}

func TestCleanerIdempotentProducerBatches(t *testing.T) {
	c := newCleanerLog(t, 300)
	idem := func(seq int32) recordbatch.BuildOptions {
		return recordbatch.BuildOptions{Idempotent: true, ProducerID: 7, ProducerEpoch: 1, BaseSequence: seq}
	}
	// Producer 7 writes keys a and b three times; everything it wrote is
	// then overwritten by a plain producer.
	for i := range 3 {
		c.append(idem(int32(2*i)), fmt.Sprintf("a:p%d", i), fmt.Sprintf("b:p%d", i))
	}
	lastIdem := c.offsets["b:p2"]
	for v := range 6 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:x%d", v), fmt.Sprintf("b:x%d", v))
	}
	c.append(recordbatch.BuildOptions{}, "z:z")
	c.commit()
	want, ok := c.Producer(7)
	if !ok {
		t.Fatal("producer unknown")
	}
	c.clean(everything())
	// Its last batch stays, empty, with its offsets and sequences; the
	// others are gone.
	var empties []recordbatch.Header
	for next := c.LogStartOffset(); next < c.LogEndOffset(); {
		res, err := c.Read(next, 1<<20, c.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		it := recordbatch.NewIter(res.Batches, true)
		for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
			if h.ProducerID == 7 {
				empties = append(empties, h)
			}
		}
		next = res.NextOffset
	}
	if len(empties) != 1 || empties[0].RecordCount != 0 || empties[0].LastOffset() != lastIdem ||
		empties[0].BaseSequence != 4 || empties[0].LastSequence() != 5 || empties[0].ProducerEpoch != 1 {
		t.Fatalf("producer 7 batches after cleaning: %+v", empties)
	}
	// The producer state survives cleaning and a reopen that rebuilds it
	// from the log alone (every snapshot lost).
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := c.mem.ReadDir(testDir)
	for _, n := range names {
		if strings.HasSuffix(n, snapshotSuffix) {
			c.mem.Remove(testDir + "/" + n)
		}
	}
	c.Log = mustOpen(t, c.mem, c.Config(), WithClock(c.clock.Now))
	got, ok := c.Producer(7)
	if !ok || got.Epoch != want.Epoch || got.Batches[len(got.Batches)-1] != want.Batches[len(want.Batches)-1] {
		t.Fatalf("producer 7 after cleaning and reopen: %+v %v, want last batch %+v", got, ok, want.Batches[len(want.Batches)-1])
	}
}

// Offsets at or above the high watermark, and the active segment, are
// never cleaned.
func TestCleanerLeavesTheUncommittedTailAlone(t *testing.T) {
	c := newCleanerLog(t, 200)
	for v := range 10 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:%d", v))
	}
	if res := c.clean(everything()); res.Cleaned || res.DirtyRatio != 0 {
		t.Fatalf("cleaned with the high watermark at 0: %+v", res)
	}
	c.commit()
	segs := c.Segments()
	active := segs[len(segs)-1].BaseOffset
	if active == 0 || active == c.LogEndOffset()-1 {
		t.Fatalf("want several records in the active segment; segments %+v", segs)
	}
	if res := c.clean(everything()); !res.Cleaned || res.CleanedTo != active {
		t.Fatalf("pass %+v, want it cleaned up to the active segment at %d", res, active)
	}
	var inActive int64
	for _, r := range readRecords(t, c.Log) {
		if r.offset >= active {
			inActive++
		}
	}
	if inActive != c.LogEndOffset()-active {
		t.Fatalf("%d records left in the active segment, %d appended", inActive, c.LogEndOffset()-active)
	}
}

// A segment the cleaner emptied is read across: a read at its offsets
// returns the first batch of the next segment that holds one.
func TestCleanerEmptiedSegment(t *testing.T) {
	c := newCleanerLog(t, 500)
	for v := range 6 {
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("a:old%d", v), fmt.Sprintf("b:old%d", v))
	}
	first := c.Segments()[0]
	c.append(recordbatch.BuildOptions{}, "a:new", "b:new")
	for v := range 30 { // distinct keys: every batch is kept
		c.append(recordbatch.BuildOptions{}, fmt.Sprintf("c%d:new", v))
	}
	c.commit()
	c.clean(everything())
	segs := c.Segments()
	if segs[0].BaseOffset != first.BaseOffset || segs[0].Size != 0 || len(segs) < 3 {
		t.Fatalf("segments after cleaning %+v, want the first one empty", segs)
	}
	recs := readRecords(t, c.Log)
	for off := int64(0); off <= segs[1].BaseOffset; off++ {
		res, err := c.Read(off, 1, c.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		h, err := recordbatch.Verify(res.Batches)
		if err != nil || h.BaseOffset != recs[0].batch.BaseOffset {
			t.Fatalf("read at %d: batch %+v %v, want the first kept batch at %d", off, h, err, recs[0].batch.BaseOffset)
		}
	}
}

// Cleaning passes run alongside appends, flushes and readers (run with
// -race): every read sees whole batches with increasing offsets, no pass
// fails, the newest value of every key survives, and a Close during a
// pass ends it with ErrClosed or nothing.
func TestCleanerConcurrentWithAppendsAndReads(t *testing.T) {
	c := newCleanerLog(t, 600)
	var mu sync.Mutex
	want := map[string]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Add(3)
	go func() { // appender
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			kv := fmt.Sprintf("k%d:v%d", i%17, i)
			mu.Lock()
			_, err := c.AppendAsLeader(ctx, kvBatch(t, recordbatch.BuildOptions{}, int64(i), kv), 0)
			if err == nil {
				want[fmt.Sprintf("k%d", i%17)] = fmt.Sprintf("v%d", i)
			}
			mu.Unlock()
			if err != nil {
				errs <- err
				return
			}
			if i%10 == 0 {
				c.SetHighWatermark(c.LogEndOffset())
				if err := c.Flush(ctx); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	go func() { // cleaner
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Clean(ctx, everything()); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() { // reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			next, end := c.LogStartOffset(), c.LogEndOffset()
			for next < end {
				res, err := c.Read(next, 1<<12, end)
				if err != nil {
					errs <- fmt.Errorf("read at %d: %w", next, err)
					return
				}
				prev := int64(-1)
				it := recordbatch.NewIter(res.Batches, true)
				for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
					if h.BaseOffset <= prev || h.LastOffset() < next {
						errs <- fmt.Errorf("read at %d: batch [%d,%d] after %d", next, h.BaseOffset, h.LastOffset(), prev)
						return
					}
					prev = h.LastOffset()
				}
				if it.Err() != nil || len(res.Batches) == 0 {
					errs <- fmt.Errorf("read at %d: %d bytes, %v", next, len(res.Batches), it.Err())
					return
				}
				next = res.NextOffset
			}
		}
	}()
	testwait.Until(t, 120*time.Second, "3000 records appended alongside cleaning", func() error {
		return testwait.True(c.LogEndOffset() > 3000)
	})
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	c.SetHighWatermark(c.LogEndOffset())
	if got := c.live(); !maps.Equal(got, want) {
		t.Fatalf("live keys %v, want %v", got, want)
	}
	// Close while a pass runs.
	c.commit()
	done := make(chan error, 1)
	go func() {
		_, err := c.Clean(ctx, everything())
		done <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("pass during Close: %v", err)
	}
	names, _ := c.mem.ReadDir(testDir)
	for _, n := range names {
		if strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, swapSuffix) {
			t.Fatalf("%s left in the directory after Close returned", n)
		}
	}
}
