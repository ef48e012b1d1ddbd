package partlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// idemBatch builds a batch of n records of producer pid at epoch from
// sequence seq, with timestamps ts.
func idemBatch(t testing.TB, pid int64, epoch int16, seq int32, n int, ts int64) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: []byte("value"), Timestamp: ts}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantBatches(t testing.TB, l *Log, pid int64, want ...ProducerBatch) {
	t.Helper()
	st, ok := l.Producer(pid)
	if !ok && len(want) > 0 {
		t.Fatalf("producer %d unknown, want batches %v", pid, want)
	}
	if !slices.Equal(st.Batches, want) {
		t.Fatalf("producer %d batches %v, want %v", pid, st.Batches, want)
	}
}

func snapshotsIn(t testing.TB, fs vfs.FS) []int64 {
	t.Helper()
	names, err := fs.ReadDir(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for _, n := range names {
		if off, ok := parseSnapshotName(n); ok {
			offs = append(offs, off)
		}
	}
	slices.Sort(offs)
	return offs
}

// The state follows appends as leader and follower and keeps the last
// ProducerWindow batches of the latest epoch.
func TestProducerStateFollowsAppends(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, fs, Config{})
	defer l.Close()
	ts := int64(1_700_000_000_000)
	mustAppend(t, l, makeBatch(t, 2, ts, 10), 0) // not idempotent: offsets 0-1
	for i := range int32(7) {
		mustAppend(t, l, idemBatch(t, 7, 0, 2*i, 2, ts), 0) // offsets 2+4i...
	}
	var want []ProducerBatch
	for i := int32(2); i < 7; i++ {
		want = append(want, ProducerBatch{FirstSeq: 2 * i, LastSeq: 2*i + 1, FirstOffset: 2 + 2*int64(i), LastOffset: 3 + 2*int64(i)})
	}
	wantBatches(t, l, 7, want...)
	// A new producer epoch starts a new window.
	mustAppend(t, l, idemBatch(t, 7, 1, 0, 1, ts), 0)
	wantBatches(t, l, 7, ProducerBatch{FirstSeq: 0, LastSeq: 0, FirstOffset: 16, LastOffset: 16})
	if st, _ := l.Producer(7); st.Epoch != 1 {
		t.Fatalf("epoch %d, want 1", st.Epoch)
	}
	// A follower append records the leader's offsets.
	f := mustOpen(t, vfs.NewMem(), Config{})
	defer f.Close()
	b := idemBatch(t, 9, 3, 40, 3, ts)
	recordbatch.SetBaseOffset(b, 0)
	if _, err := f.AppendAsFollower(ctx, b); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, f, 9, ProducerBatch{FirstSeq: 40, LastSeq: 42, FirstOffset: 0, LastOffset: 2})
	if _, ok := f.Producer(8); ok {
		t.Fatal("unknown producer reported")
	}
}

// A snapshot is written at every roll and on Close; reopening loads the
// newest and reads the batches after it, and the state survives retention
// deleting every segment that held the producer's batches.
func TestProducerStateSurvivesReopenAndRetention(t *testing.T) {
	fs := vfs.NewMem()
	clock := newClock()
	cfg := Config{SegmentBytes: 400, RetentionBytes: -1, RetentionAge: -1}
	l := mustOpen(t, fs, cfg, WithClock(clock.Now))
	ts := clock.Now().UnixMilli()
	mustAppend(t, l, idemBatch(t, 7, 0, 0, 2, ts), 0)
	for range 20 {
		mustAppend(t, l, makeBatch(t, 1, ts, 100), 0)
	}
	mustAppend(t, l, idemBatch(t, 8, 0, 0, 1, ts), 0) // in the active segment
	seg := l.Stats().Segments
	snaps := snapshotsIn(t, fs)
	if len(snaps) != seg-1 {
		t.Fatalf("%d snapshots %v for %d segments: want one per roll", len(snaps), snaps, seg)
	}
	seven := ProducerBatch{FirstSeq: 0, LastSeq: 1, FirstOffset: 0, LastOffset: 1}
	eight := ProducerBatch{FirstSeq: 0, LastSeq: 0, FirstOffset: 22, LastOffset: 22}

	// A crash after a flush (no Close): the snapshots written at rolls
	// were not fsynced and come back empty; they are set aside and the
	// state is read back from the segments.
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustOpen(t, fs.Crash(vfs.CrashOptions{}), cfg, WithClock(clock.Now))
	if l2.LogEndOffset() != 23 {
		t.Fatalf("log end %d after a crash that follows a flush, want 23", l2.LogEndOffset())
	}
	wantBatches(t, l2, 7, seven)
	wantBatches(t, l2, 8, eight)
	l2.Close()

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := snapshotsIn(t, fs); got[len(got)-1] != 23 {
		t.Fatalf("snapshots %v, want one at the log end 23 after Close", got)
	}
	l = mustOpen(t, fs, cfg, WithClock(clock.Now))
	wantBatches(t, l, 7, seven)
	wantBatches(t, l, 8, eight)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.RetentionBytes = 300
	l = mustOpen(t, fs, cfg, WithClock(clock.Now))
	l.SetHighWatermark(l.LogEndOffset())
	if _, err := l.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() <= 1 {
		t.Fatalf("log start %d: retention deleted nothing", l.LogStartOffset())
	}
	wantBatches(t, l, 7, seven)
	for _, off := range snapshotsIn(t, fs) {
		if off < l.segs[0].base {
			t.Fatalf("snapshot %d left below the first segment %d", off, l.segs[0].base)
		}
	}
	// A crash right after retention: the snapshot written before the
	// segments went is durable.
	l2 = mustOpen(t, fs.Crash(vfs.CrashOptions{}), cfg, WithClock(clock.Now))
	wantBatches(t, l2, 7, seven)
	l2.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, cfg, WithClock(clock.Now))
	defer l.Close()
	wantBatches(t, l, 7, seven)
	wantBatches(t, l, 8, eight)
}

