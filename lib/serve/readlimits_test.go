package serve

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestReadLimits sends Connect unary requests to a handler built with
// ReadLimitsOption behind limitUnaryBody, as every service's are: a gzip
// bomb stops decompressing at MaxGzipRequestBytes and an oversized message
// is refused, both RESOURCE_EXHAUSTED without the handler running; an
// ordinary gzip request is served.
func TestReadLimits(t *testing.T) {
	const proc = "/strata.test.v1.EchoService/Echo"
	var calls atomic.Int32
	h := limitUnaryBody(connect.NewUnaryHandler(proc,
		func(_ context.Context, req *connect.Request[wrapperspb.BytesValue]) (*connect.Response[wrapperspb.Int64Value], error) {
			calls.Add(1)
			return connect.NewResponse(wrapperspb.Int64(int64(len(req.Msg.Value)))), nil
		}, ReadLimitsOption()))
	send := func(body []byte, gz bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, proc, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/proto")
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	sendStream := func(body io.Reader, size int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, proc, body)
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/proto")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	message := func(n int) []byte {
		b, err := proto.Marshal(wrapperspb.Bytes(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	gzipped := func(b []byte, copies int) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		return bytes.Repeat(buf.Bytes(), copies)
	}
	refused := func(t *testing.T, rec *httptest.ResponseRecorder, why string) {
		t.Helper()
		if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "resource_exhausted") || !strings.Contains(rec.Body.String(), why) {
			t.Fatalf("HTTP %d %s; want 429 resource_exhausted (%s)", rec.Code, rec.Body.String(), why)
		}
	}

	t.Run("a gzip request is served", func(t *testing.T) {
		calls.Store(0)
		rec := send(gzipped(message(1<<20), 1), true)
		if rec.Code != http.StatusOK || calls.Load() != 1 {
			t.Fatalf("HTTP %d %s, %d calls", rec.Code, rec.Body.String(), calls.Load())
		}
	})
	t.Run("a 1 GiB gzip bomb stops at the bound", func(t *testing.T) {
		calls.Store(0)
		// 64 gzip members of 16 MiB of zeros, read as one stream.
		rec := send(gzipped(make([]byte, 16<<20), 64), true)
		refused(t, rec, "decompresses to more than 8388608 bytes")
		if calls.Load() != 0 {
			t.Fatal("the handler ran")
		}
	})
	t.Run("just over the gzip bound", func(t *testing.T) {
		rec := send(gzipped(message(MaxGzipRequestBytes), 1), true)
		refused(t, rec, "decompresses to more than")
	})
	t.Run("an uncompressed message over the read bound", func(t *testing.T) {
		calls.Store(0)
		// Streamed, not built: a 101 MiB message made in memory first
		// costs the race detector seconds per copy.
		rec := sendStream(hugeMessage(MaxRequestMessageBytes))
		refused(t, rec, "larger than configured max")
		if calls.Load() != 0 {
			t.Fatal("the handler ran")
		}
	})
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// hugeMessage is the wire form of a BytesValue of n zero bytes, read as a
// stream, and its size: field 1's tag and length, then the bytes.
func hugeMessage(n int) (io.Reader, int64) {
	head := protowire.AppendTag(nil, 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	return io.MultiReader(bytes.NewReader(head), io.LimitReader(zeros{}, int64(n))), int64(len(head) + n)
}
