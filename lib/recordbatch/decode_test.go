package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

func TestRoundTrip(t *testing.T) {
	sets := []struct {
		name    string
		records []Record
	}{
		{"one", []Record{{Key: []byte("k"), Value: []byte("v"), Timestamp: 42}}},
		{"shapes", sampleRecords()},
		{"many", manyRecords(2000)},
		{"null key tombstone", []Record{{Key: nil, Value: nil, Timestamp: -5}}},
	}
	optsets := []BuildOptions{
		{},
		{Idempotent: true, ProducerID: 7, ProducerEpoch: 3, BaseSequence: 1000, LogAppendTime: true},
	}
	for _, codec := range allCodecs {
		for _, set := range sets {
			for _, opts := range optsets {
				opts.Codec = codec
				t.Run(codec.String()+"/"+set.name, func(t *testing.T) {
					b := mustBuild(t, opts, set.records)
					want := make([]Record, len(set.records))
					copy(want, set.records)
					for i := range want {
						want[i].Offset = int64(i)
					}
					got, err := Decode(b)
					if err != nil {
						t.Fatalf("Decode: %v", err)
					}
					if err := equalRecords(got.Records, want, true); err != nil {
						t.Fatal(err)
					}
					h := got.Header
					maxTS := want[0].Timestamp
					for _, r := range want {
						maxTS = max(maxTS, r.Timestamp)
					}
					wantPID, wantEpoch, wantSeq := int64(-1), int16(-1), int32(-1)
					if opts.Idempotent {
						wantPID, wantEpoch, wantSeq = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
					}
					switch {
					case h.Codec() != codec, h.LogAppendTime() != opts.LogAppendTime,
						h.BaseOffset != 0, h.PartitionLeaderEpoch != -1,
						int(h.RecordCount) != len(want), int(h.LastOffsetDelta) != len(want)-1,
						h.BaseTimestamp != want[0].Timestamp, h.MaxTimestamp != maxTS,
						h.ProducerID != wantPID, h.ProducerEpoch != wantEpoch, h.BaseSequence != wantSeq:
						t.Fatalf("header %+v", h)
					}

					// The leader stamps offset and epoch in place; the CRC
					// must still hold and offsets must follow.
					SetBaseOffset(b, 1<<40)
					SetPartitionLeaderEpoch(b, 9)
					got, err = Decode(b)
					if err != nil {
						t.Fatalf("Decode after stamping: %v", err)
					}
					for i := range want {
						want[i].Offset += 1 << 40
					}
					if err := equalRecords(got.Records, want, true); err != nil {
						t.Fatal(err)
					}
					if got.Header.PartitionLeaderEpoch != 9 {
						t.Fatalf("leader epoch %d", got.Header.PartitionLeaderEpoch)
					}
				})
			}
		}
	}
}

// TestDecodedSlicesAreCapped checks that appending to a decoded key cannot
// overwrite the value stored after it in the batch.
func TestDecodedSlicesAreCapped(t *testing.T) {
	b := mustBuild(t, BuildOptions{}, []Record{{Key: []byte("k"), Value: []byte("value"), Timestamp: 1}})
	recs, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(recs[0].Key, "XXXXXXXX"...)
	if _, err := Verify(b); err != nil {
		t.Fatalf("append to a decoded key changed the batch: %v", err)
	}
}

func TestXerialSnappy(t *testing.T) {
	recs := manyRecords(300)
	body := mustBuild(t, BuildOptions{}, recs)[HeaderSize:]
	// Chunk the way snappy-java does, with a small chunk size so there are
	// many chunks and some records straddle them.
	framed := append([]byte(nil), xerialMagic...)
	framed = binary.BigEndian.AppendUint32(framed, 1) // version
	framed = binary.BigEndian.AppendUint32(framed, 1) // minimum compatible version
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 1000)
		block := snappy.Encode(nil, rest[:n])
		framed = binary.BigEndian.AppendUint32(framed, uint32(len(block)))
		framed = append(framed, block...)
		rest = rest[n:]
	}
	b := craft(CodecSnappy, int32(len(recs)), int32(len(recs)-1), framed)
	got, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	base := recs[0].Timestamp
	for i := range recs {
		recs[i].Offset = int64(i)
		recs[i].Timestamp -= base // craft's base timestamp is 0
	}
	if err := equalRecords(got, recs, true); err != nil {
		t.Fatal(err)
	}

	// A stream with the header and no chunks is empty.
	if _, err := Records(craft(CodecSnappy, 0, 0, framed[:xerialHeaderSize])); err != nil {
		t.Fatalf("empty xerial stream: %v", err)
	}
}

