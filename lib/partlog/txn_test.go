package partlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// txnBatch builds a transactional batch of n records of producer pid at
// epoch from sequence seq.
func txnBatch(t testing.TB, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Key: []byte{byte(i)}, Value: []byte("txn value"), Timestamp: 1_700_000_000_000}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, Transactional: true,
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarker(t testing.TB, l *Log, pid int64, epoch int16, typ recordbatch.ControlType, coordEpoch int32) int64 {
	t.Helper()
	info, err := l.AppendMarker(ctx, pid, epoch, recordbatch.Marker{Type: typ, CoordinatorEpoch: coordEpoch}, 0)
	if err != nil {
		t.Fatalf("marker of %d: %v", pid, err)
	}
	return info.FirstOffset
}

func wantLSO(t testing.TB, l *Log, want int64) {
	t.Helper()
	if got := l.LastStableOffset(); got != want {
		t.Fatalf("last stable offset %d, want %d (high watermark %d)", got, want, l.HighWatermark())
	}
}

func wantTxn(t testing.TB, l *Log, pid, first int64, coordEpoch int32) {
	t.Helper()
	st, ok := l.Producer(pid)
	if !ok || st.TxnFirstOffset != first || st.CoordinatorEpoch != coordEpoch {
		t.Fatalf("producer %d: %+v (known %v), want open transaction from %d, coordinator epoch %d", pid, st, ok, first, coordEpoch)
	}
}

// A transaction opens with its first transactional batch and ends with
// its marker; the LSO waits at the first offset of the earliest open
// transaction, and at an ended one until the high watermark passes its
// marker (Kafka's unreplicated transactions).
func TestTxnMarkersAndLastStableOffset(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 1, 0, 10), 0) // 0
	l.SetHighWatermark(1)
	wantLSO(t, l, 1)

	mustAppend(t, l, txnBatch(t, 7, 0, 0, 2), 0) // 1-2
	wantLSO(t, l, 1)
	l.SetHighWatermark(3)
	wantLSO(t, l, 1)
	wantTxn(t, l, 7, 1, -1)
	mustAppend(t, l, txnBatch(t, 8, 0, 0, 1), 0) // 3
	mustAppend(t, l, txnBatch(t, 7, 0, 2, 1), 0) // 4: the same transaction
	wantTxn(t, l, 7, 1, -1)
	if off := mustMarker(t, l, 7, 0, recordbatch.ControlCommit, 3); off != 5 {
		t.Fatalf("commit marker at %d, want 5", off)
	}
	wantTxn(t, l, 7, -1, 3)
	l.SetHighWatermark(5)
	wantLSO(t, l, 1) // the commit is not replicated yet
	l.SetHighWatermark(6)
	wantLSO(t, l, 3) // producer 8 is still open
	if off := mustMarker(t, l, 8, 0, recordbatch.ControlAbort, 3); off != 6 {
		t.Fatalf("abort marker at %d, want 6", off)
	}
	l.SetHighWatermark(7)
	wantLSO(t, l, 7)
	got, err := l.AbortedTxns(0, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := []AbortedTxn{{ProducerID: 8, FirstOffset: 3, LastOffset: 6, LastStableOffset: 7}}; !slices.Equal(got, want) {
		t.Fatalf("aborted %+v, want %+v", got, want)
	}
	for _, r := range []struct{ from, to int64 }{{0, 3}, {7, 8}, {4, 4}} {
		if got, _ := l.AbortedTxns(r.from, r.to); len(got) != 0 {
			t.Fatalf("aborted in [%d, %d): %+v, want none", r.from, r.to, got)
		}
	}
	res, err := l.Read(0, 1<<20, l.LastStableOffset())
	if err != nil || res.LastStableOffset != 7 || res.NextOffset != 7 {
		t.Fatalf("read: %+v %v", res, err)
	}

	// A marker the coordinator sends again for a producer with no open
	// transaction is appended and changes nothing else.
	mustMarker(t, l, 7, 0, recordbatch.ControlCommit, 3)
	l.SetHighWatermark(l.LogEndOffset())
	wantLSO(t, l, 8)
	wantTxn(t, l, 7, -1, 3)
	// The LSO never passes the high watermark.
	mustAppend(t, l, makeBatch(t, 1, 0, 10), 0)
	wantLSO(t, l, 8)
}

