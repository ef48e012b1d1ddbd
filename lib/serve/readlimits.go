package serve

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Bounds on what one Connect request may make a process read and hold,
// whoever sends it: they apply before the handler, and so before its ACL
// check, so they are what a caller with no grants can cost.
const (
	// MaxRequestMessageBytes is the largest request message a handler
	// reads: Kafka's socket.request.max.bytes (100 MiB), the largest
	// produce a Kafka listener forwards to a storage node in one
	// ProducePartitions call, plus 1 MiB for the message's own fields.
	// Kafka's max.message.bytes batches fit many times over.
	MaxRequestMessageBytes = 100<<20 + 1<<20
	// MaxGzipRequestBytes is the largest a gzip-compressed request message
	// may decompress to. Strata's own clients never compress requests
	// (batches are compressed by the producer's codec), so the bound
	// only has to fit an outside Connect client's admin calls and
	// produces of max.message.bytes (1 MiB by default) batches; it is what
	// a gzip bomb can make the process hold.
	MaxGzipRequestBytes = 8 << 20
)

// ReadLimitsOption bounds a handler's request messages: at most
// MaxRequestMessageBytes each, and MaxGzipRequestBytes once a gzip
// message is decompressed (connect-go's own bound on decompression is
// the read limit, and it decompresses the rest of an oversized message to
// count it; this one stops at the bound). Every service's handlers take
// it, through [Process.HandlerOption].
func ReadLimitsOption() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithReadMaxBytes(MaxRequestMessageBytes),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzipReader{} },
			func() connect.Compressor { return gzip.NewWriter(nil) }),
	)
}

// HandlerOption is what every generated New...Handler of the process
// takes: the instrumentation and request quota of
// [Process.ConnectOption], the read bounds of [ReadLimitsOption], and the
// bounds on each user's open streams and long polls (concurrency.go).
func (p *Process) HandlerOption() connect.HandlerOption {
	return connect.WithHandlerOptions(p.ConnectOption(), ReadLimitsOption(), connect.WithInterceptors(p.limits))
}

// boundedGzipReader is a gzip decompressor that fails, with
// RESOURCE_EXHAUSTED, once it has produced more than
// MaxGzipRequestBytes. Connect pools it: one request uses it at a time.
type boundedGzipReader struct {
	gz   gzip.Reader
	left int64
}

func (d *boundedGzipReader) Reset(r io.Reader) error {
	d.left = MaxGzipRequestBytes
	return d.gz.Reset(r)
}

func (d *boundedGzipReader) Read(p []byte) (int, error) {
	if int64(len(p)) > d.left+1 {
		p = p[:d.left+1]
	}
	n, err := d.gz.Read(p)
	if d.left -= int64(n); d.left < 0 {
		return 0, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("serve: a gzip request decompresses to more than %d bytes", MaxGzipRequestBytes))
	}
	return n, err
}

func (d *boundedGzipReader) Close() error { return d.gz.Close() }

// limitUnaryBody caps the body of a Connect unary request (the message
// itself, compressed or not) one byte over MaxRequestMessageBytes, so
// that connect-go, which reads an oversized message to its end to keep
// the connection, stops there instead. Streams (envelopes, whose size
// prefixes connect-go checks first) are left alone.
func limitUnaryBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.Body != nil && (strings.HasPrefix(ct, "application/proto") || strings.HasPrefix(ct, "application/json")) {
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestMessageBytes+1)
		}
		h.ServeHTTP(w, r)
	})
}