// TestErrors feeds crafted bad input and checks that each failure wraps the
// sentinel that names it.
func TestErrors(t *testing.T) {
	valid := mustBuild(t, BuildOptions{}, sampleRecords())
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	oneRec := rec(simpleBody(0))
	twoRecs := cat(rec(simpleBody(0)), rec(simpleBody(1)))
	gzipOf := func(section []byte) []byte {
		b, err := appendCompressed(nil, CodecGzip, section)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		batch []byte
		want  error
	}{
		{"empty input", nil, ErrShortBatch},
		{"shorter than length prefix", valid[:LengthPrefixSize-1], ErrShortBatch},
		{"truncated", valid[:len(valid)-1], ErrShortBatch},
		{"truncated header", valid[:HeaderSize-1], ErrShortBatch},
		{"batchLength too small", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offBatchLength:], 10)
			return b
		}), ErrBadLength},
		{"batchLength negative", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offBatchLength:], 0x80000000)
			return b
		}), ErrBadLength},
		{"bytes after the batch", append(bytes.Clone(valid), 0), ErrBadLength},
		{"magic 1", mod(func(b []byte) []byte { b[offMagic] = 1; return b }), ErrBadMagic},
		{"magic 3", mod(func(b []byte) []byte { b[offMagic] = 3; return fixCRC(b) }), ErrBadMagic},
		{"crc flipped", mod(func(b []byte) []byte { b[offCRC] ^= 1; return b }), ErrCRC},
		{"payload flipped", mod(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), ErrCRC},
		{"attributes flipped", mod(func(b []byte) []byte { b[offAttributes+1] ^= 0x10; return b }), ErrCRC},
		{"codec 5", craft(5, 1, 0, oneRec), ErrCodec},
		{"codec 7", craft(7, 1, 0, oneRec), ErrCodec},
		{"negative recordCount", craft(CodecNone, -1, 0, oneRec), ErrCorrupt},
		{"negative lastOffsetDelta", craft(CodecNone, 1, -1, oneRec), ErrCorrupt},
		{"recordCount 2^31-1", craft(CodecNone, math.MaxInt32, math.MaxInt32, oneRec), ErrCorrupt},
		{"more records declared than present", craft(CodecNone, 3, 2, twoRecs), ErrCorrupt},
		{"fewer records declared than present", craft(CodecNone, 1, 1, twoRecs), ErrCorrupt},
		{"no records declared, bytes present", craft(CodecNone, 0, 0, oneRec), ErrCorrupt},
		{"trailing garbage", craft(CodecNone, 2, 1, cat(twoRecs, []byte{0, 0, 0, 0, 0, 0, 0})), ErrCorrupt},
		{"record length past the end", craft(CodecNone, 1, 0, cat(vi(100), simpleBody(0))), ErrCorrupt},
		{"record length negative", craft(CodecNone, 1, 0, cat(vi(-3), simpleBody(0), []byte{0, 0})), ErrCorrupt},
		{"record length too short for its fields", craft(CodecNone, 1, 0,
			cat(vi(int64(len(simpleBody(0))-1)), simpleBody(0))), ErrCorrupt},
		{"record length longer than its fields", craft(CodecNone, 1, 0,
			cat(vi(int64(len(simpleBody(0))+1)), simpleBody(0), []byte{0})), ErrCorrupt},
		{"record length varint overflow", craft(CodecNone, 1, 0,
			cat([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}, simpleBody(0))), ErrCorrupt},
		{"varint of 6 bytes", craft(CodecNone, 1, 0,
			cat([]byte{0x8e, 0x80, 0x80, 0x80, 0x80, 0x00}, simpleBody(0))), ErrCorrupt},
		{"timestamp varlong overflow", craft(CodecNone, 1, 0, rec([]byte{0},
			bytes.Repeat([]byte{0xff}, 10), []byte{0x01}, vi(0), vi(-1), vi(-1), vi(0))), ErrCorrupt},
		{"key length -2", craft(CodecNone, 1, 0, rec([]byte{0}, vi(0), vi(0), vi(-2), vi(-1), vi(0))), ErrCorrupt},
		{"key length past the record", craft(CodecNone, 1, 0, rec([]byte{0}, vi(0), vi(0), vi(50), vi(-1), vi(0))), ErrCorrupt},
		{"value length -7", craft(CodecNone, 1, 0, rec([]byte{0}, vi(0), vi(0), vi(-1), vi(-7), vi(0))), ErrCorrupt},
		{"value length past the record", craft(CodecNone, 1, 0,
			rec([]byte{0}, vi(0), vi(0), vi(-1), vi(3), []byte("ab"))), ErrCorrupt},
		{"header count negative", craft(CodecNone, 1, 0, rec([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(-1))), ErrCorrupt},
		{"header count huge", craft(CodecNone, 1, 0,
			rec([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(math.MaxInt32), vi(0), vi(0))), ErrCorrupt},
		{"header key null", craft(CodecNone, 1, 0,
			rec([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(1), vi(-1), vi(-1))), ErrCorrupt},
		{"header value past the record", craft(CodecNone, 1, 0,
			rec([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(1), vi(1), []byte("h"), vi(9))), ErrCorrupt},
		{"offsetDelta repeated", craft(CodecNone, 2, 1, cat(rec(simpleBody(0)), rec(simpleBody(0)))), ErrCorrupt},
		{"offsetDelta decreasing", craft(CodecNone, 2, 5, cat(rec(simpleBody(3)), rec(simpleBody(2)))), ErrCorrupt},
		{"offsetDelta negative", craft(CodecNone, 1, 0, rec(simpleBody(-1))), ErrCorrupt},
		{"offsetDelta past lastOffsetDelta", craft(CodecNone, 2, 1, cat(rec(simpleBody(0)), rec(simpleBody(2)))), ErrCorrupt},
		{"empty gzip section", craft(CodecGzip, 0, 0, nil), ErrCorrupt},
		{"gzip garbage", craft(CodecGzip, 1, 0, []byte("not gzip at all")), ErrCorrupt},
		{"gzip truncated", craft(CodecGzip, 1, 0, gzipOf(oneRec)[:12]), ErrCorrupt},
		{"gzip then garbage", craft(CodecGzip, 1, 0, cat(gzipOf(oneRec), []byte("junk"))), ErrCorrupt},
		{"gzip holding a bad record", craft(CodecGzip, 1, 0, gzipOf(cat(vi(100), simpleBody(0)))), ErrCorrupt},
		{"snappy garbage", craft(CodecSnappy, 1, 0, []byte{0x05, 0xff, 0xff}), ErrCorrupt},
		{"snappy s2 extension", craft(CodecSnappy, 1, 0, s2RepeatBlock(t)), ErrCorrupt},
		{"xerial header cut", craft(CodecSnappy, 1, 0, xerialMagic), ErrCorrupt},
		{"xerial chunk length cut", craft(CodecSnappy, 1, 0, cat(xerialMagic, make([]byte, 8), []byte{0, 0})), ErrCorrupt},
		{"xerial chunk past the end", craft(CodecSnappy, 1, 0, cat(xerialMagic, make([]byte, 8), []byte{0, 0, 1, 0}, []byte{1})), ErrCorrupt},
		{"lz4 garbage", craft(CodecLZ4, 1, 0, []byte("not an lz4 frame")), ErrCorrupt},
		{"lz4 truncated", mod(func([]byte) []byte {
			s := mustBuild(t, BuildOptions{Codec: CodecLZ4}, sampleRecords())[HeaderSize:]
			return craft(CodecLZ4, 6, 5, s[:len(s)-5])
		}), ErrCorrupt},
		{"zstd garbage", craft(CodecZstd, 1, 0, []byte("not a zstd frame")), ErrCorrupt},
		{"zstd truncated", mod(func([]byte) []byte {
			s := mustBuild(t, BuildOptions{Codec: CodecZstd}, sampleRecords())[HeaderSize:]
			return craft(CodecZstd, 6, 5, s[:len(s)-3])
		}), ErrCorrupt},
		{"snappy claims 4 GiB", craft(CodecSnappy, 1, 0, cat(binary.AppendUvarint(nil, math.MaxUint32), []byte{0})), ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.batch)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode: %v, want %v", err, tt.want)
			}
			t.Log(err)
			if _, err := Validate(tt.batch); !errors.Is(err, tt.want) {
				t.Fatalf("Validate: %v, want %v", err, tt.want)
			}
			if _, err := ValidateProduced(tt.batch); !errors.Is(err, tt.want) {
				t.Fatalf("ValidateProduced: %v, want %v", err, tt.want)
			}
		})
	}
}

