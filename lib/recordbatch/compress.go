package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedSize is the largest records section, in bytes, that Decode
// inflates from a compressed batch and that Build writes (before any
// compression), so Strata never builds a batch it would refuse. A batch whose
// records inflate past it fails with ErrTooLarge before more than about
// that much memory is used, so a few kilobytes of hostile gzip or zstd
// cannot take a node down.
//
// 64 MiB sits well above anything a sane producer sends: Kafka's default
// max.message.bytes is about 1 MiB and fetch.max.bytes 50 MiB, and Strata
// keeps the same defaults. It is a constant rather than an option because
// the zstd decoder is shared by the whole process and sized once.
const MaxDecompressedSize = 64 << 20

// xerialMagic starts the framing that Java's snappy-java SnappyOutputStream
// writes, which is what the Java Kafka producer sends for snappy. After the
// 8 magic bytes come a 4-byte version and a 4-byte minimum compatible
// version, then chunks of a 4-byte big-endian length and one raw snappy
// block. Part of the format.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// xerialHeaderSize is the magic plus the two version fields.
const xerialHeaderSize = 16

// gzipWriters and lz4Writers keep compressors between batches: both carry
// tens of kilobytes of state that would otherwise be allocated per batch.
var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression) // the level is valid
		return w
	}}
	lz4Writers = sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// Independent 64 KiB blocks without a content checksum: the frame
		// Java's KafkaLZ4BlockOutputStream and librdkafka write. The batch
		// CRC already covers the compressed bytes.
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)) // the options are valid
		return w
	}}
	gzipReaders sync.Pool // *gzipReader
	lz4Readers  = sync.Pool{New: func() any {
		r := new(lz4Reader)
		r.zr = lz4.NewReader(&r.src)
		return r
	}}
)

// gzipReader and lz4Reader pair a pooled decompressor with the
// bytes.Reader it reads from, so a pooled decompressor holds no reference
// to the last batch once src is reset.
type (
	gzipReader struct {
		zr  *gzip.Reader
		src bytes.Reader
	}
	lz4Reader struct {
		zr  *lz4.Reader
		src bytes.Reader
	}
)

// zstd's Encoder and Decoder are safe for concurrent EncodeAll and
// DecodeAll and pool their own state, so one of each serves the process.
// They are built on first use so that programs that never see zstd do not
// pay for them.
var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdCodec() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		var err error
		zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			panic(fmt.Sprintf("recordbatch: zstd encoder: %v", err)) // constant options
		}
		zstdDec, err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxDecompressedSize),
			zstd.WithDecoderMaxWindow(MaxDecompressedSize),
		)
		if err != nil {
			panic(fmt.Sprintf("recordbatch: zstd decoder: %v", err)) // constant options
		}
	})
	return zstdEnc, zstdDec
}

// validCodec reports whether c is one of the five codecs of the format.
func validCodec(c Codec) bool { return c >= CodecNone && c <= CodecZstd }

