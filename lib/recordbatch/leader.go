package recordbatch

import (
	"encoding/binary"
	"fmt"
)

// The rewrites a leader makes to a producer's batch for its topic's
// configs, beyond the offset and epoch it stamps outside the CRC: the
// log-append time (message.timestamp.type=LogAppendTime) and the codec
// (compression.type). Both change bytes the CRC covers, so both compute it
// again, as Kafka's LogValidator does.

// SetLogAppendTime marks the whole, valid batch b as stamped with the
// broker's time ts (Unix ms) in place: the timestamp-type attribute bit is
// set and maxTimestamp becomes ts, then the CRC is computed again. The
// records keep their own timestamps; readers take maxTimestamp as every
// record's time (Kafka's DefaultRecordBatch.setMaxTimestamp, used by
// LogValidator for a LogAppendTime topic).
func SetLogAppendTime(b []byte, ts int64) {
	be := binary.BigEndian
	attrs := be.Uint16(b[offAttributes:]) | attrTimestampType
	if be.Uint16(b[offAttributes:]) == attrs && int64(be.Uint64(b[offMaxTimestamp:])) == ts {
		return // already so: the CRC holds
	}
	be.PutUint16(b[offAttributes:], attrs)
	be.PutUint64(b[offMaxTimestamp:], uint64(ts))
	be.PutUint32(b[offCRC:], ComputeCRC(b))
}

// Recompress returns the whole, valid batch b with its records section
// compressed with codec instead: every header field is kept (offsets,
// timestamps, producer id, epoch and sequence, timestamp type) but the
// codec bits, batchLength and CRC. The records are the same bytes once
// inflated, so a consumer sees the same records. When b already uses
// codec it is returned as it is. The result is newly allocated.
func Recompress(b []byte, codec Codec) ([]byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if !validCodec(codec) {
		return nil, fmt.Errorf("%w: recompress to %v", ErrCodec, codec)
	}
	if h.Codec() == codec {
		return b, nil
	}
	section := b[HeaderSize:h.Size()]
	if h.Codec() != CodecNone {
		// Inflate into a pooled buffer (validate's): the records are
		// copied or compressed into the new batch below.
		p := inflated.Get().(*[]byte)
		defer inflated.Put(p)
		if section, err = decompressInto(*p, h.Codec(), section); err != nil {
			return nil, err
		}
		if cap(section) > cap(*p) && cap(section) <= maxScratch {
			*p = section[:0]
		}
	}
	var out []byte
	if codec == CodecNone {
		out = append(make([]byte, HeaderSize, HeaderSize+len(section)), section...)
	} else if out, err = compressedBatch(codec, section); err != nil {
		return nil, err
	}
	h.Attributes = h.Attributes&^attrCodecMask | int16(codec)&attrCodecMask
	putHeader(out, h)
	return out, nil
}
