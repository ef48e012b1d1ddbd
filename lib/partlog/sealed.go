package partlog

import (
	"fmt"
	"io"

	"github.com/strata-mq/strata/lib/vfs"
)

// SegmentInfo describes one segment of a log.
type SegmentInfo struct {
	BaseOffset   int64 // offset of the first batch; names the segment's files
	Size         int64 // bytes of the .log file published to readers
	MaxTimestamp int64 // largest batch MaxTimestamp, -1 if none
}

// Segments lists the log's segments by base offset, oldest first. The last
// is the active segment, still appended to; every other one is sealed: its
// bytes no longer change (until the log cleaner replaces it), and the next
// segment's BaseOffset is the end of its offset range: the offset after its
// last batch, or later where the cleaner removed the last batches. A
// segment may be deleted by retention, truncation or the cleaner right
// after the call. Safe for concurrent use.
func (l *Log) Segments() []SegmentInfo {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{BaseOffset: s.base, Size: s.size.Load(), MaxTimestamp: s.maxTS.Load()}
	}
	return out
}

// SegmentReader reads the bytes of one segment's .log file from the start,
// as a sealed segment is shipped to the tier. Close it when done.
type SegmentReader struct {
	*io.SectionReader // the file's bytes as they were when it was opened
	f                 vfs.File
}

// Close closes the file.
func (r *SegmentReader) Close() error { return r.f.Close() }

// OpenSegment opens the .log file of the segment whose base offset is base
// for reading; its Size is the file's size at open. Meant for sealed
// segments (see Segments): the active one may grow, and a torn tail past
// the published bytes is possible after a crash until recovery runs. The
// file stays readable until closed even if retention deletes it meanwhile.
// An unknown or deleted segment gives an error wrapping the filesystem's.
func (l *Log) OpenSegment(base int64) (*SegmentReader, error) {
	s := segment{base: base, dir: l.dir}
	f, err := l.fs.Open(s.path(segmentSuffix))
	if err != nil {
		return nil, fmt.Errorf("partlog: open segment %s: %w", segmentName(base), err)
	}
	n, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("partlog: open segment %s: %w", segmentName(base), err)
	}
	return &SegmentReader{SectionReader: io.NewSectionReader(f, 0, n), f: f}, nil
}
