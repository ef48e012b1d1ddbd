package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
)

// Index file layout (part of the format, do not change). Both .index and
// .timeindex start with the same 48-byte header; integers are big-endian.
//
//	offset size field
//	     0    4 magic        "SPOI" (.index) or "SPTI" (.timeindex)
//	     4    4 version      1
//	     8    8 baseOffset   the segment's base offset
//	    16    8 nextOffset   offset after the last batch the index covers
//	    24    8 logSize      bytes of the .log file the index covers
//	    32    8 maxTimestamp largest batch MaxTimestamp in those bytes (-1 if none)
//	    40    4 entryCount
//	    44    4 crc          CRC-32C of bytes 0..43 followed by the entries
//	    48    … entries
//
// An .index entry is 8 bytes: relative offset uint32 (batch base offset
// minus baseOffset), file position uint32 of that batch. A .timeindex
// entry is 12 bytes: timestamp int64, relative offset uint32; it means
// "every batch before this offset in the segment has MaxTimestamp <= this
// timestamp". Entries are strictly increasing in both fields.
const (
	indexHeaderSize     = 48
	offsetEntrySize     = 8
	timeEntrySize       = 12
	indexVersion        = 1
	offsetIndexMagic    = "SPOI"
	timeIndexMagic      = "SPTI"
	offsetIndexSuffix   = ".index"
	timeIndexSuffix     = ".timeindex"
	segmentSuffix       = ".log"
	segmentNameDigits   = 20
	tmpSuffix           = ".tmp"
	indexHeaderCRCStart = 44
)

// segmentFileSuffixes are the files of one segment, named by its base.
var segmentFileSuffixes = []string{segmentSuffix, offsetIndexSuffix, timeIndexSuffix, txnIndexSuffix}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrIndex is wrapped by every error decoding an index: the bytes are not
// an index of this format (short, bad magic or version, bad CRC, entries
// out of order).
var ErrIndex = errors.New("partlog: bad index")

// OffsetEntry is one sparse offset index entry.
type OffsetEntry struct {
	Rel uint32 // batch base offset minus segment base offset
	Pos uint32 // file position of the batch
}

// TimeEntry is one time index entry.
type TimeEntry struct {
	Timestamp int64  // every batch before Rel has MaxTimestamp <= Timestamp
	Rel       uint32 // relative offset of a batch that has an offset index entry
}

// IndexMeta is what an index file says about the segment it describes.
type IndexMeta struct {
	BaseOffset   int64 // segment base offset
	NextOffset   int64 // offset after the last covered batch
	LogSize      int64 // covered bytes of the .log file
	MaxTimestamp int64 // largest MaxTimestamp in the covered bytes, -1 if none
}

// LookupOffset returns the position of the last indexed batch whose base
// offset is <= rel, or 0.
func LookupOffset(entries []OffsetEntry, rel uint32) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Rel > rel })
	if i == 0 {
		return 0
	}
	return int64(entries[i-1].Pos)
}

// LookupTime returns the relative offset from which to scan for the first
// batch with MaxTimestamp >= ts: that of the last entry whose timestamp is
// below ts, or 0.
func LookupTime(entries []TimeEntry, ts int64) uint32 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Timestamp >= ts })
	if i == 0 {
		return 0
	}
	return entries[i-1].Rel
}

func putIndexHeader(b []byte, magic string, m IndexMeta, count int) {
	copy(b[0:4], magic)
	binary.BigEndian.PutUint32(b[4:], indexVersion)
	binary.BigEndian.PutUint64(b[8:], uint64(m.BaseOffset))
	binary.BigEndian.PutUint64(b[16:], uint64(m.NextOffset))
	binary.BigEndian.PutUint64(b[24:], uint64(m.LogSize))
	binary.BigEndian.PutUint64(b[32:], uint64(m.MaxTimestamp))
	binary.BigEndian.PutUint32(b[40:], uint32(count))
}

func sealIndex(b []byte) {
	c := crc32.Update(0, castagnoli, b[:indexHeaderCRCStart])
	c = crc32.Update(c, castagnoli, b[indexHeaderSize:])
	binary.BigEndian.PutUint32(b[indexHeaderCRCStart:], c)
}

// EncodeOffsetIndex returns the .index file describing a segment: m and
// entries, which must be strictly increasing in both fields.
func EncodeOffsetIndex(m IndexMeta, entries []OffsetEntry) []byte {
	b := make([]byte, indexHeaderSize+offsetEntrySize*len(entries))
	putIndexHeader(b, offsetIndexMagic, m, len(entries))
	for i, e := range entries {
		p := b[indexHeaderSize+offsetEntrySize*i:]
		binary.BigEndian.PutUint32(p, e.Rel)
		binary.BigEndian.PutUint32(p[4:], e.Pos)
	}
	sealIndex(b)
	return b
}

