package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Producer snapshot files (part of the format, do not change).
//
// A snapshot holds the idempotent-producer state of the partition as it
// was after every batch below one offset, the snapshot's offset, which
// also names the file: <offset as 20 digits>.snapshot, like a segment.
// The log writes one when it rolls a segment (at the new segment's base),
// before retention deletes segments and on Close (at the log end), and
// loads the newest on open, then reads the batches after it. All integers
// are big-endian.
//
//	offset size field
//	     0    4 magic "SPPS"
//	     4    2 version (2; 1 is still read)
//	     6    8 offset: the state is as of just before this log offset
//	    14    4 producer count n
//	    18      n producers, producer ids strictly increasing:
//	              8 producer id (>= 0)
//	              2 producer epoch (>= 0)
//	              8 last seen, Unix ms (the log's clock at its last batch)
//	              4 coordinator epoch of its last marker (>= -1; -1 none)   version 2 only
//	              8 first offset of its open transaction                   version 2 only
//	                (-1 none; else 0 <= it < offset)
//	              1 batch count k (0..ProducerWindow)
//	              k batches, oldest first, 24 bytes each:
//	                4 first sequence, 4 last sequence (0..2^31-1)
//	                8 first offset, 8 last offset (first <= last < offset)
//	   end-4    4 CRC-32C (Castagnoli) of every byte before it
//
// Version 1 has no transaction fields: it was written before the log
// took transactional batches, so its producers have no open transaction
// and no coordinator epoch (-1). The log writes version 2.
//
// A snapshot that is torn, corrupt or of another version fails to decode;
// the log then uses the next older one and reads more of the log.
const (
	snapshotSuffix  = ".snapshot"
	snapshotMagic   = "SPPS"
	snapshotVersion = 2
	// snapshotHeader is magic, version, offset and producer count.
	snapshotHeader = 18
	// snapshotProducerV1 is the fixed part of one producer in version 1;
	// version 2 adds snapshotTxnFields.
	snapshotProducerV1 = 8 + 2 + 8 + 1
	snapshotTxnFields  = 4 + 8
	// snapshotBatch is one remembered batch.
	snapshotBatch = 24
)

// errSnapshot is wrapped by every snapshot decoding error.
var errSnapshot = errors.New("partlog: producer snapshot")

// snapshotName is the file name of the snapshot at offset.
func snapshotName(offset int64) string { return segmentName(offset) + snapshotSuffix }

// parseSnapshotName returns the offset a snapshot file name carries.
func parseSnapshotName(name string) (int64, bool) { return parseOffsetName(name, snapshotSuffix) }

// encodeSnapshot writes the state of ps as of offset in the snapshot
// layout, version 2. Producers are written in increasing id order.
func encodeSnapshot(offset int64, ps *producers) []byte {
	return encodeSnapshotVersion(snapshotVersion, offset, ps)
}

