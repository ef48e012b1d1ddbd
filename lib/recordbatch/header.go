// Package recordbatch encodes and decodes record batches in the byte layout
// of Kafka's RecordBatch v2 (magic 2). A batch is the unit of storage and
// transfer everywhere in Strata: clients build and compress batches, the
// partition leader checks the CRC and stamps the base offset and leader
// epoch, and fetches return the same bytes.
//
// The layout is part of the format; do not change it. All integers are
// big-endian.
//
//	offset size field
//	     0    8 baseOffset            first offset in the batch (stamped by the leader)
//	     8    4 batchLength           bytes that follow this field (total length - 12)
//	    12    4 partitionLeaderEpoch  epoch of the leader that appended it (stamped)
//	    16    1 magic                 always 2
//	    17    4 crc                   CRC-32C (Castagnoli) over bytes 21..end
//	    21    2 attributes            bits 0-2 codec, 3 timestamp type,
//	                                  4 transactional, 5 control, 6 delete horizon
//	    23    4 lastOffsetDelta       offset of the last record minus baseOffset
//	    27    8 baseTimestamp         first timestamp, Unix milliseconds
//	    35    8 maxTimestamp          largest timestamp in the batch, Unix ms
//	    43    8 producerId            -1 when not idempotent
//	    51    2 producerEpoch         -1 when not idempotent
//	    53    4 baseSequence          -1 when not idempotent
//	    57    4 recordCount           number of records
//	    61    … records               varint-encoded, compressed as a whole
//
// Because baseOffset and partitionLeaderEpoch sit before the CRC'd region,
// the leader stamps them in place without touching or re-checking the
// payload.
//
// Build writes a batch and Decode reads one back. The record layout, the
// codecs and their framings (raw and xerial snappy, the LZ4 frame), the
// decompression cap and the errors are described in
// docs/design/record-batch.md.
package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Byte positions of the header fields. Part of the format.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// HeaderSize is the size of the fixed batch header in bytes.
	HeaderSize = 61
	// LengthPrefixSize is how many leading bytes are not counted by
	// batchLength (baseOffset and batchLength itself).
	LengthPrefixSize = 12
	// Magic is the only batch format version Strata reads and writes.
	Magic = 2
	// crcStart is the first byte covered by the CRC.
	crcStart = offAttributes
)

// Attribute bits. Part of the format.
const (
	attrCodecMask     = 0x07
	attrTimestampType = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	attrDeleteHorizon = 0x40
)

// Codec identifies how the records section of a batch is compressed. The
// values are part of the format.
type Codec int8