// The leader refuses a marker of an older coordinator epoch or producer
// epoch than the producer's, and control batches that are not markers;
// a follower copies whatever its leader wrote.
func TestTxnMarkerFencing(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, 9, 2, 0, 1), 0)
	mustMarker(t, l, 9, 2, recordbatch.ControlAbort, 5)
	leo := l.LogEndOffset()
	_, err := l.AppendMarker(ctx, 9, 2, recordbatch.Marker{Type: recordbatch.ControlCommit, CoordinatorEpoch: 4}, 0)
	wantErrIs(t, err, ErrCoordinatorFenced)
	_, err = l.AppendMarker(ctx, 9, 1, recordbatch.Marker{Type: recordbatch.ControlAbort, CoordinatorEpoch: 5}, 0)
	wantErrIs(t, err, ErrInvalidProducerEpoch)
	// Two markers in one append are checked in order.
	m1, _ := recordbatch.BuildMarker(9, 2, 0, recordbatch.Marker{Type: recordbatch.ControlAbort, CoordinatorEpoch: 6})
	m2, _ := recordbatch.BuildMarker(9, 2, 0, recordbatch.Marker{Type: recordbatch.ControlAbort, CoordinatorEpoch: 5})
	_, err = l.AppendAsLeader(ctx, append(m1, m2...), 0)
	wantErrIs(t, err, ErrCoordinatorFenced)
	notMarker := makeBatch(t, 1, 0, 4)
	binary.BigEndian.PutUint16(notMarker[21:], 0x20)
	binary.BigEndian.PutUint32(notMarker[17:], recordbatch.ComputeCRC(notMarker))
	_, err = l.AppendAsLeader(ctx, notMarker, 0)
	wantErrIs(t, err, ErrInvalidBatch)
	if l.LogEndOffset() != leo {
		t.Fatalf("log end %d after refused markers, want %d", l.LogEndOffset(), leo)
	}
	wantTxn(t, l, 9, -1, 5)
	// A new producer epoch fences the old one's markers and starts a new
	// window.
	mustMarker(t, l, 9, 3, recordbatch.ControlAbort, 5)
	if st, _ := l.Producer(9); st.Epoch != 3 || len(st.Batches) != 0 {
		t.Fatalf("after a marker of epoch 3: %+v", st)
	}

	// The follower takes the fenced marker its leader wrote.
	f := mustOpen(t, vfs.NewMem(), Config{}, WithClock(newClock().Now))
	defer f.Close()
	res, err := l.Read(0, 1<<20, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := recordbatch.BuildMarker(9, 3, 0, recordbatch.Marker{Type: recordbatch.ControlCommit, CoordinatorEpoch: 1})
	recordbatch.SetBaseOffset(stale, l.LogEndOffset())
	if _, err := f.AppendAsFollower(ctx, append(res.Batches, stale...)); err != nil {
		t.Fatal(err)
	}
	wantTxn(t, f, 9, -1, 1)
}

// abortedEntry is a .txnindex entry as Kafka's AbortedTxn writes it.
func abortedEntry(pid, first, last, lso int64) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	for _, v := range []int64{pid, first, last, lso} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// The .txnindex holds Kafka's 34-byte AbortedTxn entries, one per abort
// marker of a transaction that wrote to the segment.
func TestTxnIndexFileIsKafkas(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, fs, Config{})
	mustAppend(t, l, txnBatch(t, 0x0102030405060708, 0, 0, 3), 0)        // 0-2
	mustAppend(t, l, txnBatch(t, 2, 0, 0, 1), 0)                         // 3
	mustMarker(t, l, 0x0102030405060708, 0, recordbatch.ControlAbort, 1) // 4: LSO 3 (producer 2 open)
	mustMarker(t, l, 3, 0, recordbatch.ControlAbort, 1)                  // 5: a transaction with nothing here
	mustMarker(t, l, 2, 0, recordbatch.ControlAbort, 1)                  // 6: LSO 7
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := vfs.ReadFile(fs, testDir+"/"+segmentName(0)+txnIndexSuffix)
	if err != nil {
		t.Fatal(err)
	}
	want := mustHexT(t, `
		0000 0102030405060708 0000000000000000 0000000000000004 0000000000000003
		0000 0000000000000002 0000000000000003 0000000000000006 0000000000000007`)
	if !bytes.Equal(got, want) {
		t.Fatalf(".txnindex\n%x\nwant\n%x", got, want)
	}
	if !bytes.Equal(want, append(abortedEntry(0x0102030405060708, 0, 4, 3), abortedEntry(2, 3, 6, 7)...)) {
		t.Fatal("the hand-laid entries disagree with the layout")
	}
}