// Truncation forgets the batches it removes and the snapshots past the new
// end; a full truncation forgets everything.
func TestProducerStateFollowsTruncation(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 300}
	l := mustOpen(t, fs, cfg)
	defer l.Close()
	ts := int64(1_700_000_000_000)
	var all []ProducerBatch
	for i := range int32(5) {
		mustAppend(t, l, idemBatch(t, 7, 0, i, 1, ts), 0)
		mustAppend(t, l, makeBatch(t, 1, ts, 150), 0)
		all = append(all, ProducerBatch{FirstSeq: i, LastSeq: i, FirstOffset: 2 * int64(i), LastOffset: 2 * int64(i)})
	}
	if len(snapshotsIn(t, fs)) < 3 {
		t.Fatalf("snapshots %v: the test needs several", snapshotsIn(t, fs))
	}
	if err := l.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, l, 7, all[:3]...)
	for _, off := range snapshotsIn(t, fs) {
		if off > 5 {
			t.Fatalf("snapshot %d left past the truncation point 5", off)
		}
	}
	// Appends after the truncation continue from the cut state.
	mustAppend(t, l, idemBatch(t, 7, 0, 3, 1, ts), 0)
	wantBatches(t, l, 7, append(slices.Clone(all[:3]), ProducerBatch{FirstSeq: 3, LastSeq: 3, FirstOffset: 5, LastOffset: 5})...)
	if err := l.TruncateFullyAndStartAt(40); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, l, 7)
	if s := snapshotsIn(t, fs); len(s) != 0 {
		t.Fatalf("snapshots %v after a full truncation", s)
	}
}

