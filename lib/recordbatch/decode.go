package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Batch is one decoded batch: its fixed header and its records.
type Batch struct {
	Header  Header   // the fixed header, as stored
	Records []Record // in stored order; Offset and Timestamp are absolute
}

// minRecordSize is the smallest encoded record: a one-byte length and six
// one-byte fields (attributes, timestamp delta, offset delta, key length,
// value length, header count). It bounds how many records a records
// section can hold, so a forged recordCount cannot size an allocation.
const minRecordSize = 7

// minHeaderSize is the smallest encoded record header: two one-byte
// lengths.
const minHeaderSize = 2

// Decode verifies and decodes the one batch that b holds exactly. It checks
// the header (ParseHeader), the CRC (Verify), that b has no bytes past the
// batch, the codec, and then decodes every record with bounds checks,
// inflating the records section first when the batch is compressed.
//
// Each record's Offset is BaseOffset plus its offset delta and its
// Timestamp is BaseTimestamp plus its timestamp delta, both with Go's
// wrapping int64 arithmetic. For a batch with LogAppendTime set, Kafka
// readers use the header's MaxTimestamp as every record's time instead;
// Decode leaves that choice to the caller.
//
// Offset deltas must be strictly increasing and within [0,
// LastOffsetDelta]. They need not be contiguous: compaction removes records
// from a batch but keeps the batch's offset range.
//
// For an uncompressed batch, the Key, Value and header Value slices of the
// records point into b; for a compressed one they point into one buffer
// that Decode allocated. Neither is copied per record. Copy them before
// modifying b if they must outlive the change.
//
// Every error wraps one of the package's sentinel errors: ErrShortBatch,
// ErrBadLength, ErrBadMagic, ErrCRC, ErrCodec, ErrCorrupt or ErrTooLarge.
// Decode never panics on any input and allocates in proportion to len(b),
// or at most MaxDecompressedSize plus that for a compressed batch.
func Decode(b []byte) (Batch, error) {
	h, err := Verify(b)
	if err != nil {
		return Batch{}, err
	}
	if len(b) != h.Size() {
		return Batch{}, fmt.Errorf("%w: batchLength says %d bytes, have %d", ErrBadLength, h.Size(), len(b))
	}
	codec := h.Codec()
	if !validCodec(codec) {
		return Batch{}, fmt.Errorf("%w: %v", ErrCodec, codec)
	}
	section, err := decompress(codec, b[HeaderSize:])
	if err != nil {
		return Batch{}, err
	}
	recs, err := decodeRecords(h, section)
	if err != nil {
		return Batch{}, err
	}
	return Batch{Header: h, Records: recs}, nil
}

// Records is Decode for callers that need only the records.
func Records(b []byte) ([]Record, error) {
	batch, err := Decode(b)
	return batch.Records, err
}

// decodeRecords decodes exactly h.RecordCount records that fill section.
func decodeRecords(h Header, section []byte) ([]Record, error) {
	if h.RecordCount == 0 {
		// walkRecords checks that the section is empty too.
		_, err := walkRecords(h, section, nil, false, nil)
		return nil, err
	}
	recs := make([]Record, min(int(h.RecordCount), len(section)/minRecordSize))
	if _, err := walkRecords(h, section, recs, false, nil); err != nil {
		return nil, err
	}
	return recs, nil
}

// walkRecords checks that section holds exactly h.RecordCount well-formed
// records with offset deltas strictly increasing within [0,
// h.LastOffsetDelta]. With recs non-nil (len h.RecordCount) it stores each
// record there; with recs nil it only checks, allocating nothing on the
// way (Validate). With produced set it also applies the timestamp rules of
// the produce path (see ValidateProduced). It returns the largest record
// timestamp, or -1 for no records.
//
// Decode and Validate share this one walk, so they accept exactly the
// same batches.
func walkRecords(h Header, section []byte, recs []Record, produced bool, rules *TopicRules) (maxTS int64, err error) {
	maxTS = -1
	count := int(h.RecordCount) // ParseHeader rejected negative counts
	if count > len(section)/minRecordSize {
		return -1, fmt.Errorf("%w: recordCount %d cannot fit in %d bytes", ErrCorrupt, count, len(section))
	}
	if count == 0 {
		if len(section) != 0 {
			return -1, fmt.Errorf("%w: recordCount 0 but %d bytes of records", ErrCorrupt, len(section))
		}
		return -1, nil
	}
	d := decoder{b: section}
	var slab []RecordHeader
	prevDelta := int32(-1)
	for i := range count {
		length := d.varint32("record length")
		if d.err != nil {
			return -1, fmt.Errorf("%w: record %d: %v", ErrCorrupt, i, d.err)
		}
		if length < minRecordSize-1 || int(length) > len(d.b)-d.pos {
			return -1, fmt.Errorf("%w: record %d: length %d with %d bytes left", ErrCorrupt, i, length, len(d.b)-d.pos)
		}
		// Decode the record from exactly its declared bytes, so a field
		// that runs long cannot borrow from the next record.
		rd := decoder{b: d.b[:d.pos+int(length)], pos: d.pos, slab: slab, left: count - i}
		r, delta, tsDelta := rd.record(h, recs != nil)
		slab = rd.slab
		if rd.err == nil && rd.pos != len(rd.b) {
			rd.err = fmt.Errorf("%d bytes past its fields", len(rd.b)-rd.pos)
		}
		if rd.err != nil {
			return -1, fmt.Errorf("%w: record %d: %v", ErrCorrupt, i, rd.err)
		}
		if delta <= prevDelta || delta > h.LastOffsetDelta {
			return -1, fmt.Errorf("%w: record %d: offsetDelta %d after %d, lastOffsetDelta %d",
				ErrCorrupt, i, delta, prevDelta, h.LastOffsetDelta)
		}
		if produced {
			// The timestamp must be a real time: not before 1970 and not
			// past int64 when the delta is added.
			if r.Timestamp < 0 || (tsDelta > 0) != (r.Timestamp > h.BaseTimestamp) {
				return -1, fmt.Errorf("%w: record %d: timestamp %d (base %d, delta %d)",
					ErrInvalidRecord, i, r.Timestamp, h.BaseTimestamp, tsDelta)
			}
			if rules != nil {
				if err := rules.check(i, r); err != nil {
					return -1, err
				}
			}
		}
		maxTS = max(maxTS, r.Timestamp)
		prevDelta = delta
		if recs != nil {
			recs[i] = r
		}
		d.pos = rd.pos
	}
	if d.pos != len(d.b) {
		return -1, fmt.Errorf("%w: %d bytes after record %d of %d", ErrCorrupt, len(d.b)-d.pos, count-1, count)
	}
	return maxTS, nil
}