func mustHexT(t testing.TB, s string) []byte {
	t.Helper()
	var b []byte
	if _, err := fmt.Sscanf(strings.Join(strings.Fields(s), ""), "%x", &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// txnModel drives a log through random transactions of a few producers,
// with plain batches between, and remembers what the log must say of
// them.
type txnModel struct {
	rng     *rand.Rand
	open    map[int64]int64 // producer -> first offset
	seq     map[int64]int32
	aborted []AbortedTxn
	// history is the model after each step, by the log end it left.
	history map[int64]txnModelState
}

type txnModelState struct {
	open    map[int64]int64
	seq     map[int64]int32
	aborted []AbortedTxn
}

func newTxnModel(seed uint64) *txnModel {
	m := &txnModel{rng: rand.New(rand.NewPCG(seed, 1)), open: map[int64]int64{}, seq: map[int64]int32{},
		history: map[int64]txnModelState{}}
	m.history[0] = txnModelState{open: map[int64]int64{}, seq: map[int64]int32{}}
	return m
}

// rewind sets the model back to when the log ended at end, as a crash or
// a truncation to a batch boundary leaves it.
func (m *txnModel) rewind(t testing.TB, end int64) {
	t.Helper()
	st, ok := m.history[end]
	if !ok {
		t.Fatalf("no step left the log at %d", end)
	}
	m.open, m.seq, m.aborted = maps.Clone(st.open), maps.Clone(st.seq), slices.Clone(st.aborted)
	maps.DeleteFunc(m.history, func(off int64, _ txnModelState) bool { return off > end })
}

// step appends one batch or marker to l.
func (m *txnModel) step(t testing.TB, l *Log) {
	t.Helper()
	pid := int64(1 + m.rng.IntN(4))
	first, isOpen := m.open[pid]
	switch r := m.rng.IntN(10); {
	case r < 2:
		mustAppend(t, l, makeBatch(t, 1+m.rng.IntN(3), 0, 50), 0)
	case !isOpen || r < 6:
		n := 1 + m.rng.IntN(3)
		info := mustAppend(t, l, txnBatch(t, pid, 0, m.seq[pid], n), 0)
		m.seq[pid] += int32(n)
		if !isOpen {
			m.open[pid] = info.FirstOffset
		}
	default:
		abort := m.rng.IntN(2) == 0
		typ := recordbatch.ControlCommit
		if abort {
			typ = recordbatch.ControlAbort
		}
		off := mustMarker(t, l, pid, 0, typ, 1)
		delete(m.open, pid)
		if abort {
			lso := off + 1
			for _, f := range m.open {
				lso = min(lso, f)
			}
			m.aborted = append(m.aborted, AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: off, LastStableOffset: lso})
		}
	}
	m.history[l.LogEndOffset()] = txnModelState{open: maps.Clone(m.open), seq: maps.Clone(m.seq), aborted: slices.Clone(m.aborted)}
}

// check compares the log with the model: every aborted transaction, the
// open ones and the LSO at the high watermark.
func (m *txnModel) check(t testing.TB, l *Log) {
	t.Helper()
	got, err := l.AbortedTxns(l.LogStartOffset(), l.LogEndOffset()+1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, m.aborted) {
		t.Fatalf("aborted transactions\n%+v\nwant\n%+v", got, m.aborted)
	}
	lso := l.LogEndOffset()
	for pid := int64(1); pid <= 4; pid++ {
		first, ok := m.open[pid]
		if !ok {
			first = -1
		} else {
			lso = min(lso, first)
		}
		if st, _ := l.Producer(pid); st.TxnFirstOffset != first {
			t.Fatalf("producer %d: open transaction from %d, want %d", pid, st.TxnFirstOffset, first)
		}
	}
	l.SetHighWatermark(l.LogEndOffset())
	wantLSO(t, l, lso)
}

// Recovery rebuilds the aborted transaction index and the open
// transactions: after a clean close, after a crash that loses the
// unsynced tail with its index, and with index files lost, corrupt, or
// with every snapshot gone.
func TestTxnRecoveryRebuildsIndexAndOpenTxns(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 600, RetentionBytes: -1, RetentionAge: -1}
	l := mustOpen(t, fs, cfg)
	m := newTxnModel(1)
	for range 150 {
		m.step(t, l)
	}
	if l.Stats().Segments < 5 {
		t.Fatalf("%d segments; the test wants several", l.Stats().Segments)
	}
	m.check(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, cfg)
	m.check(t, l)

	// A crash after a flush: the tail after it, and its index entries,
	// are lost together; the batches before it keep theirs. Rolls fsync
	// in the background, so more than the flush may survive, at times
	// all of it: then the crash is tried again until one loses a tail.
	for attempt := 1; ; attempt++ {
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		synced := l.LogEndOffset()
		for range 40 {
			m.step(t, l)
		}
		crashed := fs.Crash(vfs.CrashOptions{})
		l.Close()
		l = mustOpen(t, crashed, cfg)
		fs = crashed
		if l.LogEndOffset() < synced {
			t.Fatalf("log end %d after the crash; %d was synced, %d appended", l.LogEndOffset(), synced, m.lastEnd(t))
		}
		if l.LogEndOffset() < m.lastEnd(t) {
			break
		}
		if attempt == 10 {
			t.Fatalf("ten crashes kept every batch appended; the test wants one that loses a tail")
		}
		m.check(t, l)
	}
	m.rewind(t, l.LogEndOffset())
	m.check(t, l)
	// Go on from there.
	for range 40 {
		m.step(t, l)
	}
	m.check(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Lost and corrupt index files of trusted segments.
	names, _ := fs.ReadDir(testDir)
	var withIndex []string
	for _, n := range names {
		if strings.HasSuffix(n, txnIndexSuffix) {
			withIndex = append(withIndex, n)
		}
	}
	if len(withIndex) < 3 {
		t.Fatalf("%d segments with aborted transactions; the test wants 3", len(withIndex))
	}
	orig, _ := vfs.ReadFile(fs, testDir+"/"+withIndex[1])
	// The first loses both its offset and transaction indexes (so it is
	// read again); the second's is garbage; the third's is cut short.
	base := strings.TrimSuffix(withIndex[0], txnIndexSuffix)
	for _, suf := range []string{txnIndexSuffix, offsetIndexSuffix} {
		if err := fs.Remove(testDir + "/" + base + suf); err != nil {
			t.Fatal(err)
		}
	}
	garbage := bytes.Repeat([]byte{1}, len(orig))
	writeFile(t, fs, testDir+"/"+withIndex[1], garbage)
	third, _ := vfs.ReadFile(fs, testDir+"/"+withIndex[2])
	writeFile(t, fs, testDir+"/"+withIndex[2], third[:len(third)-3])
	l = mustOpen(t, fs, cfg)
	m.check(t, l)
	if got, _ := vfs.ReadFile(fs, testDir+"/"+withIndex[1]); !bytes.Equal(got, orig) {
		t.Fatalf("rebuilt index\n%x\nwant\n%x", got, orig)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Every snapshot and every index gone: all is read from the batches.
	names, _ = fs.ReadDir(testDir)
	for _, n := range names {
		if !strings.HasSuffix(n, segmentSuffix) && strings.HasPrefix(n, "0") {
			_ = fs.Remove(testDir + "/" + n)
		}
	}
	l = mustOpen(t, fs, cfg)
	defer l.Close()
	m.check(t, l)
}

// lastEnd is the log end after the last step.
func (m *txnModel) lastEnd(t testing.TB) int64 {
	t.Helper()
	return slices.Max(slices.Collect(maps.Keys(m.history)))
}

func writeFile(t testing.TB, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// Truncating a marker away opens its transaction again, with its index
// entry gone, as Kafka's truncation rebuilds the producer state.
func TestTruncationBelowMarkerReopensTxn(t *testing.T) {
	for _, rolled := range []bool{false, true} {
		t.Run(fmt.Sprintf("segment rolled after the marker %v", rolled), func(t *testing.T) {
			fs := vfs.NewMem()
			l := mustOpen(t, fs, Config{SegmentBytes: 400})
			defer l.Close()
			mustAppend(t, l, txnBatch(t, 5, 0, 0, 2), 0) // 0-1
			mustAppend(t, l, txnBatch(t, 6, 0, 0, 1), 0) // 2
			mustMarker(t, l, 5, 0, recordbatch.ControlAbort, 2)
			marker := l.LogEndOffset() - 1
			for rolled && l.Stats().Segments < 3 {
				mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
			}
			l.SetHighWatermark(l.LogEndOffset())
			wantLSO(t, l, 2)
			if err := l.TruncateTo(marker); err != nil {
				t.Fatal(err)
			}
			wantTxn(t, l, 5, 0, -1)
			wantLSO(t, l, 0)
			if got, _ := l.AbortedTxns(0, 100); len(got) != 0 {
				t.Fatalf("aborted after truncation: %+v", got)
			}
			if _, err := fs.Stat(testDir + "/" + segmentName(0) + txnIndexSuffix); !isNotExist(err) {
				t.Fatalf("index file after truncation: %v", err)
			}
			// The coordinator writes the marker again.
			mustMarker(t, l, 5, 0, recordbatch.ControlAbort, 2)
			want := []AbortedTxn{{ProducerID: 5, FirstOffset: 0, LastOffset: marker, LastStableOffset: 2}}
			if got, _ := l.AbortedTxns(0, 100); !slices.Equal(got, want) {
				t.Fatalf("aborted %+v, want %+v", got, want)
			}
		})
	}
}

// Retention deletes a segment's transaction index with it, and the
// aborted transactions of the remaining segments stay.
func TestRetentionDeletesTxnIndex(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 300, RetentionBytes: -1, RetentionAge: -1}
	l := mustOpen(t, fs, cfg)
	defer l.Close()
	mustAppend(t, l, txnBatch(t, 5, 0, 0, 1), 0)
	mustMarker(t, l, 5, 0, recordbatch.ControlAbort, 0)
	for l.Stats().Segments < 3 {
		mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	}
	base := l.Segments()[1].BaseOffset
	mustAppend(t, l, txnBatch(t, 6, 0, 0, 1), 0)
	mustMarker(t, l, 6, 0, recordbatch.ControlAbort, 0)
	for l.Stats().Segments < 5 {
		mustAppend(t, l, makeBatch(t, 1, 0, 100), 0)
	}
	idx := testDir + "/" + segmentName(0) + txnIndexSuffix
	if _, err := fs.Stat(idx); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(l.LogEndOffset())
	cfg.RetentionBytes = 1
	if err := l.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRecordsBefore(base); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(idx); !isNotExist(err) {
		t.Fatalf("index of the deleted segment: %v", err)
	}
	got, _ := l.AbortedTxns(l.LogStartOffset(), l.LogEndOffset())
	if len(got) != 1 || got[0].ProducerID != 6 {
		t.Fatalf("aborted after retention: %+v", got)
	}
	if _, err := l.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.ReadDir(testDir)
	for _, n := range names {
		if strings.HasSuffix(n, txnIndexSuffix) {
			t.Fatalf("index %s left after retention kept only %v", n, l.Segments())
		}
	}
}

// A version 1 snapshot, written before transactions, still loads; the
// next one written is version 2 with the transaction state.
func TestSnapshotV1StillLoads(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{}
	l := mustOpen(t, fs, cfg)
	mustAppend(t, l, idemBatch(t, 3, 1, 0, 2, 0), 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Replace the snapshot Close wrote with its version 1 form.
	leo := int64(2)
	b, err := vfs.ReadFile(fs, testDir+"/"+snapshotName(leo))
	if err != nil {
		t.Fatal(err)
	}
	_, ps, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, testDir+"/"+snapshotName(leo), encodeSnapshotVersion(1, leo, ps))
	l = mustOpen(t, fs, cfg)
	st, ok := l.Producer(3)
	if !ok || st.Epoch != 1 || len(st.Batches) != 1 || st.TxnFirstOffset != -1 || st.CoordinatorEpoch != -1 {
		t.Fatalf("producer from a version 1 snapshot: %+v %v", st, ok)
	}
	mustAppend(t, l, txnBatch(t, 4, 0, 0, 1), 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = vfs.ReadFile(fs, testDir+"/"+snapshotName(3))
	v, _, _, err := decodeSnapshotVersion(b)
	if err != nil || v != 2 {
		t.Fatalf("snapshot written on close: version %d, %v", v, err)
	}
	l = mustOpen(t, fs, cfg)
	defer l.Close()
	wantTxn(t, l, 4, 2, -1)
}

// A snapshot handed to a follower (ProducerStateAt) carries the open
// transactions that began below its offset.
func TestProducerStateAtCarriesOpenTxns(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, 1, 0, 0, 1), 0) // 0
	mustAppend(t, l, txnBatch(t, 2, 0, 0, 1), 0) // 1
	b, err := l.ProducerStateAt(1)
	if err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, vfs.NewMem(), Config{})
	defer f.Close()
	if err := f.ResetWithProducers(1, b); err != nil {
		t.Fatal(err)
	}
	wantTxn(t, f, 1, 0, -1)
	if st, _ := f.Producer(2); st.TxnFirstOffset != -1 {
		t.Fatalf("producer 2 began at 1, not below: %+v", st)
	}
	f.SetHighWatermark(1)
	wantLSO(t, f, 1) // held at the log start
}

