// Package segment checks the bytes of a sealed segment as tiering receives
// them and builds the indexes stored beside it in the bucket, and reads
// those indexes back for range reads.
//
// The .index and .timeindex objects are the storage node's index files,
// encoded and decoded by lib/partlog (its index codec is the one home of
// that format, docs/design/log.md). Tiering always rebuilds them from the
// bytes it verified, so an index in the bucket never disagrees with its
// .log object.
package segment

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// IndexInterval is the number of .log bytes between two offset index
// entries (Kafka's index.interval.bytes default).
const IndexInterval = 4096

// Errors.
var (
	// ErrCorrupt: a batch failed its CRC or is malformed.
	ErrCorrupt = errors.New("segment: corrupt record batch")
	// ErrOffsets: the batches do not hold the offsets the header claims, or
	// are not contiguous.
	ErrOffsets = errors.New("segment: offsets do not match")
	// ErrIndex: an index object is malformed.
	ErrIndex = errors.New("segment: bad index")
)

// Epoch is the offset at which a leader epoch starts.
type Epoch struct {
	Epoch       int32
	StartOffset int64
}

// Info is what Scan learned from a segment's bytes.
type Info struct {
	StartPos    int64   // position of the first batch at or after the scan's from offset
	BaseOffset  int64   // base offset of the first kept batch
	LastOffset  int64   // last offset of the last batch
	Size        int64   // bytes from StartPos to the end
	MinTS       int64   // smallest batch BaseTimestamp (-1 if none)
	MaxTS       int64   // largest batch MaxTimestamp (-1 if none)
	Epochs      []Epoch // leader epochs starting within the kept batches, oldest first
	Batches     int64   // kept batches
	OffsetIndex []byte  // encoded .index of the kept bytes
	TimeIndex   []byte  // encoded .timeindex of the kept bytes
	// AbortMarkers are the abort markers among the kept batches, in offset
	// order: what a segment's aborted transaction index may name.
	AbortMarkers []AbortMarker
}

// AbortMarker is an abort marker found in a segment.
type AbortMarker struct {
	Offset     int64 // the marker's offset
	ProducerID int64 // the producer whose transaction it aborts
}

// Scan reads a whole segment from r, verifying every batch's CRC and that
// offsets are contiguous. Batches that end below from are skipped (their
// bytes are still checked); the first kept batch must start exactly at
// from when from is above the segment's first offset, so a trimmed
// segment starts on a batch boundary. Indexes are built for the kept part,
// with positions relative to StartPos.
func Scan(r io.Reader, from int64) (Info, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	info := Info{StartPos: -1, BaseOffset: -1, LastOffset: -1, MinTS: -1, MaxTS: -1}
	var (
		pos, next int64 = 0, -1
		buf       []byte
		offsets   []partlog.OffsetEntry
		times     []partlog.TimeEntry
		since           = IndexInterval
		indexTS   int64 = -1
	)
	for {
		var prefix [recordbatch.LengthPrefixSize]byte
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			if err == io.EOF {
				break
			}
			return info, fmt.Errorf("%w: torn batch at position %d: %w", ErrCorrupt, pos, err)
		}
		n, err := recordbatch.PeekSize(prefix[:])
		if err != nil {
			return info, fmt.Errorf("%w: position %d: %w", ErrCorrupt, pos, err)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		copy(buf, prefix[:])
		if _, err := io.ReadFull(br, buf[len(prefix):]); err != nil {
			return info, fmt.Errorf("%w: torn batch at position %d: %w", ErrCorrupt, pos, err)
		}
		h, err := recordbatch.Verify(buf)
		if err != nil {
			return info, fmt.Errorf("%w: position %d: %w", ErrCorrupt, pos, err)
		}
		if next >= 0 && h.BaseOffset != next {
			return info, fmt.Errorf("%w: batch at position %d starts at %d, expected %d", ErrOffsets, pos, h.BaseOffset, next)
		}
		next = h.NextOffset()
		if h.LastOffset() < from {
			pos += int64(n)
			continue
		}
		if info.StartPos < 0 {
			if h.BaseOffset != from && pos > 0 {
				return info, fmt.Errorf("%w: offset %d is inside the batch at %d", ErrOffsets, from, h.BaseOffset)
			}
			info.StartPos, info.BaseOffset = pos, h.BaseOffset
		}
		rel, relPos := h.BaseOffset-info.BaseOffset, pos-info.StartPos
		if since >= IndexInterval && rel <= 0xFFFFFFFF && relPos <= 0xFFFFFFFF {
			offsets = append(offsets, partlog.OffsetEntry{Rel: uint32(rel), Pos: uint32(relPos)})
			if info.MaxTS > indexTS {
				times = append(times, partlog.TimeEntry{Timestamp: info.MaxTS, Rel: uint32(rel)})
				indexTS = info.MaxTS
			}
			since = 0
		}
		since += n
		if len(info.Epochs) == 0 || info.Epochs[len(info.Epochs)-1].Epoch != h.PartitionLeaderEpoch {
			info.Epochs = append(info.Epochs, Epoch{Epoch: h.PartitionLeaderEpoch, StartOffset: h.BaseOffset})
		}
		if info.MinTS < 0 || (h.BaseTimestamp >= 0 && h.BaseTimestamp < info.MinTS) {
			info.MinTS = h.BaseTimestamp
		}
		info.MaxTS = max(info.MaxTS, h.MaxTimestamp)
		if h.Control() {
			if _, mk, err := recordbatch.ParseMarker(buf); err == nil && mk.Type == recordbatch.ControlAbort {
				info.AbortMarkers = append(info.AbortMarkers, AbortMarker{Offset: h.BaseOffset, ProducerID: h.ProducerID})
			}
		}
		info.LastOffset = h.LastOffset()
		info.Batches++
		pos += int64(n)
	}
	if info.StartPos < 0 {
		info.StartPos = pos
		return info, nil
	}
	info.Size = pos - info.StartPos
	m := partlog.IndexMeta{BaseOffset: info.BaseOffset, NextOffset: info.LastOffset + 1, LogSize: info.Size, MaxTimestamp: info.MaxTS}
	info.OffsetIndex = partlog.EncodeOffsetIndex(m, offsets)
	info.TimeIndex = partlog.EncodeTimeIndex(m, times)
	return info, nil
}

