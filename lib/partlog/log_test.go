package partlog

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	err := Config{SegmentBytes: 10, MaxBatchBytes: 5, IndexIntervalBytes: -1, Flush: FlushPolicy{Mode: 9}}.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"SegmentBytes", "MaxBatchBytes", "IndexIntervalBytes", "Flush.Mode"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := Open(testDir, Config{SegmentBytes: 1}, WithFS(vfs.NewMem())); err == nil {
		t.Fatal("Open accepted a bad config")
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segBytes int64
		interval int
		batches  int
		records  int
		valSize  int
	}{
		{"one segment", 0, 0, 20, 5, 10},
		{"many segments", 2000, 256, 100, 3, 50},
		{"index every batch", 4096, 1, 60, 1, 100},
		{"sparse index", 1 << 20, 64 << 10, 200, 4, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: tc.segBytes, IndexIntervalBytes: tc.interval})
			defer l.Close()
			var want []int64
			next := int64(0)
			for i := range tc.batches {
				info := mustAppend(t, l, makeBatch(t, tc.records, int64(1000+i*10), tc.valSize), 1)
				if info.FirstOffset != next || info.LastOffset != next+int64(tc.records)-1 || info.Records != int64(tc.records) {
					t.Fatalf("append %d: %+v, want first %d", i, info, next)
				}
				want = append(want, next)
				next += int64(tc.records)
			}
			if l.LogEndOffset() != next {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), next)
			}
			hs := readAll(t, l, 0, l.LogEndOffset())
			if len(hs) != len(want) {
				t.Fatalf("read %d batches, want %d", len(hs), len(want))
			}
			for i, h := range hs {
				if h.BaseOffset != want[i] || h.PartitionLeaderEpoch != 1 {
					t.Fatalf("batch %d: base %d epoch %d", i, h.BaseOffset, h.PartitionLeaderEpoch)
				}
			}
			// Every offset, not just batch starts, finds its batch.
			for off := int64(0); off < next; off++ {
				res, err := l.Read(off, 1, next)
				if err != nil {
					t.Fatal(err)
				}
				h, err := recordbatch.Verify(res.Batches)
				if err != nil || h.BaseOffset > off || h.LastOffset() < off {
					t.Fatalf("read %d: header %+v err %v", off, h, err)
				}
			}
			if tc.segBytes == 2000 && l.Stats().Segments < 5 {
				t.Fatalf("expected several segments, got %d", l.Stats().Segments)
			}
		})
	}
}

func TestRollBySizeAndAge(t *testing.T) {
	clock := newClock()
	b := makeBatch(t, 1, 0, 100)
	l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: int64(3 * len(b)), SegmentAge: time.Hour}, WithClock(clock.Now))
	defer l.Close()
	for range 3 {
		mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	}
	if n := l.Stats().Segments; n != 1 {
		t.Fatalf("3 batches that fit: %d segments", n)
	}
	mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	if n := l.Stats().Segments; n != 2 {
		t.Fatalf("4th batch should roll: %d segments", n)
	}
	clock.Advance(59 * time.Minute)
	mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	if n := l.Stats().Segments; n != 2 {
		t.Fatalf("young segment rolled: %d segments", n)
	}
	clock.Advance(2 * time.Minute)
	mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	if n := l.Stats().Segments; n != 3 {
		t.Fatalf("old segment did not roll: %d segments", n)
	}
	// A batch larger than SegmentBytes gets a segment of its own.
	mustAppend(t, l, makeBatch(t, 1, 0, 1000), 0)
	mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	if n := l.Stats().Segments; n != 5 {
		t.Fatalf("big batch: %d segments, want 5", n)
	}
	names, _ := l.fs.ReadDir(testDir)
	var logs []string
	for _, n := range names {
		if filepath.Ext(n) == ".log" {
			logs = append(logs, n)
		}
	}
	want := []string{"00000000000000000000.log", "00000000000000000003.log", "00000000000000000005.log", "00000000000000000006.log", "00000000000000000007.log"}
	if strings.Join(logs, ",") != strings.Join(want, ",") {
		t.Fatalf("segments %v, want %v", logs, want)
	}
	readAll(t, l, 0, l.LogEndOffset())
}