// Readers of the LSO, the aborted transactions and the batches run beside
// an appender of transactions and markers (run with -race): the LSO never
// goes down nor passes the high watermark, and every aborted transaction
// a reader is told of lies within the log.
func TestTxnConcurrentReaders(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{SegmentBytes: 2000})
	defer l.Close()
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for !done.Load() {
				lso := l.LastStableOffset()
				if lso < last || lso > l.HighWatermark() {
					errc <- fmt.Errorf("LSO %d after %d, high watermark %d", lso, last, l.HighWatermark())
					return
				}
				last = lso
				ab, err := l.AbortedTxns(0, lso)
				if err != nil {
					errc <- err
					return
				}
				for _, a := range ab {
					if a.FirstOffset > a.LastOffset || a.LastOffset >= l.LogEndOffset() {
						errc <- fmt.Errorf("aborted %+v beyond the log end %d", a, l.LogEndOffset())
						return
					}
				}
				if _, err := l.Read(0, 4096, lso); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	m := newTxnModel(7)
	for range 300 {
		m.step(t, l)
		l.SetHighWatermark(l.LogEndOffset() - int64(m.rng.IntN(3)))
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	m.check(t, l)
}

// The cleaner keeps transactional batches and markers whole, so a cleaned
// segment that merges several carries their aborted transactions, in
// memory and in its .txnindex, across a reopen and a crash after the swap.
func TestCleanerCarriesTxnIndex(t *testing.T) {
	c := newCleanerLog(t, 400)
	var want []AbortedTxn
	for i := range 6 {
		pid := int64(10 + i)
		info := mustAppend(t, c.Log, txnBatch(t, pid, 0, 0, 1), 0)
		off := mustMarker(t, c.Log, pid, 0, recordbatch.ControlAbort, 0)
		want = append(want, AbortedTxn{ProducerID: pid, FirstOffset: info.FirstOffset, LastOffset: off, LastStableOffset: off + 1})
		for v := range 3 {
			c.append(recordbatch.BuildOptions{}, fmt.Sprintf("k:%d-%d", i, v))
		}
	}
	c.append(recordbatch.BuildOptions{}, "k:last")
	c.commit()
	res := c.clean(everything())
	if !res.Cleaned || res.SegmentsOut == 0 {
		t.Fatalf("pass %+v", res)
	}
	// Merge the cleaned segments on a second pass.
	for n := len(c.Segments()); len(c.Segments()) < n+2; {
		c.append(recordbatch.BuildOptions{}, "k:again")
	}
	c.commit()
	res = c.clean(everything())
	if res.SegmentsOut >= res.SegmentsIn {
		t.Fatalf("second pass did not merge: %+v", res)
	}
	check := func(l *Log) {
		t.Helper()
		if got, _ := l.AbortedTxns(0, l.LogEndOffset()); !slices.Equal(got, want) {
			t.Fatalf("aborted\n%+v\nwant\n%+v", got, want)
		}
	}
	check(c.Log)
	crashed := c.mem.Crash(vfs.CrashOptions{})
	l := mustOpen(t, crashed, c.Config())
	check(l)
	l.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Log = mustOpen(t, c.mem, c.Config(), WithClock(c.clock.Now))
	check(c.Log)
	var files int
	names, _ := c.mem.ReadDir(testDir)
	for _, n := range names {
		if strings.HasSuffix(n, txnIndexSuffix) {
			files++
		}
	}
	if segs := len(c.Segments()); files >= 6 || files == 0 {
		t.Fatalf("%d transaction index files for %d segments: the merged ones were not carried", files, segs)
	}
}

// A read_committed read stops below the last stable offset and lists the
// aborted transactions of exactly the batches it returns.
func TestReadCommittedStopsAtLSOAndListsAborts(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), Config{})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, 1, 0, 10), 0)  // 0
	mustAppend(t, l, txnBatch(t, 7, 0, 0, 2), 0) // 1-2
	mustAppend(t, l, makeBatch(t, 1, 0, 10), 0)  // 3
	l.SetHighWatermark(4)

	read := func(from int64, maxBytes int) ReadResult {
		t.Helper()
		rr, err := l.ReadCommittedInto(nil, from, maxBytes, true)
		if err != nil {
			t.Fatal(err)
		}
		return rr
	}
	if rr := read(0, 1<<20); rr.NextOffset != 1 || rr.LastStableOffset != 1 || rr.HighWatermark != 4 || rr.AbortedTxns != nil {
		t.Fatalf("open transaction: read to %d, lso %d, hw %d, aborted %v; want to 1, lso 1, hw 4, none",
			rr.NextOffset, rr.LastStableOffset, rr.HighWatermark, rr.AbortedTxns)
	}
	if rr := read(1, 1<<20); len(rr.Batches) != 0 || rr.NextOffset != 1 {
		t.Fatalf("read at the LSO returned %d bytes up to %d", len(rr.Batches), rr.NextOffset)
	}
	if rr, err := l.ReadInto(nil, 0, 1<<20, l.HighWatermark()); err != nil || rr.NextOffset != 4 || rr.AbortedTxns != nil {
		t.Fatalf("read_uncommitted: to %d, aborted %v, %v; want to 4", rr.NextOffset, rr.AbortedTxns, err)
	}

	mustMarker(t, l, 7, 0, recordbatch.ControlAbort, 0) // 4
	if rr := read(1, 1<<20); len(rr.Batches) != 0 || rr.LastStableOffset != 1 {
		t.Fatalf("an abort the high watermark has not passed moved the LSO to %d", rr.LastStableOffset)
	}
	l.SetHighWatermark(5)
	abort := AbortedTxn{ProducerID: 7, FirstOffset: 1, LastOffset: 4, LastStableOffset: 5}
	for _, tc := range []struct {
		from     int64
		maxBytes int
		next     int64
		aborted  []AbortedTxn
	}{
		{from: 0, maxBytes: 1 << 20, next: 5, aborted: []AbortedTxn{abort}},
		{from: 0, maxBytes: 1, next: 1},                                     // the first batch only: before the transaction
		{from: 1, maxBytes: 1, next: 3, aborted: []AbortedTxn{abort}},       // its first batch
		{from: 3, maxBytes: 1 << 20, next: 5, aborted: []AbortedTxn{abort}}, // its marker is returned
		{from: 5, maxBytes: 1 << 20, next: 5},
	} {
		rr := read(tc.from, tc.maxBytes)
		if rr.NextOffset != tc.next || !slices.Equal(rr.AbortedTxns, tc.aborted) {
			t.Errorf("read from %d (%d bytes): to %d aborted %v, want to %d aborted %v", tc.from, tc.maxBytes, rr.NextOffset, rr.AbortedTxns, tc.next, tc.aborted)
		}
	}
}
