package partlog

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-mq/strata/lib/vfs"
)

// readCountFS counts the ReadAt calls on segment files.
type readCountFS struct {
	vfs.FS
	reads atomic.Int64
}

type readCountFile struct {
	vfs.File
	fs *readCountFS
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.reads.Add(1)
	return f.File.ReadAt(p, off)
}

func (fs *readCountFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return readCountFile{f, fs}, nil
}

func (fs *readCountFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.wrap(name, f, err)
}

func (fs *readCountFS) Open(name string) (vfs.File, error) {
	f, err := fs.FS.Open(name)
	return fs.wrap(name, f, err)
}

func (fs *readCountFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	return fs.wrap(name, f, err)
}

// A read near the log end, as a follower's or a tailing consumer's, finds
// its batch among the segment's recent batches: one file read for the
// data, none for headers, whatever the index interval. After a truncation
// the batches cut are forgotten, and reads at every offset still return
// the batch that holds it.
func TestTailReadsNeedNoHeaderReads(t *testing.T) {
	fs := &readCountFS{FS: vfs.NewMem()}
	l := mustOpen(t, fs, Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 1 << 16})
	defer l.Close()
	for i := range 40 {
		mustAppend(t, l, makeBatch(t, 2, int64(i), 50), 0)
	}
	l.SetHighWatermark(l.LogEndOffset())
	check := func(from, to int64) {
		t.Helper()
		for off := from; off < to; off++ {
			before := fs.reads.Load()
			res, err := l.Read(off, 1, l.LogEndOffset())
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			if n := fs.reads.Load() - before; n != 1 {
				t.Fatalf("read at %d: %d file reads, want 1 (the data)", off, n)
			}
			hs := readAll(t, l, off, l.LogEndOffset())
			if len(hs) == 0 || hs[0].BaseOffset > off || hs[0].LastOffset() < off || len(res.Batches) == 0 {
				t.Fatalf("read at %d: batches %+v", off, hs)
			}
		}
	}
	// The ring holds the last 16 batches of 2 records: offsets 48 to 79.
	check(48, 80)
	// Older offsets scan from the index, reading headers: more reads.
	before := fs.reads.Load()
	if _, err := l.Read(10, 1, l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if n := fs.reads.Load() - before; n < 2 {
		t.Fatalf("read at 10: %d file reads; the scan from the index reads headers", n)
	}
	// Cut inside the ring, append batches of another size, and read each
	// offset: the cut batches must not be found at their old positions.
	if err := l.TruncateTo(70); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustAppend(t, l, makeBatch(t, 3, int64(100+i), 20), 1)
	}
	l.SetHighWatermark(l.LogEndOffset())
	if l.LogEndOffset() != 85 {
		t.Fatalf("log end %d, want 85", l.LogEndOffset())
	}
	check(56, 85)
}