func TestReadBounds(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	var sizes []int
	for i := range 5 {
		b := makeBatch(t, 4, int64(i), 200)
		sizes = append(sizes, len(b))
		mustAppend(t, l, b, 0)
	}
	// Offsets: [0,3] [4,7] [8,11] [12,15] [16,19]
	for _, tc := range []struct {
		name              string
		offset            int64
		maxBytes          int
		maxOffset         int64
		wantBases         []int64
		wantNext          int64
		wantOutOfRangeErr bool
	}{
		{"maxBytes below one batch gives one whole batch", 0, 10, 20, []int64{0}, 4, false},
		{"mid-batch offset starts at its batch", 6, 10, 20, []int64{4}, 8, false},
		{"maxBytes fits two", 0, sizes[0] + sizes[1] + 5, 20, []int64{0, 4}, 8, false},
		{"maxBytes fits exactly two", 0, sizes[0] + sizes[1], 20, []int64{0, 4}, 8, false},
		{"everything", 0, 1 << 20, 20, []int64{0, 4, 8, 12, 16}, 20, false},
		{"maxOffset at batch boundary", 0, 1 << 20, 12, []int64{0, 4, 8}, 12, false},
		{"maxOffset inside a batch excludes it", 0, 1 << 20, 10, []int64{0, 4}, 8, false},
		{"offset at maxOffset is empty", 12, 1 << 20, 12, nil, 12, false},
		{"offset past maxOffset but in log is empty", 13, 1 << 20, 12, nil, 13, false},
		{"at log end is empty", 20, 1 << 20, 20, nil, 20, false},
		{"past log end", 21, 1 << 20, 30, nil, 0, true},
		{"negative", -1, 1 << 20, 30, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Read(tc.offset, tc.maxBytes, tc.maxOffset)
			if tc.wantOutOfRangeErr {
				var oor *OffsetOutOfRangeError
				if !errors.As(err, &oor) || !errors.Is(err, ErrOffsetOutOfRange) || oor.LogEnd != 20 || oor.LogStart != 0 {
					t.Fatalf("got %v, want out of range [0,20]", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			bases := batchBases(t, res.Batches)
			if !equal(bases, tc.wantBases) || res.NextOffset != tc.wantNext {
				t.Fatalf("bases %v next %d, want %v next %d", bases, res.NextOffset, tc.wantBases, tc.wantNext)
			}
		})
	}
}

// TestReadIntoWithin: held to maxBytes for the first batch too, a read
// leaves a first batch that does not fit unread, and otherwise reads as
// ReadInto does.
func TestReadIntoWithin(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	b := makeBatch(t, 4, 0, 200)
	for range 3 {
		mustAppend(t, l, b, 0)
	}
	// Offsets: [0,3] [4,7] [8,11], each batch len(b) bytes.
	for _, tc := range []struct {
		name      string
		offset    int64
		maxBytes  int
		wantBases []int64
		wantNext  int64
	}{
		{"first batch over maxBytes", 4, len(b) - 1, nil, 4},
		{"first batch fits exactly", 4, len(b), []int64{4}, 8},
		{"second batch cut off", 0, 2*len(b) - 1, []int64{0}, 4},
		{"everything", 0, 1 << 20, []int64{0, 4, 8}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.ReadIntoWithin(nil, tc.offset, tc.maxBytes, l.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			bases := batchBases(t, res.Batches)
			if !equal(bases, tc.wantBases) || res.NextOffset != tc.wantNext || res.HighWatermark != l.HighWatermark() {
				t.Fatalf("bases %v next %d hw %d, want %v next %d hw %d", bases, res.NextOffset, res.HighWatermark, tc.wantBases, tc.wantNext, l.HighWatermark())
			}
		})
	}
	// The batch that does not fit is not read at all: the buffer, room
	// enough for it, keeps its bytes.
	buf := bytes.Repeat([]byte{0xee}, 2*len(b))
	if res, err := l.ReadIntoWithin(buf[:0], 4, len(b)-1, l.LogEndOffset()); err != nil || len(res.Batches) != 0 {
		t.Fatalf("read %d bytes, err %v", len(res.Batches), err)
	}
	if n := bytes.Count(buf, []byte{0xee}); n != len(buf) {
		t.Fatalf("%d bytes of the buffer were written", len(buf)-n)
	}
}

// batchBases returns the base offsets of the whole batches b holds.
func batchBases(t *testing.T, b []byte) []int64 {
	t.Helper()
	var bases []int64
	it := recordbatch.NewIter(b, true)
	for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
		bases = append(bases, h.BaseOffset)
	}
	if it.Err() != nil || len(it.Rest()) != 0 {
		t.Fatalf("partial data: %v", it.Err())
	}
	return bases
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAppendRejects(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{MaxBatchBytes: 1000})
	defer l.Close()
	good := makeBatch(t, 2, 0, 10)
	corrupt := makeBatch(t, 2, 0, 10)
	corrupt[len(corrupt)-1] ^= 1
	badMagic := makeBatch(t, 2, 0, 10)
	badMagic[16] = 1
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrInvalidBatch},
		{"partial", good[:len(good)-1], ErrInvalidBatch},
		{"trailing bytes", append(append([]byte{}, good...), 1, 2, 3), ErrInvalidBatch},
		{"crc", corrupt, recordbatch.ErrCRC},
		{"magic", badMagic, recordbatch.ErrBadMagic},
		{"too large", makeBatch(t, 2, 0, 1000), ErrBatchTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.AppendAsLeader(ctx, tc.b, 0)
			wantErrIs(t, err, tc.want)
			if l.LogEndOffset() != 0 {
				t.Fatalf("LEO moved to %d", l.LogEndOffset())
			}
		})
	}
	mustAppend(t, l, good, 3)
	_, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 1), 2)
	wantErrIs(t, err, ErrStaleEpoch)
}