// appendCompressed appends src compressed with codec to dst. Snappy is
// written as one raw block (as franz-go, sarama and librdkafka do; Java
// reads it), lz4 as an LZ4 frame, gzip and zstd as their standard streams.
func appendCompressed(dst []byte, codec Codec, src []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		out := appendWriter{dst}
		w.Reset(&out)
		if _, err := w.Write(src); err != nil {
			return nil, fmt.Errorf("recordbatch: gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("recordbatch: gzip: %w", err)
		}
		return out.b, nil
	case CodecSnappy:
		n := len(dst)
		dst = growLen(dst, s2.MaxEncodedLen(len(src)))
		enc := s2.EncodeSnappy(dst[n:], src)
		return dst[:n+len(enc)], nil
	case CodecLZ4:
		w := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(w)
		out := appendWriter{dst}
		w.Reset(&out)
		if _, err := w.Write(src); err != nil {
			return nil, fmt.Errorf("recordbatch: lz4: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("recordbatch: lz4: %w", err)
		}
		return out.b, nil
	case CodecZstd:
		enc, _ := zstdCodec()
		return enc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("%w: %v", ErrCodec, codec)
}

// decompress inflates the records section of a batch compressed with
// codec into a new buffer. The result never exceeds MaxDecompressedSize:
// past it decompress stops and returns ErrTooLarge. Malformed input returns
// ErrCorrupt and an unknown codec ErrCodec. For CodecNone src is returned
// as is.
func decompress(codec Codec, src []byte) ([]byte, error) { return decompressInto(nil, codec, src) }

// decompressInto is decompress writing into buf's storage when it has
// room (the result may still be a new slice when it does not), so a caller
// that only inspects the records can reuse one buffer across batches.
func decompressInto(buf []byte, codec Codec, src []byte) ([]byte, error) {
	if codec == CodecNone {
		return src, nil
	}
	if !validCodec(codec) {
		return nil, fmt.Errorf("%w: %v", ErrCodec, codec)
	}
	// Every codec's empty output still has a frame or a length; zero
	// bytes is not a valid stream in any of them.
	if len(src) == 0 {
		return nil, fmt.Errorf("%w: empty %v records section", ErrCorrupt, codec)
	}
	var (
		out []byte
		err error
	)
	switch codec {
	case CodecGzip:
		out, err = decodeGzip(buf[:0], src)
	case CodecSnappy:
		out, err = decodeSnappy(buf[:0], src)
	case CodecLZ4:
		out, err = decodeLZ4(buf[:0], src)
	case CodecZstd:
		_, dec := zstdCodec()
		out, err = dec.DecodeAll(src, buf[:0])
		// ErrWindowSizeExceeded is not mapped here: the decoder also uses it
		// for blocks that overrun their window, which is corruption; a
		// frame declaring a window over the cap lands in ErrCorrupt too.
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, fmt.Errorf("%w: zstd: more than %d bytes", ErrTooLarge, MaxDecompressedSize)
		}
		if err == nil && len(out) > MaxDecompressedSize {
			return nil, fmt.Errorf("%w: zstd: %d bytes, limit %d", ErrTooLarge, len(out), MaxDecompressedSize)
		}
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		// Libraries prefix their own name, as in "gzip: invalid header";
		// say the codec once.
		msg := strings.TrimPrefix(err.Error(), codec.String()+": ")
		return nil, fmt.Errorf("%w: %v: %s", ErrCorrupt, codec, msg)
	}
	return out, nil
}

func decodeGzip(dst, src []byte) ([]byte, error) {
	r, _ := gzipReaders.Get().(*gzipReader)
	if r == nil {
		r = new(gzipReader)
	}
	defer func() {
		r.src.Reset(nil)
		gzipReaders.Put(r)
	}()
	r.src.Reset(src)
	if r.zr == nil {
		zr, err := gzip.NewReader(&r.src)
		if err != nil {
			return nil, err
		}
		r.zr = zr
	} else if err := r.zr.Reset(&r.src); err != nil {
		return nil, err
	}
	return readLimited(dst, r.zr, 4*len(src))
}

func decodeLZ4(dst, src []byte) ([]byte, error) {
	r := lz4Readers.Get().(*lz4Reader)
	defer func() {
		r.src.Reset(nil)
		lz4Readers.Put(r)
	}()
	r.src.Reset(src)
	r.zr.Reset(&r.src)
	return readLimited(dst, r.zr, 4*len(src))
}

// decodeSnappy decodes a raw snappy block or, when src starts with
// xerialMagic, the chunked framing of snappy-java, appending to dst (which
// must be empty). Blocks are decoded strictly as standard snappy: S2's
// extensions are refused, since no Kafka client could read them.
func decodeSnappy(dst, src []byte) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return appendSnappyBlock(dst, src)
	}
	if len(src) < xerialHeaderSize {
		return nil, fmt.Errorf("xerial header: %d bytes, need %d", len(src), xerialHeaderSize)
	}
	out := dst
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("xerial chunk length: %d bytes left, need 4", len(rest))
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("xerial chunk of %d bytes, %d left", n, len(rest))
		}
		var err error
		if out, err = appendSnappyBlock(out, rest[:n]); err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	return out, nil
}

// appendSnappyBlock decodes one raw snappy block onto dst. The block states
// its decoded length up front, so the limit is checked before allocating.
func appendSnappyBlock(dst, block []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if n > MaxDecompressedSize-len(dst) {
		return nil, fmt.Errorf("%w: snappy: more than %d bytes", ErrTooLarge, MaxDecompressedSize)
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	got, err := snappy.DecodeStrict(dst[start:], block)
	if err != nil {
		return nil, err
	}
	if len(got) != n || (n > 0 && &got[0] != &dst[start]) {
		return nil, errors.New("snappy: decoded length mismatch")
	}
	return dst, nil
}

// readLimited reads r to EOF, appending to dst (which must be empty),
// failing with ErrTooLarge once more than MaxDecompressedSize bytes come
// out. When dst has no capacity, hint sizes the first allocation; growth
// doubles and never allocates much past the limit.
func readLimited(dst []byte, r io.Reader, hint int) ([]byte, error) {
	buf := dst
	if cap(buf) == 0 {
		buf = make([]byte, 0, min(max(hint, 512), MaxDecompressedSize+1))
	}
	for {
		if len(buf) == cap(buf) {
			if len(buf) > MaxDecompressedSize {
				return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxDecompressedSize)
			}
			grown := make([]byte, len(buf), min(2*cap(buf), MaxDecompressedSize+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxDecompressedSize {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxDecompressedSize)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// growLen extends b by n bytes, reallocating when its capacity is short.
// The new bytes are not cleared.
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		grown := make([]byte, len(b), len(b)+n)
		copy(grown, b)
		b = grown
	}
	return b[:len(b)+n]
}

// appendWriter is an io.Writer that appends to a slice, so compressors can
// write straight after the batch header without an extra copy.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}
