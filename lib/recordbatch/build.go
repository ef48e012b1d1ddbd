package recordbatch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// RecordHeader is one record header: a key with an optional value.
type RecordHeader struct {
	Key   string
	Value []byte // nil and empty are both encoded as given (nil as -1)
}

// Record is one record as an application sees it.
type Record struct {
	Key       []byte // nil means no key (encoded as length -1)
	Value     []byte // nil means a tombstone (encoded as length -1)
	Headers   []RecordHeader
	Timestamp int64 // Unix milliseconds
	// Offset is filled in by decoding: BaseOffset + offsetDelta. Ignored
	// when building.
	Offset int64
}

// BuildOptions are the header fields a producer chooses for a new batch.
// The zero value builds an uncompressed, non-idempotent batch at offset 0.
type BuildOptions struct {
	Codec         Codec
	ProducerID    int64 // -1 (set by Build when Idempotent is false)
	ProducerEpoch int16
	BaseSequence  int32
	Idempotent    bool // when false, producer id, epoch and sequence are -1
	LogAppendTime bool
	// Transactional sets the transactional attribute: the batch belongs
	// to its producer's open transaction, which a marker (BuildMarker)
	// ends. Meaningful only with Idempotent. Default false.
	Transactional bool
}

// Build encodes records into one batch with base offset 0 and leader epoch
// -1 (the leader stamps both). Records are written in the order given, with
// offset deltas 0, 1, 2, ...; the batch's base timestamp is the first
// record's and its max timestamp the largest. Build fails for an empty
// record list, an unknown codec (ErrCodec), or records whose encoded size
// exceeds MaxDecompressedSize (ErrTooLarge) or the format's int32 limits.
//
// The returned slice is newly allocated and owned by the caller. Build is
// safe for concurrent use.
func Build(opts BuildOptions, records []Record) ([]byte, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("recordbatch: build: no records")
	}
	if !validCodec(opts.Codec) {
		return nil, fmt.Errorf("%w: build: %v", ErrCodec, opts.Codec)
	}
	if len(records) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: build: %d records", ErrTooLarge, len(records))
	}
	base := records[0].Timestamp
	maxTS := base
	size := 0
	for i, r := range records {
		maxTS = max(maxTS, r.Timestamp)
		n := recordSize(int32(i), r.Timestamp-base, r)
		size += uvarintLen(zigzag(int64(n))) + n
		if size > MaxDecompressedSize {
			return nil, fmt.Errorf("%w: build: records section over %d bytes", ErrTooLarge, MaxDecompressedSize)
		}
	}

	b, err := newBatch(opts.Codec, size, func(dst []byte) []byte {
		for i, r := range records {
			dst = appendRecord(dst, int32(i), r.Timestamp-base, r)
		}
		return dst
	})
	if err != nil {
		return nil, err
	}

	attrs := int16(opts.Codec) & attrCodecMask
	if opts.LogAppendTime {
		attrs |= attrTimestampType
	}
	if opts.Transactional {
		attrs |= attrTransactional
	}
	pid, pepoch, seq := int64(-1), int16(-1), int32(-1)
	if opts.Idempotent {
		pid, pepoch, seq = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	}
	putHeader(b, Header{
		PartitionLeaderEpoch: -1, Attributes: attrs, LastOffsetDelta: int32(len(records) - 1),
		BaseTimestamp: base, MaxTimestamp: maxTS,
		ProducerID: pid, ProducerEpoch: pepoch, BaseSequence: seq, RecordCount: int32(len(records)),
	})
	return b, nil
}

// Rebuild encodes the records kept from the batch with header src as a new
// uncompressed batch that keeps src's offset range and timestamps: its base
// offset, lastOffsetDelta, base and max timestamp, leader epoch and
// timestamp type, and each record's own offset (its offset delta is
// Offset - src.BaseOffset, so offsets keep the gaps key compaction left)
// and timestamp. Producer id, epoch and base sequence are -1. kept may be
// empty: the batch then holds zero records and only keeps the offset range
// covered, which Kafka readers and this package accept (recordCount 0).
// Unlike Build, which numbers offset deltas 0, 1, 2, ..., it is for
// rewriting a batch already in a log.
func Rebuild(src Header, kept []Record) []byte {
	b := make([]byte, HeaderSize, HeaderSize+64*len(kept))
	for _, r := range kept {
		b = appendRecord(b, int32(r.Offset-src.BaseOffset), r.Timestamp-src.BaseTimestamp, r)
	}
	putHeader(b, Header{
		BaseOffset: src.BaseOffset, PartitionLeaderEpoch: src.PartitionLeaderEpoch,
		Attributes: src.Attributes & attrTimestampType, LastOffsetDelta: src.LastOffsetDelta,
		BaseTimestamp: src.BaseTimestamp, MaxTimestamp: src.MaxTimestamp,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: int32(len(kept)),
	})
	return b
}