func TestFollowerAppend(t *testing.T) {
	leader := mustOpen(t, vfs.NewMem(), Config{})
	defer leader.Close()
	follower := mustOpen(t, vfs.NewMem(), Config{})
	defer follower.Close()
	mustAppend(t, leader, makeBatch(t, 3, 0, 10), 1)
	mustAppend(t, leader, makeBatch(t, 2, 0, 10), 1)
	mustAppend(t, leader, makeBatch(t, 4, 0, 10), 4)
	res, err := leader.Read(0, 1<<20, leader.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.AppendAsFollower(ctx, res.Batches); err != nil {
		t.Fatal(err)
	}
	// Offsets going back are refused with a typed error.
	second := res.Batches[len(makeBatch(t, 3, 0, 10)):]
	_, err = follower.AppendAsFollower(ctx, second)
	var nc *NonContiguousError
	if !errors.As(err, &nc) || nc.Expected != 9 || nc.Got != 3 {
		t.Fatalf("got %v, want non-contiguous 9/3", err)
	}
	if follower.LogEndOffset() != 9 || follower.LatestEpoch() != 4 {
		t.Fatalf("follower LEO %d epoch %d", follower.LogEndOffset(), follower.LatestEpoch())
	}
	if e, off := follower.EndOffsetForEpoch(1); e != 1 || off != 5 {
		t.Fatalf("EndOffsetForEpoch(1) = %d, %d; want 1, 5", e, off)
	}
	got, _ := follower.Read(0, 1<<20, 9)
	if string(got.Batches) != string(res.Batches) {
		t.Fatal("follower bytes differ from leader bytes")
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: 1500, IndexIntervalBytes: 200})
	defer l.Close()
	// Batch i has records at 1000+100i .. 1000+100i+2, so MaxTimestamp 1000+100i+2;
	// batch 7 goes back in time.
	ts := func(i int) int64 {
		if i == 7 {
			return 500
		}
		return int64(1000 + 100*i)
	}
	for i := range 20 {
		mustAppend(t, l, makeBatch(t, 3, ts(i), 100), 0)
	}
	if l.Stats().Segments < 3 {
		t.Fatalf("want several segments, have %d", l.Stats().Segments)
	}
	for _, tc := range []struct {
		ts    int64
		want  int64
		found bool
	}{
		{0, 0, true},
		{1000, 0, true},
		{1002, 0, true},
		{1003, 3, true},
		{1550, 18, true}, // batch 6 max 1602
		{1650, 24, true}, // batch 7 (max 502) skipped, batch 8 max 1802
		{2902, 57, true}, // last batch
		{2903, 0, false}, // newer than everything
		{1602, 18, true},
	} {
		off, found, err := l.OffsetForTimestamp(tc.ts)
		if err != nil || off != tc.want || found != tc.found {
			t.Errorf("OffsetForTimestamp(%d) = %d, %v, %v; want %d, %v", tc.ts, off, found, err, tc.want, tc.found)
		}
	}
	// Same answers after reopen (indexes loaded from files).
	l.Close()
	l2 := mustOpen(t, l.fs, Config{SegmentBytes: 1500, IndexIntervalBytes: 200})
	defer l2.Close()
	if off, found, _ := l2.OffsetForTimestamp(1650); off != 24 || !found {
		t.Fatalf("after reopen: %d %v", off, found)
	}
}