// decoder reads the fields of a records section. The first error sticks
// in err and turns every later read into a no-op returning zero values, so
// field sequences read straight through and check once. Its errors name
// the field only; decodeRecords adds ErrCorrupt and the record index.
type decoder struct {
	b    []byte
	pos  int
	err  error
	slab []RecordHeader // spare headers, shared by the records of a batch
	left int            // records left in the batch, this one included; sizes slab
}

// record reads one record body (after its length) and returns it with its
// offset delta and timestamp delta. With keep false the headers are
// checked but not kept, so nothing is allocated.
func (d *decoder) record(h Header, keep bool) (r Record, offsetDelta int32, tsDelta int64) {
	d.byte() // attributes: unused in v2; ignored as Kafka does
	tsDelta = d.varint64("timestampDelta")
	offsetDelta = d.varint32("offsetDelta")
	r.Key = d.nullableBytes("key length")
	r.Value = d.nullableBytes("value length")
	n := d.varint32("header count")
	if d.err != nil {
		return Record{}, 0, 0
	}
	if n < 0 || int(n) > (len(d.b)-d.pos)/minHeaderSize {
		d.err = fmt.Errorf("header count %d with %d bytes left", n, len(d.b)-d.pos)
		return Record{}, 0, 0
	}
	if n > 0 {
		if keep {
			r.Headers = d.headers(int(n))
		}
		for i := range int(n) {
			key := d.nullableBytes("header key length")
			if d.err == nil && key == nil {
				d.err = fmt.Errorf("header %d: null key", i)
			}
			value := d.nullableBytes("header value length")
			if keep {
				r.Headers[i] = RecordHeader{Key: string(key), Value: value}
			}
		}
	}
	if d.err != nil {
		return Record{}, 0, 0
	}
	r.Offset = h.BaseOffset + int64(offsetDelta)
	r.Timestamp = h.BaseTimestamp + tsDelta
	return r, offsetDelta, tsDelta
}

// headers returns n zeroed headers carved from a slab, so a batch of
// records with headers costs a few allocations rather than one per record.
// Each record's slice is capped: appending to it cannot reach the next's.
func (d *decoder) headers(n int) []RecordHeader {
	if len(d.slab) < n {
		d.slab = make([]RecordHeader, max(n, min(d.left, 64)))
	}
	hs := d.slab[:n:n]
	d.slab = d.slab[n:]
	return hs
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.pos >= len(d.b) {
		d.err = errors.New("attributes past the end")
		return 0
	}
	c := d.b[d.pos]
	d.pos++
	return c
}

// varint32 reads a zig-zag varint of at most 5 bytes whose value fits in
// an int32, as Kafka's readVarint requires.
func (d *decoder) varint32(field string) int32 {
	if d.err != nil {
		return 0
	}
	var x uint32
	for i := 0; i < binary.MaxVarintLen32; i++ {
		if d.pos+i >= len(d.b) {
			d.err = fmt.Errorf("%s: varint past the end", field)
			return 0
		}
		c := d.b[d.pos+i]
		if i == binary.MaxVarintLen32-1 && c > 0x0f {
			break // more than 32 bits
		}
		x |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			d.pos += i + 1
			return int32(x>>1) ^ -int32(x&1)
		}
	}
	d.err = fmt.Errorf("%s: varint overflows 32 bits", field)
	return 0
}

// varint64 reads a zig-zag varint of at most 10 bytes (Kafka's varlong).
func (d *decoder) varint64(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.pos:])
	switch {
	case n == 0:
		d.err = fmt.Errorf("%s: varint past the end", field)
		return 0
	case n < 0:
		d.err = fmt.Errorf("%s: varint overflows 64 bits", field)
		return 0
	}
	d.pos += n
	return v
}

// nullableBytes reads a varint length and that many bytes; length -1 is
// nil. The result aliases the section, capped so appends cannot overwrite
// the bytes after it. field names the length in errors; callers pass a
// constant so the hot path does not build strings.
func (d *decoder) nullableBytes(field string) []byte {
	n := d.varint32(field)
	if d.err != nil {
		return nil
	}
	switch {
	case n == -1:
		return nil
	case n < -1:
		d.err = fmt.Errorf("%s %d", field, n)
		return nil
	case int(n) > len(d.b)-d.pos:
		d.err = fmt.Errorf("%s %d with %d bytes left", field, n, len(d.b)-d.pos)
		return nil
	}
	b := d.b[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return b
}
