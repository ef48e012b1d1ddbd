package partlog

import (
	"encoding/binary"
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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// offsetEntry is one sparse offset index entry.
type offsetEntry struct {
	rel uint32 // batch base offset minus segment base offset
	pos uint32 // file position of the batch
}

// timeEntry is one time index entry.
type timeEntry struct {
	ts  int64  // every batch before rel has MaxTimestamp <= ts
	rel uint32 // relative offset of a batch that has an offset index entry
}

// indexMeta is what an index file says about the segment it describes.
type indexMeta struct {
	baseOffset int64 // segment base offset
	nextOffset int64 // offset after the last covered batch
	logSize    int64 // covered bytes of the .log file
	maxTS      int64 // largest MaxTimestamp in the covered bytes, -1 if none
}

// lookupOffset returns the position of the last indexed batch whose base
// offset is <= rel, or 0.
func lookupOffset(entries []offsetEntry, rel uint32) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].rel > rel })
	if i == 0 {
		return 0
	}
	return int64(entries[i-1].pos)
}

// lookupTime returns the relative offset from which to scan for the first
// batch with MaxTimestamp >= ts: that of the last entry whose timestamp is
// below ts, or 0.
func lookupTime(entries []timeEntry, ts int64) uint32 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return entries[i-1].rel
}

func putIndexHeader(b []byte, magic string, m indexMeta, count int) {
	copy(b[0:4], magic)
	binary.BigEndian.PutUint32(b[4:], indexVersion)
	binary.BigEndian.PutUint64(b[8:], uint64(m.baseOffset))
	binary.BigEndian.PutUint64(b[16:], uint64(m.nextOffset))
	binary.BigEndian.PutUint64(b[24:], uint64(m.logSize))
	binary.BigEndian.PutUint64(b[32:], uint64(m.maxTS))
	binary.BigEndian.PutUint32(b[40:], uint32(count))
}

func sealIndex(b []byte) {
	c := crc32.Update(0, castagnoli, b[:indexHeaderCRCStart])
	c = crc32.Update(c, castagnoli, b[indexHeaderSize:])
	binary.BigEndian.PutUint32(b[indexHeaderCRCStart:], c)
}

func encodeOffsetIndex(m indexMeta, entries []offsetEntry) []byte {
	b := make([]byte, indexHeaderSize+offsetEntrySize*len(entries))
	putIndexHeader(b, offsetIndexMagic, m, len(entries))
	for i, e := range entries {
		p := b[indexHeaderSize+offsetEntrySize*i:]
		binary.BigEndian.PutUint32(p, e.rel)
		binary.BigEndian.PutUint32(p[4:], e.pos)
	}
	sealIndex(b)
	return b
}

func encodeTimeIndex(m indexMeta, entries []timeEntry) []byte {
	b := make([]byte, indexHeaderSize+timeEntrySize*len(entries))
	putIndexHeader(b, timeIndexMagic, m, len(entries))
	for i, e := range entries {
		p := b[indexHeaderSize+timeEntrySize*i:]
		binary.BigEndian.PutUint64(p, uint64(e.ts))
		binary.BigEndian.PutUint32(p[8:], e.rel)
	}
	sealIndex(b)
	return b
}

// decodeIndexHeader checks magic, version, length and CRC and returns the
// header fields and the entry count.
func decodeIndexHeader(b []byte, magic string, entrySize int) (indexMeta, int, error) {
	if len(b) < indexHeaderSize {
		return indexMeta{}, 0, fmt.Errorf("partlog: index: %d bytes, shorter than the header", len(b))
	}
	if string(b[0:4]) != magic {
		return indexMeta{}, 0, fmt.Errorf("partlog: index: bad magic %q", b[0:4])
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != indexVersion {
		return indexMeta{}, 0, fmt.Errorf("partlog: index: unknown version %d", v)
	}
	n := int(binary.BigEndian.Uint32(b[40:]))
	if len(b) != indexHeaderSize+n*entrySize {
		return indexMeta{}, 0, fmt.Errorf("partlog: index: %d bytes for %d entries", len(b), n)
	}
	c := crc32.Update(0, castagnoli, b[:indexHeaderCRCStart])
	c = crc32.Update(c, castagnoli, b[indexHeaderSize:])
	if stored := binary.BigEndian.Uint32(b[indexHeaderCRCStart:]); stored != c {
		return indexMeta{}, 0, fmt.Errorf("partlog: index: crc mismatch: stored %08x, computed %08x", stored, c)
	}
	m := indexMeta{
		baseOffset: int64(binary.BigEndian.Uint64(b[8:])),
		nextOffset: int64(binary.BigEndian.Uint64(b[16:])),
		logSize:    int64(binary.BigEndian.Uint64(b[24:])),
		maxTS:      int64(binary.BigEndian.Uint64(b[32:])),
	}
	return m, n, nil
}

func decodeOffsetIndex(b []byte) (indexMeta, []offsetEntry, error) {
	m, n, err := decodeIndexHeader(b, offsetIndexMagic, offsetEntrySize)
	if err != nil {
		return m, nil, err
	}
	entries := make([]offsetEntry, n)
	for i := range entries {
		p := b[indexHeaderSize+offsetEntrySize*i:]
		entries[i] = offsetEntry{rel: binary.BigEndian.Uint32(p), pos: binary.BigEndian.Uint32(p[4:])}
		if int64(entries[i].pos) >= m.logSize || (i > 0 && (entries[i].rel <= entries[i-1].rel || entries[i].pos <= entries[i-1].pos)) {
			return m, nil, fmt.Errorf("partlog: index: entry %d out of order or past the log", i)
		}
	}
	return m, entries, nil
}

func decodeTimeIndex(b []byte) (indexMeta, []timeEntry, error) {
	m, n, err := decodeIndexHeader(b, timeIndexMagic, timeEntrySize)
	if err != nil {
		return m, nil, err
	}
	entries := make([]timeEntry, n)
	for i := range entries {
		p := b[indexHeaderSize+timeEntrySize*i:]
		entries[i] = timeEntry{ts: int64(binary.BigEndian.Uint64(p)), rel: binary.BigEndian.Uint32(p[8:])}
		if i > 0 && (entries[i].ts <= entries[i-1].ts || entries[i].rel <= entries[i-1].rel) {
			return m, nil, fmt.Errorf("partlog: timeindex: entry %d out of order", i)
		}
	}
	return m, entries, nil
}