func TestTruncateTo(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 1000, IndexIntervalBytes: 100}
	l := mustOpen(t, fs, cfg)
	for i := range 30 {
		mustAppend(t, l, makeBatch(t, 2, int64(i), 50), int32(i/10)) // epochs 0,1,2 start at 0,20,40
	}
	l.SetHighWatermark(50)
	segsBefore := l.Stats().Segments
	if err := l.TruncateTo(45); err != nil { // inside batch [44,45]
		t.Fatal(err)
	}
	if l.LogEndOffset() != 44 || l.HighWatermark() != 44 {
		t.Fatalf("LEO %d HW %d, want 44 44", l.LogEndOffset(), l.HighWatermark())
	}
	if l.LatestEpoch() != 2 {
		t.Fatalf("epoch %d", l.LatestEpoch())
	}
	if err := l.TruncateTo(40); err != nil {
		t.Fatal(err)
	}
	if l.LatestEpoch() != 1 || l.LogEndOffset() != 40 {
		t.Fatalf("epoch %d LEO %d", l.LatestEpoch(), l.LogEndOffset())
	}
	if l.Stats().Segments >= segsBefore {
		t.Fatalf("segments %d, before %d", l.Stats().Segments, segsBefore)
	}
	hs := readAll(t, l, 0, 100)
	if len(hs) != 20 {
		t.Fatalf("%d batches after truncate", len(hs))
	}
	// Appends continue at the new end, and indexes still work.
	for i := range 10 {
		mustAppend(t, l, makeBatch(t, 2, int64(100+i), 50), 5)
	}
	readAll(t, l, 0, 100)
	if e, off := l.EndOffsetForEpoch(1); e != 1 || off != 40 {
		t.Fatalf("EndOffsetForEpoch(1) = %d %d", e, off)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, cfg)
	defer l.Close()
	if hs := readAll(t, l, 0, 100); len(hs) != 30 || l.LatestEpoch() != 5 {
		t.Fatalf("after reopen %d batches, epoch %d", len(hs), l.LatestEpoch())
	}
	if err := l.TruncateFullyAndStartAt(1000); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != 1000 || l.LogEndOffset() != 1000 || l.LatestEpoch() != UndefinedEpoch || l.Stats().Segments != 1 {
		t.Fatalf("after truncate fully: %+v epoch %d", l.Stats(), l.LatestEpoch())
	}
	if _, err := l.Read(5, 100, 2000); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below new start: %v", err)
	}
	info := mustAppend(t, l, makeBatch(t, 1, 0, 1), 7)
	if info.FirstOffset != 1000 {
		t.Fatalf("first offset %d", info.FirstOffset)
	}
}

func TestRetention(t *testing.T) {
	b := makeBatch(t, 1, 0, 100)
	size := int64(len(b))
	for _, tc := range []struct {
		name        string
		cfg         Config
		hw          int64
		advance     time.Duration
		wantDeleted int
		wantStart   int64
	}{
		// 10 batches, 2 per segment: segments [0,1] [2,3] ... [8,9] active.
		{"by time", Config{RetentionAge: 4 * time.Hour}, 10, 0, 3, 6},
		{"by time keeps everything young", Config{RetentionAge: 100 * time.Hour}, 10, 0, 0, 0},
		{"forever", Config{RetentionAge: -1}, 10, 0, 0, 0},
		{"by bytes", Config{RetentionAge: -1, RetentionBytes: 5 * size}, 10, 0, 2, 4},
		{"by bytes exact", Config{RetentionAge: -1, RetentionBytes: 6 * size}, 10, 0, 2, 4},
		{"never the active segment", Config{RetentionAge: time.Nanosecond}, 10, 1000 * time.Hour, 4, 8},
		{"not past the high watermark", Config{RetentionAge: time.Nanosecond}, 5, 1000 * time.Hour, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			tc.cfg.SegmentBytes = 2 * size
			l := mustOpen(t, vfs.NewMem(), tc.cfg, WithClock(clock.Now))
			defer l.Close()
			now := clock.Now().UnixMilli()
			for i := range 10 {
				// Batch i is 10-i hours old.
				mustAppend(t, l, makeBatch(t, 1, now-int64(10-i)*3600_000, 100), 0)
			}
			l.SetHighWatermark(tc.hw)
			clock.Advance(tc.advance)
			// Time rule: segment k holds batches 2k, 2k+1, newest 9-2k hours old.
			n, err := l.ApplyRetention(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantDeleted || l.LogStartOffset() != tc.wantStart {
				t.Fatalf("deleted %d start %d, want %d %d", n, l.LogStartOffset(), tc.wantDeleted, tc.wantStart)
			}
			if _, err := l.Read(tc.wantStart-1, 100, 10); tc.wantStart > 0 && !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatalf("read below start: %v", err)
			}
			readAll(t, l, tc.wantStart, 10)
		})
	}
}

