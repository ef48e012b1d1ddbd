package recordbatch

import (
	"encoding/binary"
	"fmt"
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
}

// Build encodes records into one batch with base offset 0 and leader epoch
// -1 (the leader stamps both). Records are written in the order given; the
// batch's base timestamp is the first record's and its max timestamp the
// largest. Build fails only for an empty record list or an unknown codec.
func Build(opts BuildOptions, records []Record) ([]byte, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("recordbatch: build: no records")
	}
	base := records[0].Timestamp
	maxTS := base
	var body []byte
	for i, r := range records {
		if r.Timestamp > maxTS {
			maxTS = r.Timestamp
		}
		body = appendRecord(body, int32(i), r.Timestamp-base, r)
	}
	body, err := compress(opts.Codec, body)
	if err != nil {
		return nil, err
	}
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	b = append(b, body...)
	attrs := int16(opts.Codec) & attrCodecMask
	if opts.LogAppendTime {
		attrs |= attrTimestampType
	}
	pid, pepoch, seq := int64(-1), int16(-1), int32(-1)
	if opts.Idempotent {
		pid, pepoch, seq = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	}
	binary.BigEndian.PutUint64(b[offBaseOffset:], 0)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-LengthPrefixSize))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 0xFFFFFFFF)
	b[offMagic] = Magic
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(len(records)-1))
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], uint64(base))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(maxTS))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(pepoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(seq))
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(len(records)))
	binary.BigEndian.PutUint32(b[offCRC:], ComputeCRC(b))
	return b, nil
}

// appendRecord appends one record in the v2 record layout:
//
//	length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//	keyLength varint, key, valueLength varint, value,
//	headerCount varint, then per header: keyLength varint, key, valueLength varint, value
//
// Varints are zig-zag encoded, as in protobuf's sint types. A length of -1
// means null.
func appendRecord(dst []byte, offsetDelta int32, tsDelta int64, r Record) []byte {
	var body []byte
	body = append(body, 0) // attributes: unused
	body = binary.AppendVarint(body, tsDelta)
	body = binary.AppendVarint(body, int64(offsetDelta))
	body = appendBytes(body, r.Key)
	body = appendBytes(body, r.Value)
	body = binary.AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = binary.AppendVarint(body, int64(len(h.Key)))
		body = append(body, h.Key...)
		body = appendBytes(body, h.Value)
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// compress compresses the records section with codec. Only CodecNone is
// built in here; compress.go adds the others.
var compress = func(codec Codec, body []byte) ([]byte, error) {
	if codec != CodecNone {
		return nil, fmt.Errorf("%w: %v", ErrCodec, codec)
	}
	return body, nil
}