// A corrupt newest snapshot is removed and an older one used, with more of
// the log read; the state comes out the same.
func TestCorruptProducerSnapshotFallsBack(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 300}
	l := mustOpen(t, fs, cfg)
	ts := int64(1_700_000_000_000)
	var want []ProducerBatch
	for i := range int32(6) {
		mustAppend(t, l, idemBatch(t, 7, 0, i, 1, ts), 0)
		mustAppend(t, l, makeBatch(t, 1, ts, 150), 0)
		want = append(want, ProducerBatch{FirstSeq: i, LastSeq: i, FirstOffset: 2 * int64(i), LastOffset: 2 * int64(i)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snaps := snapshotsIn(t, fs)
	for _, off := range snaps[len(snaps)-2:] {
		path := testDir + "/" + snapshotName(off)
		b, err := vfs.ReadFile(fs, path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := vfs.WriteFileAtomic(fs, path, b); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, fs, cfg)
	defer l.Close()
	wantBatches(t, l, 7, want[1:]...)
	if got := snapshotsIn(t, fs); !slices.Equal(got, snaps[:len(snaps)-2]) {
		t.Fatalf("snapshots %v after open, want the corrupt ones removed: %v", got, snaps[:len(snaps)-2])
	}
}

// A producer not seen for ProducerExpiry is forgotten, in memory and in
// the snapshots.
func TestProducerStateExpires(t *testing.T) {
	fs := vfs.NewMem()
	clock := newClock()
	cfg := Config{ProducerExpiry: time.Hour, CheckpointInterval: -1}
	l := mustOpen(t, fs, cfg, WithClock(clock.Now))
	ts := clock.Now().UnixMilli()
	mustAppend(t, l, idemBatch(t, 7, 0, 0, 1, ts), 0)
	clock.Advance(40 * time.Minute)
	mustAppend(t, l, idemBatch(t, 8, 0, 0, 1, ts), 0)
	clock.Advance(30 * time.Minute)
	// Listed by id while remembered; an expired one is not listed even
	// before the expiry round forgets it.
	if ps := l.Producers(); len(ps) != 1 || ps[0].ID != 8 || ps[0].Epoch != 0 || len(ps[0].Batches) != 1 || ps[0].Batches[0].FirstOffset != 1 {
		t.Fatalf("producers listed 70 minutes after producer 7's last batch: %+v, want 8 alone", ps)
	}
	l.expireProducers()
	if _, ok := l.Producer(7); ok {
		t.Fatal("producer 7 remembered 70 minutes after its last batch")
	}
	wantBatches(t, l, 8, ProducerBatch{FirstOffset: 1, LastOffset: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(31 * time.Minute)
	l = mustOpen(t, fs, cfg, WithClock(clock.Now))
	defer l.Close()
	if _, ok := l.Producer(8); ok {
		t.Fatal("producer 8 loaded from a snapshot after it expired")
	}
}

// TestSnapshotRoundTrip encodes states of several shapes and decodes them
// back unchanged; a flipped bit anywhere is detected.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 3, 100} {
		ps := sampleProducers(n, true)
		b := encodeSnapshot(1000, ps)
		off, got, err := decodeSnapshot(b)
		if err != nil || off != 1000 {
			t.Fatalf("%d producers: decode: %d %v", n, off, err)
		}
		if again := encodeSnapshot(off, got); !bytes.Equal(again, b) {
			t.Fatalf("%d producers: re-encoded differently", n)
		}
		for i := 0; i < len(b); i += 7 {
			c := bytes.Clone(b)
			c[i] ^= 0x10
			if _, _, err := decodeSnapshot(c); err == nil {
				t.Fatalf("%d producers: flipped byte %d decoded", n, i)
			}
		}
	}
}

// sampleProducers returns n producers of several shapes; with txns, every
// third has an open transaction and every other one a coordinator epoch
// (which only version 2 snapshots hold).
func sampleProducers(n int, txns bool) *producers {
	ps := newProducers()
	for i := range n {
		id := int64(i*i + 1)
		e := newProducerEntry(int16(i % 3))
		e.lastSeen = 1_700_000_000_000 + int64(i)
		for j := range i % (ProducerWindow + 1) {
			e.batches = append(e.batches, ProducerBatch{FirstSeq: int32(10 * j), LastSeq: int32(10*j + 9),
				FirstOffset: int64(100 * j), LastOffset: int64(100*j + 9)})
		}
		if txns && i%2 == 1 {
			e.coordEpoch = int32(i)
		}
		if txns && i%3 == 2 {
			e.txnOpen, e.txnFirst = true, int64(500+i)
			ps.ongoing[id] = e.txnFirst
		}
		ps.m[id] = e
	}
	return ps
}

// FuzzProducerSnapshot feeds arbitrary bytes to the snapshot decoder. The
// seed corpus in testdata/fuzz/FuzzProducerSnapshot runs with every plain
// `go test`; explore with
//
//	go test ./partlog -run '^$' -fuzz FuzzProducerSnapshot -fuzztime 60s
//
// Each input is decoded as given and with its CRC repaired (otherwise
// almost every mutation stops at the CRC). It asserts that decoding never
// panics, that every error wraps errSnapshot, and that whatever decodes
// encodes back to the same bytes (the layout has one form per state).
func FuzzProducerSnapshot(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSnapshot(t, b)
		if len(b) >= 4 {
			fixed := bytes.Clone(b)
			body := fixed[:len(fixed)-4]
			copy(fixed[len(fixed)-4:], encodeCRC(body))
			checkSnapshot(t, fixed)
		}
	})
}

func checkSnapshot(t *testing.T, b []byte) {
	v, off, ps, err := decodeSnapshotVersion(b)
	if err != nil {
		if !isSnapshotErr(err) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		return
	}
	if again := encodeSnapshotVersion(v, off, ps); !bytes.Equal(again, b) {
		t.Fatalf("decoded snapshot re-encodes differently:\n%x\n%x", b, again)
	}
}

var writeFuzzCorpus = flag.Bool("write-fuzz-corpus", false,
	"rewrite the generated seeds in testdata/fuzz/FuzzProducerSnapshot and exit the test")

func encodeCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli))
}

func isSnapshotErr(err error) bool { return errors.Is(err, errSnapshot) }

