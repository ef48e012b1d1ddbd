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
	// TxnIndex is the segment's .txnindex as it was when the file was
	// opened, in the on-disk layout (txnindex.go): its aborted
	// transactions, empty when it has none. A tiered segment carries it so
	// that read_committed reads from the tier know what was aborted.
	TxnIndex []byte
	f        vfs.File
}

// Close closes the file.
func (r *SegmentReader) Close() error { return r.f.Close() }

// OpenSegment opens the .log file of the segment whose base offset is base
// for reading; its Size is the file's size at open, and its TxnIndex the
// segment's aborted transaction index as the log lists it then. A segment
// the cleaner is replacing meanwhile may give the cleaned file with the
// index of the first segment it replaces: its offsets then extend past the
// segment's end as Segments gave it, which the tier's check of a segment's
// offsets refuses, and the next try reads the cleaned segment whole. Meant for sealed segments (see
// Segments): the active one may grow, and a torn tail past the published
// bytes is possible after a crash until recovery runs. The file stays
// readable until closed even if retention deletes it meanwhile. An
// unknown or deleted segment gives an error wrapping the filesystem's.
func (l *Log) OpenSegment(base int64) (*SegmentReader, error) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var txns []AbortedTxn
	for _, s := range l.segs {
		if s.base == base {
			s.idxMu.RLock()
			txns = append(txns, s.aborted...)
			s.idxMu.RUnlock()
			break
		}
	}
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
	return &SegmentReader{SectionReader: io.NewSectionReader(f, 0, n), TxnIndex: AppendAbortedTxns(nil, txns), f: f}, nil
}
