package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Transaction markers (part of the format, do not change).
//
// A transaction ends in each partition it wrote to with a control batch
// that the partition leader appends on the transaction coordinator's
// word, byte for byte as Kafka writes one (MemoryRecords.
// withEndTransactionMarker): attributes transactional and control (0x30),
// no codec, create time; the producer id and epoch of the transaction;
// base sequence -1; baseTimestamp = maxTimestamp = the time it is
// written; and one record, at offset delta 0 and timestamp delta 0, with
// no headers, whose key and value are (big-endian):
//
//	key   (4 bytes, Kafka's ControlRecordType):
//	        0 2 version (0)
//	        2 2 type: 0 abort, 1 commit
//	value (6 bytes, Kafka's EndTransactionMarker):
//	        0 2 version (0)
//	        2 4 coordinator epoch
//
// The whole batch is MarkerSize bytes. Readers accept, as Kafka's do, a
// key or value version above 0 read as version 0 and bytes after the
// fields; a negative version is corrupt.
const (
	markerKeySize   = 4
	markerValueSize = 6
	// MarkerSize is the size of a transaction marker batch as BuildMarker
	// writes it: the header and one 17-byte record.
	MarkerSize = HeaderSize + 17
)

// ControlType is the type a control record's key names (Kafka's
// ControlRecordType). Only the two transaction markers are written here.
type ControlType int16

// The control record types of transaction markers, with Kafka's numbers.
const (
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

// String names the type as Kafka does.
func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "ABORT"
	case ControlCommit:
		return "COMMIT"
	}
	return fmt.Sprintf("control(%d)", int16(t))
}

// ErrNotMarker means a batch is not a transaction marker: not a control
// batch, not exactly one record, or a key or value that is not a commit
// or abort marker's.
var ErrNotMarker = errors.New("recordbatch: not a transaction marker")

// Marker is what a transaction marker says.
type Marker struct {
	// Type is ControlAbort or ControlCommit.
	Type ControlType
	// CoordinatorEpoch is the epoch of the coordinator that decided the
	// transaction; a leader refuses a marker older than the last one it
	// took for the producer.
	CoordinatorEpoch int32
}

// Commit reports whether the marker commits its transaction.
func (m Marker) Commit() bool { return m.Type == ControlCommit }

// BuildMarker encodes a transaction marker batch for the producer's
// transaction at base offset 0 and leader epoch -1 (the leader stamps
// both), with timestamp ts (Unix ms), as Kafka writes it (layout above).
// The type must be ControlAbort or ControlCommit.
func BuildMarker(producerID int64, producerEpoch int16, ts int64, m Marker) ([]byte, error) {
	if m.Type != ControlAbort && m.Type != ControlCommit {
		return nil, fmt.Errorf("%w: build: type %v", ErrNotMarker, m.Type)
	}
	if producerID < 0 || producerEpoch < 0 {
		return nil, fmt.Errorf("%w: build: producer id %d epoch %d", ErrNotMarker, producerID, producerEpoch)
	}
	key := binary.BigEndian.AppendUint16(make([]byte, 0, markerKeySize), 0)
	key = binary.BigEndian.AppendUint16(key, uint16(m.Type))
	value := binary.BigEndian.AppendUint16(make([]byte, 0, markerValueSize), 0)
	value = binary.BigEndian.AppendUint32(value, uint32(m.CoordinatorEpoch))
	r := Record{Key: key, Value: value, Timestamp: ts}
	b := appendRecord(make([]byte, HeaderSize, MarkerSize), 0, 0, r)
	putHeader(b, Header{
		PartitionLeaderEpoch: -1, Attributes: attrTransactional | attrControl,
		BaseTimestamp: ts, MaxTimestamp: ts,
		ProducerID: producerID, ProducerEpoch: producerEpoch, BaseSequence: -1, RecordCount: 1,
	})
	return b, nil
}

// ParseMarker decodes the transaction marker that b, exactly one whole
// batch, holds: it checks the CRC and the records as Decode does, then
// that the batch is a control batch of one record whose key and value are
// a marker's (ErrNotMarker otherwise).
func ParseMarker(b []byte) (Header, Marker, error) {
	batch, err := Decode(b)
	if err != nil {
		return Header{}, Marker{}, err
	}
	h := batch.Header
	if !h.Control() {
		return h, Marker{}, fmt.Errorf("%w: not a control batch", ErrNotMarker)
	}
	if len(batch.Records) != 1 {
		return h, Marker{}, fmt.Errorf("%w: %d records", ErrNotMarker, len(batch.Records))
	}
	m, err := parseMarkerRecord(batch.Records[0])
	return h, m, err
}

// parseMarkerRecord reads a marker's key and value as Kafka's
// ControlRecordType.parse and EndTransactionMarker.deserializeValue do.
func parseMarkerRecord(r Record) (Marker, error) {
	if len(r.Key) < markerKeySize {
		return Marker{}, fmt.Errorf("%w: key of %d bytes", ErrNotMarker, len(r.Key))
	}
	if v := int16(binary.BigEndian.Uint16(r.Key)); v < 0 {
		return Marker{}, fmt.Errorf("%w: key version %d", ErrNotMarker, v)
	}
	t := ControlType(binary.BigEndian.Uint16(r.Key[2:]))
	if t != ControlAbort && t != ControlCommit {
		return Marker{}, fmt.Errorf("%w: control type %v", ErrNotMarker, t)
	}
	if len(r.Value) < markerValueSize {
		return Marker{}, fmt.Errorf("%w: value of %d bytes", ErrNotMarker, len(r.Value))
	}
	if v := int16(binary.BigEndian.Uint16(r.Value)); v < 0 {
		return Marker{}, fmt.Errorf("%w: value version %d", ErrNotMarker, v)
	}
	return Marker{Type: t, CoordinatorEpoch: int32(binary.BigEndian.Uint32(r.Value[2:]))}, nil
}