// s2RepeatBlock returns a block that S2 decodes but standard snappy does
// not: S2's repeat-offset copy (offset 0).
func s2RepeatBlock(t *testing.T) []byte {
	t.Helper()
	data := bytes.Repeat([]byte("abcdefgh12345678"), 64)
	data = append(data, bytes.Repeat([]byte("zyxwvuts"), 64)...)
	block := s2.Encode(nil, data)
	if _, err := s2.Decode(nil, block); err != nil {
		t.Fatalf("s2 cannot read its own block: %v", err)
	}
	if _, err := snappy.DecodeStrict(nil, block); err == nil {
		t.Skip("this s2 version wrote a plain snappy block; nothing to test")
	}
	return block
}

// TestHugeRecordCountDoesNotAllocate checks that a forged recordCount is
// rejected before it sizes an allocation.
func TestHugeRecordCountDoesNotAllocate(t *testing.T) {
	b := craft(CodecNone, math.MaxInt32, math.MaxInt32, rec(simpleBody(0)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode: %v", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("Decode allocated %d bytes for a 1-record batch", grew)
	}
}

// TestDecompressionBomb checks that each codec stops at MaxDecompressedSize
// with ErrTooLarge, and that exactly the limit still decodes.
func TestDecompressionBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses 64 MiB per codec")
	}
	zeros := make([]byte, MaxDecompressedSize+1)
	for _, codec := range allCodecs[1:] {
		t.Run(codec.String(), func(t *testing.T) {
			section, err := appendCompressed(nil, codec, zeros)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Decode(craft(codec, 1, 0, section)); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Decode of %d bytes inflating to %d: %v", len(section), len(zeros), err)
			}
			section, err = appendCompressed(nil, codec, zeros[:MaxDecompressedSize])
			if err != nil {
				t.Fatal(err)
			}
			// Exactly the limit inflates; the zeros are then not records.
			if _, err := Decode(craft(codec, 1, 0, section)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode at the limit: %v, want ErrCorrupt from the records", err)
			}
		})
	}
	t.Run("xerial chunks", func(t *testing.T) {
		block := snappy.Encode(nil, zeros[:MaxDecompressedSize/2+1])
		framed := cat(xerialMagic, make([]byte, 8))
		for range 2 {
			framed = binary.BigEndian.AppendUint32(framed, uint32(len(block)))
			framed = append(framed, block...)
		}
		if _, err := Decode(craft(CodecSnappy, 1, 0, framed)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Decode: %v", err)
		}
	})
}