func TestDeleteRecordsBefore(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, fs, Config{SegmentBytes: 500})
	for i := range 10 {
		mustAppend(t, l, makeBatch(t, 2, int64(i), 100), 0)
	}
	if err := l.DeleteRecordsBefore(5); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past HW: %v", err)
	}
	l.SetHighWatermark(20)
	segs := l.Stats().Segments
	if err := l.DeleteRecordsBefore(7); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != 7 || l.Stats().Segments >= segs {
		t.Fatalf("start %d segments %d (before %d)", l.LogStartOffset(), l.Stats().Segments, segs)
	}
	if _, err := l.Read(6, 10, 20); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read 6: %v", err)
	}
	if hs := readAll(t, l, 7, 20); hs[0].BaseOffset != 6 {
		t.Fatalf("first batch %d", hs[0].BaseOffset)
	}
	l.Close()
	l = mustOpen(t, fs, Config{SegmentBytes: 500})
	defer l.Close()
	if l.LogStartOffset() != 7 || l.HighWatermark() != 20 {
		t.Fatalf("after reopen start %d hw %d", l.LogStartOffset(), l.HighWatermark())
	}
}

func TestEpochCache(t *testing.T) {
	var c epochCache
	steps := []struct {
		epoch int32
		start int64
	}{{0, 0}, {0, 5}, {2, 10}, {2, 12}, {5, 30}, {7, 30}}
	for _, s := range steps {
		c.assign(s.epoch, s.start)
	}
	want := []epochEntry{{0, 0}, {2, 10}, {7, 30}}
	if !equalEpochs(c.entries, want) {
		t.Fatalf("entries %v, want %v", c.entries, want)
	}
	for _, tc := range []struct {
		epoch     int32
		wantEpoch int32
		wantOff   int64
	}{
		{7, 7, 100}, // latest: LEO
		{2, 2, 30},  // next epoch's start
		{0, 0, 10},
		{1, 0, 10}, // unknown: largest epoch below
		{5, 2, 30},
		{8, UndefinedEpoch, UndefinedOffset},
		{-1, UndefinedEpoch, UndefinedOffset},
	} {
		e, off := c.endOffsetFor(tc.epoch, 100)
		if e != tc.wantEpoch || off != tc.wantOff {
			t.Errorf("endOffsetFor(%d) = %d, %d; want %d, %d", tc.epoch, e, off, tc.wantEpoch, tc.wantOff)
		}
	}
	c2 := epochCache{entries: []epochEntry{{3, 10}, {4, 20}}}
	if e, off := c2.endOffsetFor(1, 50); e != 1 || off != 10 {
		t.Errorf("below first epoch: %d %d", e, off)
	}
	c.truncateFromEnd(30)
	if !equalEpochs(c.entries, []epochEntry{{0, 0}, {2, 10}}) {
		t.Fatalf("truncateFromEnd: %v", c.entries)
	}
	c.truncateFromStart(12)
	if !equalEpochs(c.entries, []epochEntry{{2, 12}}) {
		t.Fatalf("truncateFromStart: %v", c.entries)
	}
	// Going back to an older epoch at a lower offset replaces the tail, as Kafka does.
	c3 := epochCache{entries: []epochEntry{{1, 0}, {3, 10}, {4, 20}}}
	c3.assign(3, 15)
	if !equalEpochs(c3.entries, []epochEntry{{1, 0}, {3, 15}}) {
		t.Fatalf("older epoch after newer: %v", c3.entries)
	}
}