// TestWriteSnapshotFuzzCorpus regenerates the seed corpus when run with
// -write-fuzz-corpus: valid snapshots of several sizes, and truncated and
// bit-flipped copies. Crashers found by fuzzing are kept in the same
// directory under their hash names and are not touched.
func TestWriteSnapshotFuzzCorpus(t *testing.T) {
	if !*writeFuzzCorpus {
		t.Skip("run with -write-fuzz-corpus to regenerate the seed corpus")
	}
	seeds := map[string][]byte{"empty": {}, "short": []byte(snapshotMagic)}
	for _, n := range []int{0, 1, 2, 7} {
		// Version 1 seeds keep their old names; version 2 ones add "v2-".
		for _, v := range []uint16{1, 2} {
			prefix := ""
			if v == 2 {
				prefix = "v2-"
			}
			b := encodeSnapshotVersion(v, int64(1000+n), sampleProducers(n, v == 2))
			seeds[fmt.Sprintf("%svalid-%d", prefix, n)] = b
			seeds[fmt.Sprintf("%struncated-%d", prefix, n)] = b[:len(b)*2/3]
			flipped := bytes.Clone(b)
			flipped[len(flipped)/2] ^= 0x01
			seeds[fmt.Sprintf("%sflipped-%d", prefix, n)] = flipped
		}
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzProducerSnapshot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seeds {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d seeds to %s", len(seeds), dir)
}

// Producers outlive the batches that hold them, also across the full
// truncations: a truncation at or below the log start keeps what was known
// of the batches below the new start; a log started from another log's
// state (ResetWithProducers) knows its producers, and one started with
// none (TruncateFullyAndStartAt) says so until they would have expired.
func TestProducerStateAcrossFullTruncation(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	cfg := Config{SegmentBytes: 300}
	l := mustOpen(t, fs, cfg, WithClock(clk.Now))
	defer l.Close()
	ts := int64(1_700_000_000_000)
	mustAppend(t, l, idemBatch(t, 7, 0, 0, 1, ts), 0) // offset 0
	mustAppend(t, l, idemBatch(t, 7, 0, 1, 1, ts), 0) // offset 1
	mustAppend(t, l, makeBatch(t, 1, ts, 150), 0)     // offset 2
	mustAppend(t, l, idemBatch(t, 8, 0, 0, 1, ts), 0) // offset 3
	mustAppend(t, l, makeBatch(t, 1, ts, 150), 0)     // offset 4
	b0 := ProducerBatch{FirstSeq: 0, LastSeq: 0, FirstOffset: 0, LastOffset: 0}
	b1 := ProducerBatch{FirstSeq: 1, LastSeq: 1, FirstOffset: 1, LastOffset: 1}
	l.SetHighWatermark(5)
	if err := l.DeleteRecordsBefore(2); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() < 2 || !l.ProducersComplete() {
		t.Fatalf("log start %d, producers complete %v", l.LogStartOffset(), l.ProducersComplete())
	}

	// The state as of 3 holds producer 7's batches and producer 8's epoch
	// without its batch at 3.
	state, err := l.ProducerStateAt(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ProducerStateAt(0); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("state below the log start: %v, want ErrOffsetOutOfRange", err)
	}
	fs2 := vfs.NewMem()
	other := mustOpen(t, fs2, cfg, WithClock(clk.Now))
	if err := other.ResetWithProducers(3, state); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, other, 7, b0, b1)
	wantBatches(t, other, 8)
	if _, known := other.Producer(8); !known || !other.ProducersComplete() {
		t.Fatalf("after a reset with state: producer 8 known %v, complete %v", known, other.ProducersComplete())
	}
	if err := other.ResetWithProducers(4, state); err == nil {
		t.Fatal("a state as of 3 accepted for a log starting at 4")
	}
	other.Close()
	other = mustOpen(t, fs2, cfg, WithClock(clk.Now)) // the state was saved
	wantBatches(t, other, 7, b0, b1)
	if !other.ProducersComplete() {
		t.Fatal("reopened after a reset with state: producers incomplete")
	}
	other.Close()

	// A truncation at the log start keeps the batches below it.
	if err := l.TruncateTo(l.LogStartOffset()); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, l, 7, b0, b1)
	if !l.ProducersComplete() {
		t.Fatal("producers incomplete after a truncation that kept them")
	}

	// Started over with no state: incomplete until producers would have
	// expired, and again when reopened with nothing saved.
	if err := l.TruncateFullyAndStartAt(40); err != nil {
		t.Fatal(err)
	}
	if l.ProducersComplete() {
		t.Fatal("producers complete after starting over at 40 without a state")
	}
	l.Close()
	l = mustOpen(t, fs, cfg, WithClock(clk.Now))
	if l.ProducersComplete() {
		t.Fatal("reopened at 40 with no state saved: producers complete")
	}
	clk.Advance(DefaultProducerExpiry)
	if !l.ProducersComplete() {
		t.Fatal("producers still incomplete once every one of them would have expired")
	}
}