func TestBuildErrors(t *testing.T) {
	one := []Record{{Value: []byte("v")}}
	if _, err := Build(BuildOptions{}, nil); err == nil {
		t.Error("Build with no records succeeded")
	}
	for _, c := range []Codec{-1, 5, 7, 8} {
		if _, err := Build(BuildOptions{Codec: c}, one); !errors.Is(err, ErrCodec) {
			t.Errorf("Build with codec %v: %v", c, err)
		}
	}
	big := []Record{{Value: make([]byte, MaxDecompressedSize)}}
	if _, err := Build(BuildOptions{Codec: CodecZstd}, big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Build over MaxDecompressedSize: %v", err)
	}
}

func TestIterOverBuiltBatches(t *testing.T) {
	var buf []byte
	for _, codec := range allCodecs {
		b := mustBuild(t, BuildOptions{Codec: codec}, sampleRecords())
		SetBaseOffset(b, int64(len(buf)))
		buf = append(buf, b...)
	}
	it := NewIter(buf, true)
	n := 0
	for h, batch, ok := it.Next(); ok; h, batch, ok = it.Next() {
		if h.Codec() != allCodecs[n] {
			t.Fatalf("batch %d codec %v", n, h.Codec())
		}
		if _, err := Decode(batch); err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		n++
	}
	if it.Err() != nil || n != len(allCodecs) {
		t.Fatalf("%d batches, err %v", n, it.Err())
	}
}