// The codecs Kafka defines, with the same numbers.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// String names the codec as Kafka's compression.type setting does.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// Errors returned for malformed input. Every decoding failure wraps one of
// these, so callers can tell corruption from other failures with errors.Is.
var (
	// ErrShortBatch means the bytes end before the batch does.
	ErrShortBatch = errors.New("recordbatch: short batch")
	// ErrBadMagic means the magic byte is not 2.
	ErrBadMagic = errors.New("recordbatch: unsupported magic")
	// ErrBadLength means batchLength is impossible (too small for a header).
	ErrBadLength = errors.New("recordbatch: bad batch length")
	// ErrCRC means the stored CRC does not match the bytes.
	ErrCRC = errors.New("recordbatch: crc mismatch")
	// ErrCorrupt means the records section does not decode.
	ErrCorrupt = errors.New("recordbatch: corrupt records")
	// ErrCodec means the batch names a codec Strata does not know.
	ErrCodec = errors.New("recordbatch: unknown codec")
	// ErrTooLarge means the records section inflates past
	// MaxDecompressedSize, or a batch to build would. The bytes may be
	// well formed; Strata refuses them so that a small hostile batch (a
	// "zip bomb") cannot exhaust memory.
	ErrTooLarge = errors.New("recordbatch: records too large")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded fixed header of one batch.
type Header struct {
	BaseOffset           int64  // first offset in the batch
	BatchLength          int32  // bytes after the batchLength field
	PartitionLeaderEpoch int32  // epoch of the leader that appended the batch
	Magic                int8   // always 2 for a valid batch
	CRC                  uint32 // CRC-32C of bytes 21..end, as stored
	Attributes           int16  // codec, timestamp type, transactional, control bits
	LastOffsetDelta      int32  // last offset minus BaseOffset
	BaseTimestamp        int64  // Unix milliseconds
	MaxTimestamp         int64  // Unix milliseconds
	ProducerID           int64  // -1 when not idempotent
	ProducerEpoch        int16  // -1 when not idempotent
	BaseSequence         int32  // -1 when not idempotent
	RecordCount          int32  // records in the batch; 0 is legal (compacted)
}

// Size is the total size of the batch in bytes, length prefix included.
func (h Header) Size() int { return int(h.BatchLength) + LengthPrefixSize }

// LastOffset is the offset of the last record in the batch.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset just past the batch.
func (h Header) NextOffset() int64 { return h.LastOffset() + 1 }

// LastSequence is the producer sequence number of the last record:
// BaseSequence + LastOffsetDelta, wrapping past 2^31-1 to 0 as Kafka's
// sequences do. Meaningless when the batch has no producer id.
func (h Header) LastSequence() int32 {
	s := int64(h.BaseSequence) + int64(h.LastOffsetDelta)
	if s > math.MaxInt32 {
		s -= math.MaxInt32 + 1
	}
	return int32(s)
}

// Codec is the compression of the records section.
func (h Header) Codec() Codec { return Codec(h.Attributes & attrCodecMask) }

// LogAppendTime reports whether timestamps were set by the broker.
func (h Header) LogAppendTime() bool { return h.Attributes&attrTimestampType != 0 }

// Transactional reports whether the batch belongs to a transaction.
func (h Header) Transactional() bool { return h.Attributes&attrTransactional != 0 }

// Control reports whether the batch is a control batch.
func (h Header) Control() bool { return h.Attributes&attrControl != 0 }

// PeekSize returns the total size of the batch that starts at b, reading only
// the length prefix. It fails when fewer than LengthPrefixSize bytes are
// given or when batchLength is too small to hold a header.
func PeekSize(b []byte) (int, error) {
	if len(b) < LengthPrefixSize {
		return 0, fmt.Errorf("%w: %d bytes, need %d for the length", ErrShortBatch, len(b), LengthPrefixSize)
	}
	n := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if n < HeaderSize-LengthPrefixSize {
		return 0, fmt.Errorf("%w: batchLength %d", ErrBadLength, n)
	}
	return int(n) + LengthPrefixSize, nil
}

// PeekHeader decodes the fixed header of the batch at the start of b, which
// needs only the first HeaderSize bytes: enough to index a segment or route a
// batch without holding it whole. It checks the length, the magic and the
// signs of the counts, not the CRC and not that the rest of the batch is
// there.
func PeekHeader(b []byte) (Header, error) {
	if _, err := PeekSize(b); err != nil {
		return Header{}, err
	}
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header needs %d bytes, have %d", ErrShortBatch, HeaderSize, len(b))
	}
	h := Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		BatchLength:          int32(binary.BigEndian.Uint32(b[offBatchLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		RecordCount:          int32(binary.BigEndian.Uint32(b[offRecordCount:])),
	}
	if h.Magic != Magic {
		return Header{}, fmt.Errorf("%w: %d", ErrBadMagic, h.Magic)
	}
	if h.LastOffsetDelta < 0 || h.RecordCount < 0 {
		return Header{}, fmt.Errorf("%w: lastOffsetDelta %d, recordCount %d", ErrCorrupt, h.LastOffsetDelta, h.RecordCount)
	}
	return h, nil
}

// ParseHeader decodes the fixed header of the batch at the start of b and
// checks that b holds the whole batch, but not the CRC; use Verify for that.
func ParseHeader(b []byte) (Header, error) {
	h, err := PeekHeader(b)
	if err != nil {
		return Header{}, err
	}
	if len(b) < h.Size() {
		return Header{}, fmt.Errorf("%w: have %d bytes of a %d-byte batch", ErrShortBatch, len(b), h.Size())
	}
	return h, nil
}

// ComputeCRC returns the CRC-32C of the CRC'd region of a whole batch.
// b must hold exactly one batch (at least HeaderSize bytes).
func ComputeCRC(b []byte) uint32 { return crc32.Checksum(b[crcStart:], castagnoli) }

// Verify parses the header of the batch at the start of b and checks its
// CRC. It returns the header; b[:h.Size()] is the whole batch.
func Verify(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, err
	}
	if got := ComputeCRC(b[:h.Size()]); got != h.CRC {
		return Header{}, fmt.Errorf("%w: stored %08x, computed %08x", ErrCRC, h.CRC, got)
	}
	return h, nil
}

// SetBaseOffset stamps the base offset of the batch at the start of b in
// place. The CRC does not cover it, so the batch stays valid.
func SetBaseOffset(b []byte, off int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off))
}

// SetPartitionLeaderEpoch stamps the leader epoch of the batch at the start
// of b in place. The CRC does not cover it, so the batch stays valid.
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// Iter walks consecutive batches in a buffer, such as a fetch response or a
// segment read. It stops at the first malformed or incomplete batch and
// reports why through Err; a buffer that simply ends after a whole batch
// ends without error.
type Iter struct {
	buf    []byte
	verify bool
	err    error
}

// NewIter returns an iterator over the batches in buf. With verify set, each
// batch's CRC is checked before it is returned.
func NewIter(buf []byte, verify bool) *Iter { return &Iter{buf: buf, verify: verify} }

// Next returns the next whole batch and its header. ok is false at the end
// of the buffer or on the first error.
func (it *Iter) Next() (h Header, batch []byte, ok bool) {
	if it.err != nil || len(it.buf) == 0 {
		return Header{}, nil, false
	}
	if it.verify {
		h, it.err = Verify(it.buf)
	} else {
		h, it.err = ParseHeader(it.buf)
	}
	if it.err != nil {
		return Header{}, nil, false
	}
	batch, it.buf = it.buf[:h.Size()], it.buf[h.Size():]
	return h, batch, true
}

// Err is the reason the iterator stopped early, or nil.
func (it *Iter) Err() error { return it.err }

// Rest is the bytes not yet returned (a torn tail, after an error).
func (it *Iter) Rest() []byte { return it.buf }