func equalEpochs(a, b []epochEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReopenPreservesEverything(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 800, IndexIntervalBytes: 100}
	l := mustOpen(t, fs, cfg)
	for i := range 40 {
		mustAppend(t, l, makeBatch(t, 3, int64(i*10), 40), int32(i/15))
	}
	l.SetHighWatermark(100)
	l.SetHighWatermark(90) // never lowers
	before := readAll(t, l, 0, l.LogEndOffset())
	st := l.Stats()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.AppendAsLeader(ctx, makeBatch(t, 1, 0, 1), 9); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := l.Read(0, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := l.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("flush after close: %v", err)
	}

	l = mustOpen(t, fs, cfg)
	defer l.Close()
	st2 := l.Stats()
	st.RecoveryPoint = st2.RecoveryPoint // before Close it depends on background flushes
	if st2 != st {
		t.Fatalf("stats %+v, before %+v", st2, st)
	}
	if st2.HighWatermark != 100 || st2.RecoveryPoint != st2.LogEnd {
		t.Fatalf("HW %d RP %d", st2.HighWatermark, st2.RecoveryPoint)
	}
	after := readAll(t, l, 0, l.LogEndOffset())
	if len(after) != len(before) {
		t.Fatalf("%d batches after reopen, %d before", len(after), len(before))
	}
	for i := range after {
		if after[i] != before[i] {
			t.Fatalf("batch %d differs", i)
		}
	}
	if l.LatestEpoch() != 2 {
		t.Fatalf("epoch %d", l.LatestEpoch())
	}
	if e, off := l.EndOffsetForEpoch(0); e != 0 || off != 45 {
		t.Fatalf("EndOffsetForEpoch(0) = %d %d", e, off)
	}
	// HW is clamped to LEO.
	l.SetHighWatermark(1 << 40)
	if l.HighWatermark() != l.LogEndOffset() {
		t.Fatalf("HW %d LEO %d", l.HighWatermark(), l.LogEndOffset())
	}
}

func TestHighWatermarkCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, fs, Config{})
	for range 5 {
		mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	}
	l.SetHighWatermark(6)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(8) // not checkpointed before the crash
	crashed := fs.Crash(vfs.CrashOptions{})
	l.Close()
	l2 := mustOpen(t, crashed, Config{})
	defer l2.Close()
	if l2.HighWatermark() != 6 || l2.LogEndOffset() != 10 {
		t.Fatalf("HW %d LEO %d, want 6 10", l2.HighWatermark(), l2.LogEndOffset())
	}
}

// SegmentJitter (segment.jitter.ms): each segment rolls by age somewhere
// in (SegmentAge-SegmentJitter, SegmentAge], drawn per segment, so of many
// logs some roll before SegmentAge, none before SegmentAge-SegmentJitter,
// and every one by SegmentAge.
func TestRollJitter(t *testing.T) {
	clock := newClock()
	const logs = 20
	var ls []*Log
	for range logs {
		l := mustOpen(t, vfs.NewMem(), Config{SegmentAge: time.Hour, SegmentJitter: 30 * time.Minute}, WithClock(clock.Now))
		defer l.Close()
		mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
		ls = append(ls, l)
	}
	rolled := func() int {
		n := 0
		for _, l := range ls {
			mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
			if l.Stats().Segments > 1 {
				n++
			}
		}
		return n
	}
	clock.Advance(30 * time.Minute)
	if n := rolled(); n != 0 {
		t.Fatalf("%d logs rolled before SegmentAge-SegmentJitter", n)
	}
	clock.Advance(29 * time.Minute)
	// A log stays unrolled here only with a jitter under a minute (1 in
	// 30): that none of 20 rolled has a chance of 30^-20.
	if n := rolled(); n == 0 {
		t.Fatalf("none of %d logs rolled between SegmentAge-SegmentJitter and SegmentAge", logs)
	}
	clock.Advance(time.Minute)
	if n := rolled(); n != logs {
		t.Fatalf("%d of %d logs rolled at SegmentAge", n, logs)
	}
	if err := (Config{SegmentJitter: -1}).Validate(); err == nil {
		t.Fatal("a negative SegmentJitter is accepted")
	}
}

// An idle log's checkpoint is not written again: nothing changed, and a
// node with thousands of idle replicas spent a sixth of its CPU replacing
// and fsyncing identical files. A change is written at the next flush.
func TestIdleCheckpointIsNotRewritten(t *testing.T) {
	fs := vfs.Inject(vfs.NewMem())
	l := mustOpen(t, fs, Config{})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	l.SetHighWatermark(2)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// From here every write of the checkpoint fails.
	fs.Add(vfs.Fault{Op: vfs.OpCreate, Path: logCheckpointFile, Sticky: true})
	for range 3 {
		if err := l.Flush(ctx); err != nil {
			t.Fatalf("a flush with nothing new wrote the checkpoint: %v", err)
		}
	}
	mustAppend(t, l, makeBatch(t, 2, 0, 10), 0)
	l.SetHighWatermark(4) // nothing on disk says so yet
	if err := l.Flush(ctx); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("a flush after the high watermark moved: %v, want the checkpoint written (and failing)", err)
	}
}
