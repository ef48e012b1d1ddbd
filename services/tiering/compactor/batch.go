package compactor

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Byte positions of the RecordBatch v2 header fields (lib/recordbatch,
// docs/design/record-batch.md); part of the format.
const (
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

	attrTimestampType = 0x08
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rebuild encodes the records kept from the batch with header src as a new
// uncompressed batch that keeps src's offset range and timestamps: the
// base offset, lastOffsetDelta, base and max timestamp, leader epoch and
// timestamp type of src, and each record's own offset (its offset delta is
// Offset - BaseOffset, so offsets keep the gaps compaction left) and
// timestamp delta. Producer id, epoch and base sequence are -1. kept may be
// empty: the batch then holds zero records and only keeps the offset range
// covered, which Kafka readers and lib/recordbatch accept (recordCount 0).
//
// recordbatch.Build cannot be used: it numbers offset deltas 0, 1, 2, ...
func rebuild(src recordbatch.Header, kept []recordbatch.Record) []byte {
	b := make([]byte, recordbatch.HeaderSize, recordbatch.HeaderSize+64*len(kept))
	for _, r := range kept {
		b = appendRecord(b, int32(r.Offset-src.BaseOffset), r.Timestamp-src.BaseTimestamp, r)
	}
	be := binary.BigEndian
	recordbatch.SetBaseOffset(b, src.BaseOffset)
	be.PutUint32(b[offBatchLength:], uint32(len(b)-recordbatch.LengthPrefixSize))
	be.PutUint32(b[offLeaderEpoch:], uint32(src.PartitionLeaderEpoch))
	b[offMagic] = recordbatch.Magic
	be.PutUint16(b[offAttributes:], uint16(src.Attributes&attrTimestampType)) // codec none
	be.PutUint32(b[offLastOffsetDelta:], uint32(src.LastOffsetDelta))
	be.PutUint64(b[offBaseTimestamp:], uint64(src.BaseTimestamp))
	be.PutUint64(b[offMaxTimestamp:], uint64(src.MaxTimestamp))
	be.PutUint64(b[offProducerID:], ^uint64(0))
	be.PutUint16(b[offProducerEpoch:], 0xFFFF)
	be.PutUint32(b[offBaseSequence:], 0xFFFFFFFF)
	be.PutUint32(b[offRecordCount:], uint32(len(kept)))
	be.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// appendRecord appends one record in the v2 record layout (zig-zag
// varints): length, attributes, timestampDelta, offsetDelta, key, value,
// headers.
func appendRecord(dst []byte, offsetDelta int32, tsDelta int64, r recordbatch.Record) []byte {
	var body []byte
	body = append(body, 0) // attributes
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