// putHeader writes h's fields into the header of batch b, whose records
// section is already in place after it: batchLength from len(b), magic 2,
// and the CRC last (h.BatchLength, h.Magic and h.CRC are ignored).
func putHeader(b []byte, h Header) {
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	be.PutUint32(b[offBatchLength:], uint32(len(b)-LengthPrefixSize))
	be.PutUint32(b[offLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[offMagic] = Magic
	be.PutUint16(b[offAttributes:], uint16(h.Attributes))
	be.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[offBaseTimestamp:], uint64(h.BaseTimestamp))
	be.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	be.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	be.PutUint32(b[offRecordCount:], uint32(h.RecordCount))
	be.PutUint32(b[offCRC:], ComputeCRC(b))
}

// scratch holds buffers for the uncompressed records section of a
// compressed batch and for its compressed form, both dropped once the
// batch is assembled. Buffers larger than maxScratch are left to the
// garbage collector so that one huge batch does not pin its memory for the
// life of the process.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 4 << 20

// newBatch returns a new batch's bytes but its header: HeaderSize bytes
// for putHeader, then the records section that encode appends, compressed
// with codec. Uncompressed, encode appends straight after the header (no
// second buffer; sizeHint is the section's expected size). Compressed, the
// section is encoded in pooled scratch space and compressed into an
// exactly sized batch (compressedBatch).
func newBatch(codec Codec, sizeHint int, encode func(dst []byte) []byte) ([]byte, error) {
	if codec == CodecNone {
		return encode(make([]byte, HeaderSize, HeaderSize+sizeHint)), nil
	}
	bodyp := scratch.Get().(*[]byte)
	body := encode((*bodyp)[:0])
	b, err := compressedBatch(codec, body)
	putScratch(bodyp, body)
	return b, err
}

// compressedBatch returns HeaderSize bytes for putHeader followed by
// section compressed with codec. The compressor works in pooled scratch
// space and its output is copied into an exactly sized batch: callers may
// hold batches a while (producer buffers), and compressors want
// worst-case room that would otherwise stay attached to it.
func compressedBatch(codec Codec, section []byte) ([]byte, error) {
	outp := scratch.Get().(*[]byte)
	out, err := appendCompressed((*outp)[:0], codec, section)
	var b []byte
	if err == nil {
		b = make([]byte, HeaderSize+len(out))
		copy(b[HeaderSize:], out)
	}
	putScratch(outp, out)
	return b, err
}

// putScratch returns buf, the grown form of *p, to the pool.
func putScratch(p *[]byte, buf []byte) {
	if cap(buf) <= maxScratch {
		*p = buf
		scratch.Put(p)
	}
}

// appendRecord appends one record in the v2 record layout:
//
//	length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//	keyLength varint, key, valueLength varint, value,
//	headerCount varint, then per header: keyLength varint, key, valueLength varint, value
//
// Varints are zig-zag encoded, as in protobuf's sint types. A length of -1
// means null. length counts the bytes after itself.
func appendRecord(dst []byte, offsetDelta int32, tsDelta int64, r Record) []byte {
	dst = binary.AppendVarint(dst, int64(recordSize(offsetDelta, tsDelta, r)))
	dst = append(dst, 0) // attributes: unused
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// recordSize is the encoded size of a record after its length field, so
// the length can be written first without encoding the record twice.
func recordSize(offsetDelta int32, tsDelta int64, r Record) int {
	n := 1 + // attributes
		uvarintLen(zigzag(tsDelta)) +
		uvarintLen(zigzag(int64(offsetDelta))) +
		bytesSize(r.Key) +
		bytesSize(r.Value) +
		uvarintLen(zigzag(int64(len(r.Headers))))
	for _, h := range r.Headers {
		n += uvarintLen(zigzag(int64(len(h.Key)))) + len(h.Key) + bytesSize(h.Value)
	}
	return n
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// bytesSize is the encoded size of a nullable byte string.
func bytesSize(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return uvarintLen(zigzag(int64(len(b)))) + len(b)
}

// zigzag maps signed to unsigned so that small magnitudes stay short:
// 0, -1, 1, -2 become 0, 1, 2, 3.
func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// uvarintLen is the number of bytes binary.AppendUvarint writes for v.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