// encodeSnapshotVersion writes the layout of version 1 or 2; version 1
// leaves out the transaction fields (tests write it, the log does not).
func encodeSnapshotVersion(version uint16, offset int64, ps *producers) []byte {
	ids := ps.sortedIDs()
	fixed := snapshotProducerV1
	if version >= 2 {
		fixed += snapshotTxnFields
	}
	size := snapshotHeader + 4
	for _, id := range ids {
		size += fixed + snapshotBatch*len(ps.m[id].batches)
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		e := ps.m[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastSeen))
		if version >= 2 {
			first := int64(-1)
			if e.txnOpen {
				first = e.txnFirst
			}
			b = binary.BigEndian.AppendUint32(b, uint32(e.coordEpoch))
			b = binary.BigEndian.AppendUint64(b, uint64(first))
		}
		b = append(b, byte(len(e.batches)))
		for _, pb := range e.batches {
			b = binary.BigEndian.AppendUint32(b, uint32(pb.FirstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(pb.LastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.FirstOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.LastOffset))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSnapshot reads a snapshot of either version and checks every
// field against the layout. It allocates in proportion to len(b) and
// never panics.
func decodeSnapshot(b []byte) (offset int64, ps *producers, err error) {
	_, offset, ps, err = decodeSnapshotVersion(b)
	return offset, ps, err
}

// decodeSnapshotVersion is decodeSnapshot, also returning the version.
func decodeSnapshotVersion(b []byte) (version uint16, offset int64, ps *producers, err error) {
	bad := func(format string, args ...any) (uint16, int64, *producers, error) {
		return 0, 0, nil, fmt.Errorf("%w: "+format, append([]any{errSnapshot}, args...)...)
	}
	if len(b) < snapshotHeader+4 {
		return bad("%d bytes, need at least %d", len(b), snapshotHeader+4)
	}
	body := b[:len(b)-4]
	if want, got := binary.BigEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, castagnoli); want != got {
		return bad("crc mismatch: stored %08x, computed %08x", want, got)
	}
	if string(body[:4]) != snapshotMagic {
		return bad("magic %q", body[:4])
	}
	version = binary.BigEndian.Uint16(body[4:])
	if version != 1 && version != 2 {
		return bad("version %d", version)
	}
	fixed := snapshotProducerV1
	if version >= 2 {
		fixed += snapshotTxnFields
	}
	offset = int64(binary.BigEndian.Uint64(body[6:]))
	n := binary.BigEndian.Uint32(body[14:])
	if offset < 0 {
		return bad("offset %d", offset)
	}
	rest := body[snapshotHeader:]
	if uint64(n) > uint64(len(rest)/fixed) {
		return bad("%d producers cannot fit in %d bytes", n, len(rest))
	}
	ps = newProducers()
	prev := int64(-1)
	for i := range int(n) {
		if len(rest) < fixed {
			return bad("producer %d: %d bytes left", i, len(rest))
		}
		id := int64(binary.BigEndian.Uint64(rest))
		e := newProducerEntry(int16(binary.BigEndian.Uint16(rest[8:])))
		e.lastSeen = int64(binary.BigEndian.Uint64(rest[10:]))
		rest = rest[18:]
		first := int64(-1)
		if version >= 2 {
			e.coordEpoch = int32(binary.BigEndian.Uint32(rest))
			first = int64(binary.BigEndian.Uint64(rest[4:]))
			rest = rest[snapshotTxnFields:]
		}
		k := int(rest[0])
		rest = rest[1:]
		switch {
		case id <= prev:
			return bad("producer %d: id %d after %d", i, id, prev)
		case e.epoch < 0:
			return bad("producer %d: epoch %d", id, e.epoch)
		case e.coordEpoch < -1:
			return bad("producer %d: coordinator epoch %d", id, e.coordEpoch)
		case first < -1 || first >= offset:
			return bad("producer %d: transaction from offset %d in a snapshot at %d", id, first, offset)
		case k > ProducerWindow:
			return bad("producer %d: %d batches, at most %d", id, k, ProducerWindow)
		case len(rest) < k*snapshotBatch:
			return bad("producer %d: %d batches in %d bytes", id, k, len(rest))
		}
		if first >= 0 {
			e.txnOpen, e.txnFirst = true, first
			ps.ongoing[id] = first
		}
		e.batches = e.batches[:k]
		for j := range k {
			pb := ProducerBatch{
				FirstSeq:    int32(binary.BigEndian.Uint32(rest)),
				LastSeq:     int32(binary.BigEndian.Uint32(rest[4:])),
				FirstOffset: int64(binary.BigEndian.Uint64(rest[8:])),
				LastOffset:  int64(binary.BigEndian.Uint64(rest[16:])),
			}
			rest = rest[snapshotBatch:]
			switch {
			case pb.FirstSeq < 0 || pb.LastSeq < 0:
				return bad("producer %d batch %d: sequences %d-%d", id, j, pb.FirstSeq, pb.LastSeq)
			case pb.FirstOffset < 0 || pb.FirstOffset > pb.LastOffset || pb.LastOffset >= offset:
				return bad("producer %d batch %d: offsets %d-%d in a snapshot at %d", id, j, pb.FirstOffset, pb.LastOffset, offset)
			case j > 0 && pb.FirstOffset <= e.batches[j-1].LastOffset:
				return bad("producer %d batch %d: offset %d after %d", id, j, pb.FirstOffset, e.batches[j-1].LastOffset)
			}
			e.batches[j] = pb
		}
		ps.m[id] = e
		prev = id
	}
	if len(rest) != 0 {
		return bad("%d bytes after the last producer", len(rest))
	}
	return version, offset, ps, nil
}