// CheckTxnIndex checks the aborted transaction index that came with a
// segment whose header says it holds [base, next), and returns its entries
// for the part info kept (markers at or after info.BaseOffset: the rest
// lie in a part the tier already holds). Tiering cannot rebuild the index
// from the segment (an aborted transaction's first offset may lie in an
// earlier segment, and an entry's last stable offset depends on other
// producers), so it checks what it can: the layout (partlog's decoder),
// and that every entry's last offset is an abort marker of its producer
// in the segment. An index naming a marker the segment does not hold is
// ErrIndex.
func CheckTxnIndex(b []byte, base, next int64, info Info) ([]partlog.AbortedTxn, error) {
	txns, err := partlog.DecodeAbortedTxns(b, base, next)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	markers := map[int64]int64{}
	for _, m := range info.AbortMarkers {
		markers[m.Offset] = m.ProducerID
	}
	kept := txns[:0]
	for _, t := range txns {
		if t.LastOffset < info.BaseOffset {
			continue
		}
		if pid, ok := markers[t.LastOffset]; !ok || pid != t.ProducerID {
			return nil, fmt.Errorf("%w: transaction index entry %+v names no abort marker of producer %d in the segment", ErrIndex, t, t.ProducerID)
		}
		kept = append(kept, t)
	}
	return kept, nil
}

// TxnIndex is a decoded .txnindex object: the aborted transactions whose
// markers lie in one tiered segment, in the order of their markers.
type TxnIndex struct {
	Entries []partlog.AbortedTxn
}

// DecodeTxnIndex decodes a .txnindex object of a segment holding
// [base, next), as partlog checks its own.
func DecodeTxnIndex(b []byte, base, next int64) (*TxnIndex, error) {
	txns, err := partlog.DecodeAbortedTxns(b, base, next)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return &TxnIndex{Entries: txns}, nil
}

// OffsetIndex is a decoded .index object.
type OffsetIndex struct {
	BaseOffset int64
	NextOffset int64
	LogSize    int64
	entries    []partlog.OffsetEntry
}

// DecodeOffsetIndex checks and decodes an .index object.
func DecodeOffsetIndex(b []byte) (*OffsetIndex, error) {
	m, e, err := partlog.DecodeOffsetIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return &OffsetIndex{BaseOffset: m.BaseOffset, NextOffset: m.NextOffset, LogSize: m.LogSize, entries: e}, nil
}

// Lookup returns the position of the last indexed batch whose base offset
// is <= offset: where a scan for offset starts. 0 when none is.
func (x *OffsetIndex) Lookup(offset int64) int64 {
	if x == nil || offset < x.BaseOffset {
		return 0
	}
	return partlog.LookupOffset(x.entries, uint32(min(offset-x.BaseOffset, math.MaxUint32)))
}

// Entries is the number of index entries.
func (x *OffsetIndex) Entries() int { return len(x.entries) }

// TimeIndex is a decoded .timeindex object.
type TimeIndex struct {
	BaseOffset int64
	MaxTS      int64 // largest batch MaxTimestamp of the segment, -1 if none
	entries    []partlog.TimeEntry
}

// DecodeTimeIndex checks and decodes a .timeindex object.
func DecodeTimeIndex(b []byte) (*TimeIndex, error) {
	m, e, err := partlog.DecodeTimeIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return &TimeIndex{BaseOffset: m.BaseOffset, MaxTS: m.MaxTimestamp, entries: e}, nil
}

// Lookup returns the offset from which a scan for the first batch with a
// MaxTimestamp at or after ts starts: an entry (t, rel) says every batch
// before rel has a MaxTimestamp of at most t, so the scan starts at the
// last entry whose t is below ts (at BaseOffset when none is).
func (x *TimeIndex) Lookup(ts int64) int64 {
	if x == nil {
		return 0
	}
	return x.BaseOffset + int64(partlog.LookupTime(x.entries, ts))
}
