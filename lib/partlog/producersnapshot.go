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
//	     4    2 version (1)
//	     6    8 offset: the state is as of just before this log offset
//	    14    4 producer count n
//	    18      n producers, producer ids strictly increasing:
//	              8 producer id (>= 0)
//	              2 producer epoch (>= 0)
//	              8 last seen, Unix ms (the log's clock at its last batch)
//	              1 batch count k (0..ProducerWindow)
//	              k batches, oldest first, 24 bytes each:
//	                4 first sequence, 4 last sequence (0..2^31-1)
//	                8 first offset, 8 last offset (first <= last < offset)
//	   end-4    4 CRC-32C (Castagnoli) of every byte before it
//
// A snapshot that is torn, corrupt or of another version fails to decode;
// the log then uses the next older one and reads more of the log.
const (
	snapshotSuffix  = ".snapshot"
	snapshotMagic   = "SPPS"
	snapshotVersion = 1
	// snapshotHeader is magic, version, offset and producer count.
	snapshotHeader = 18
	// snapshotProducer is the fixed part of one producer.
	snapshotProducer = 8 + 2 + 8 + 1
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
// layout. Producers are written in increasing id order.
func encodeSnapshot(offset int64, ps *producers) []byte {
	ids := ps.sortedIDs()
	size := snapshotHeader + 4
	for _, id := range ids {
		size += snapshotProducer + snapshotBatch*len(ps.m[id].batches)
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint16(b, snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		e := ps.m[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastSeen))
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

// decodeSnapshot reads a snapshot and checks every field against the
// layout. It allocates in proportion to len(b) and never panics.
func decodeSnapshot(b []byte) (offset int64, ps *producers, err error) {
	bad := func(format string, args ...any) (int64, *producers, error) {
		return 0, nil, fmt.Errorf("%w: "+format, append([]any{errSnapshot}, args...)...)
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
	if v := binary.BigEndian.Uint16(body[4:]); v != snapshotVersion {
		return bad("version %d", v)
	}
	offset = int64(binary.BigEndian.Uint64(body[6:]))
	n := binary.BigEndian.Uint32(body[14:])
	if offset < 0 {
		return bad("offset %d", offset)
	}
	rest := body[snapshotHeader:]
	if uint64(n) > uint64(len(rest)/snapshotProducer) {
		return bad("%d producers cannot fit in %d bytes", n, len(rest))
	}
	ps = newProducers()
	prev := int64(-1)
	for i := range int(n) {
		if len(rest) < snapshotProducer {
			return bad("producer %d: %d bytes left", i, len(rest))
		}
		id := int64(binary.BigEndian.Uint64(rest))
		e := &producerEntry{
			epoch:    int16(binary.BigEndian.Uint16(rest[8:])),
			lastSeen: int64(binary.BigEndian.Uint64(rest[10:])),
		}
		k := int(rest[18])
		rest = rest[snapshotProducer:]
		switch {
		case id <= prev:
			return bad("producer %d: id %d after %d", i, id, prev)
		case e.epoch < 0:
			return bad("producer %d: epoch %d", id, e.epoch)
		case k > ProducerWindow:
			return bad("producer %d: %d batches, at most %d", id, k, ProducerWindow)
		case len(rest) < k*snapshotBatch:
			return bad("producer %d: %d batches in %d bytes", id, k, len(rest))
		}
		if k > 0 {
			e.batches = make([]ProducerBatch, k, ProducerWindow)
		}
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
	return offset, ps, nil
}