// EncodeTimeIndex returns the .timeindex file describing a segment: m and
// entries, which must be strictly increasing in both fields.
func EncodeTimeIndex(m IndexMeta, entries []TimeEntry) []byte {
	b := make([]byte, indexHeaderSize+timeEntrySize*len(entries))
	putIndexHeader(b, timeIndexMagic, m, len(entries))
	for i, e := range entries {
		p := b[indexHeaderSize+timeEntrySize*i:]
		binary.BigEndian.PutUint64(p, uint64(e.Timestamp))
		binary.BigEndian.PutUint32(p[8:], e.Rel)
	}
	sealIndex(b)
	return b
}

// decodeIndexHeader checks magic, version, length and CRC and returns the
// header fields and the entry count.
func decodeIndexHeader(b []byte, magic string, entrySize int) (IndexMeta, int, error) {
	if len(b) < indexHeaderSize {
		return IndexMeta{}, 0, fmt.Errorf("%w: %d bytes, shorter than the header", ErrIndex, len(b))
	}
	if string(b[0:4]) != magic {
		return IndexMeta{}, 0, fmt.Errorf("%w: bad magic %q", ErrIndex, b[0:4])
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != indexVersion {
		return IndexMeta{}, 0, fmt.Errorf("%w: unknown version %d", ErrIndex, v)
	}
	n := int(binary.BigEndian.Uint32(b[40:]))
	if len(b) != indexHeaderSize+n*entrySize {
		return IndexMeta{}, 0, fmt.Errorf("%w: %d bytes for %d entries", ErrIndex, len(b), n)
	}
	c := crc32.Update(0, castagnoli, b[:indexHeaderCRCStart])
	c = crc32.Update(c, castagnoli, b[indexHeaderSize:])
	if stored := binary.BigEndian.Uint32(b[indexHeaderCRCStart:]); stored != c {
		return IndexMeta{}, 0, fmt.Errorf("%w: crc mismatch: stored %08x, computed %08x", ErrIndex, stored, c)
	}
	m := IndexMeta{
		BaseOffset:   int64(binary.BigEndian.Uint64(b[8:])),
		NextOffset:   int64(binary.BigEndian.Uint64(b[16:])),
		LogSize:      int64(binary.BigEndian.Uint64(b[24:])),
		MaxTimestamp: int64(binary.BigEndian.Uint64(b[32:])),
	}
	return m, n, nil
}

// DecodeOffsetIndex checks and decodes an .index file. Every error wraps
// ErrIndex.
func DecodeOffsetIndex(b []byte) (IndexMeta, []OffsetEntry, error) {
	m, n, err := decodeIndexHeader(b, offsetIndexMagic, offsetEntrySize)
	if err != nil {
		return m, nil, err
	}
	entries := make([]OffsetEntry, n)
	for i := range entries {
		p := b[indexHeaderSize+offsetEntrySize*i:]
		entries[i] = OffsetEntry{Rel: binary.BigEndian.Uint32(p), Pos: binary.BigEndian.Uint32(p[4:])}
		if int64(entries[i].Pos) >= m.LogSize || (i > 0 && (entries[i].Rel <= entries[i-1].Rel || entries[i].Pos <= entries[i-1].Pos)) {
			return m, nil, fmt.Errorf("%w: entry %d out of order or past the log", ErrIndex, i)
		}
	}
	return m, entries, nil
}

// DecodeTimeIndex checks and decodes a .timeindex file. Every error wraps
// ErrIndex.
func DecodeTimeIndex(b []byte) (IndexMeta, []TimeEntry, error) {
	m, n, err := decodeIndexHeader(b, timeIndexMagic, timeEntrySize)
	if err != nil {
		return m, nil, err
	}
	entries := make([]TimeEntry, n)
	for i := range entries {
		p := b[indexHeaderSize+timeEntrySize*i:]
		entries[i] = TimeEntry{Timestamp: int64(binary.BigEndian.Uint64(p)), Rel: binary.BigEndian.Uint32(p[8:])}
		if i > 0 && (entries[i].Timestamp <= entries[i-1].Timestamp || entries[i].Rel <= entries[i-1].Rel) {
			return m, nil, fmt.Errorf("%w: timeindex entry %d out of order", ErrIndex, i)
		}
	}
	return m, entries, nil
}
