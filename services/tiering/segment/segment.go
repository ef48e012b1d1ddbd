// Package segment checks the bytes of a sealed segment as tiering receives
// them and builds the indexes stored beside it in the bucket, and reads
// those indexes back for range reads.
//
// The .index and .timeindex objects use the layout of the storage node's
// index files (lib/partlog, docs/design/log.md), part of the format:
// a 48-byte big-endian header (magic "SPOI" or "SPTI", version 1, base
// offset, next offset, log size, max timestamp, entry count, CRC-32C of
// bytes 0..43 followed by the entries), then 8-byte offset entries
// (relative offset uint32, position uint32) or 12-byte time entries
// (timestamp int64, relative offset uint32). Tiering always rebuilds them
// from the bytes it verified, so an index in the bucket never disagrees
// with its .log object.
package segment

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// IndexInterval is the number of .log bytes between two offset index
// entries (Kafka's index.interval.bytes default).
const IndexInterval = 4096

const (
	headerSize      = 48
	offsetEntrySize = 8
	timeEntrySize   = 12
	crcStart        = 44
	offsetMagic     = "SPOI"
	timeMagic       = "SPTI"
	version         = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
		offsets   []uint64 // rel<<32 | pos
		times     [][2]int64
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
			offsets = append(offsets, uint64(rel)<<32|uint64(relPos))
			if info.MaxTS > indexTS {
				times = append(times, [2]int64{info.MaxTS, rel})
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
		info.LastOffset = h.LastOffset()
		info.Batches++
		pos += int64(n)
	}
	if info.StartPos < 0 {
		info.StartPos = pos
		return info, nil
	}
	info.Size = pos - info.StartPos
	info.OffsetIndex = encode(offsetMagic, info, len(offsets), offsetEntrySize, func(b []byte, i int) {
		binary.BigEndian.PutUint32(b, uint32(offsets[i]>>32))
		binary.BigEndian.PutUint32(b[4:], uint32(offsets[i]))
	})
	info.TimeIndex = encode(timeMagic, info, len(times), timeEntrySize, func(b []byte, i int) {
		binary.BigEndian.PutUint64(b, uint64(times[i][0]))
		binary.BigEndian.PutUint32(b[8:], uint32(times[i][1]))
	})
	return info, nil
}

func encode(magic string, info Info, count, entrySize int, put func([]byte, int)) []byte {
	b := make([]byte, headerSize+entrySize*count)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[4:], version)
	binary.BigEndian.PutUint64(b[8:], uint64(info.BaseOffset))
	binary.BigEndian.PutUint64(b[16:], uint64(info.LastOffset+1))
	binary.BigEndian.PutUint64(b[24:], uint64(info.Size))
	binary.BigEndian.PutUint64(b[32:], uint64(info.MaxTS))
	binary.BigEndian.PutUint32(b[40:], uint32(count))
	for i := range count {
		put(b[headerSize+entrySize*i:], i)
	}
	c := crc32.Update(0, castagnoli, b[:crcStart])
	c = crc32.Update(c, castagnoli, b[headerSize:])
	binary.BigEndian.PutUint32(b[crcStart:], c)
	return b
}

// OffsetIndex is a decoded .index object.
type OffsetIndex struct {
	BaseOffset int64
	NextOffset int64
	LogSize    int64
	rel, pos   []uint32
}

// DecodeOffsetIndex checks and decodes an .index object.
func DecodeOffsetIndex(b []byte) (*OffsetIndex, error) {
	if len(b) < headerSize || string(b[:4]) != offsetMagic || binary.BigEndian.Uint32(b[4:]) != version {
		return nil, fmt.Errorf("%w: header", ErrIndex)
	}
	count := int(binary.BigEndian.Uint32(b[40:]))
	if len(b) != headerSize+offsetEntrySize*count {
		return nil, fmt.Errorf("%w: %d bytes for %d entries", ErrIndex, len(b), count)
	}
	c := crc32.Update(0, castagnoli, b[:crcStart])
	c = crc32.Update(c, castagnoli, b[headerSize:])
	if c != binary.BigEndian.Uint32(b[crcStart:]) {
		return nil, fmt.Errorf("%w: crc", ErrIndex)
	}
	x := &OffsetIndex{
		BaseOffset: int64(binary.BigEndian.Uint64(b[8:])),
		NextOffset: int64(binary.BigEndian.Uint64(b[16:])),
		LogSize:    int64(binary.BigEndian.Uint64(b[24:])),
		rel:        make([]uint32, count), pos: make([]uint32, count),
	}
	for i := range count {
		p := b[headerSize+offsetEntrySize*i:]
		x.rel[i], x.pos[i] = binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])
	}
	return x, nil
}

// Lookup returns the position of the last indexed batch whose base offset
// is <= offset: where a scan for offset starts. 0 when none is.
func (x *OffsetIndex) Lookup(offset int64) int64 {
	if x == nil || offset < x.BaseOffset {
		return 0
	}
	rel := offset - x.BaseOffset
	i := sort.Search(len(x.rel), func(i int) bool { return int64(x.rel[i]) > rel })
	if i == 0 {
		return 0
	}
	return int64(x.pos[i-1])
}

// Entries is the number of index entries.
func (x *OffsetIndex) Entries() int { return len(x.rel) }

// TimeIndex is a decoded .timeindex object.
type TimeIndex struct {
	BaseOffset int64
	MaxTS      int64 // largest batch MaxTimestamp of the segment, -1 if none
	ts         []int64
	rel        []uint32
}

// DecodeTimeIndex checks and decodes a .timeindex object.
func DecodeTimeIndex(b []byte) (*TimeIndex, error) {
	if len(b) < headerSize || string(b[:4]) != timeMagic || binary.BigEndian.Uint32(b[4:]) != version {
		return nil, fmt.Errorf("%w: header", ErrIndex)
	}
	count := int(binary.BigEndian.Uint32(b[40:]))
	if len(b) != headerSize+timeEntrySize*count {
		return nil, fmt.Errorf("%w: %d bytes for %d entries", ErrIndex, len(b), count)
	}
	c := crc32.Update(0, castagnoli, b[:crcStart])
	c = crc32.Update(c, castagnoli, b[headerSize:])
	if c != binary.BigEndian.Uint32(b[crcStart:]) {
		return nil, fmt.Errorf("%w: crc", ErrIndex)
	}
	x := &TimeIndex{
		BaseOffset: int64(binary.BigEndian.Uint64(b[8:])),
		MaxTS:      int64(binary.BigEndian.Uint64(b[32:])),
		ts:         make([]int64, count), rel: make([]uint32, count),
	}
	for i := range count {
		p := b[headerSize+timeEntrySize*i:]
		x.ts[i], x.rel[i] = int64(binary.BigEndian.Uint64(p)), binary.BigEndian.Uint32(p[8:])
	}
	return x, nil
}

// Lookup returns the offset from which a scan for the first batch with a
// MaxTimestamp at or after ts starts: an entry (t, rel) says every batch
// before rel has a MaxTimestamp of at most t, so the scan starts at the
// last entry whose t is below ts (at BaseOffset when none is).
func (x *TimeIndex) Lookup(ts int64) int64 {
	if x == nil {
		return 0
	}
	i := sort.Search(len(x.ts), func(i int) bool { return x.ts[i] >= ts })
	if i == 0 {
		return x.BaseOffset
	}
	return x.BaseOffset + int64(x.rel[i-1])
}
