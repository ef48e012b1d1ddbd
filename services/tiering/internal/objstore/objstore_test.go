package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/services/tiering/internal/embeds3"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
)

// openEmbedded starts the embedded gofakes3 server on loopback and opens a
// bucket on it through the S3 client, over real HTTP.
func openEmbedded(t *testing.T) *objstore.S3 {
	t.Helper()
	srv, err := embeds3.Start("127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := objstore.OpenS3(ctx, objstore.S3Config{
		Endpoint: srv.URL(), Bucket: "conformance", AccessKey: "k", SecretKey: "s", PathStyle: true,
		CreateBucket: true, PartSize: 5 << 20, MultipartThreshold: 6 << 20, MaxAttempts: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs the Bucket contract against the S3 implementation
// on the embedded server.
func TestConformance(t *testing.T) {
	b := openEmbedded(t)
	ctx := context.Background()
	rnd := func(n int) []byte {
		p := make([]byte, n)
		rand.Read(p)
		return p
	}

	t.Run("UploadIsIdempotent", func(t *testing.T) {
		data := rnd(1000)
		for range 2 {
			if err := b.Upload(ctx, "a/one", bytes.NewReader(data), int64(len(data))); err != nil {
				t.Fatal(err)
			}
		}
		got, err := objstore.ReadAll(ctx, b, "a/one", 0, -1)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back: %v, equal=%v", err, bytes.Equal(got, data))
		}
	})
	t.Run("UploadUnknownSize", func(t *testing.T) {
		data := rnd(300)
		if err := b.Upload(ctx, "a/stream", io.MultiReader(bytes.NewReader(data)), -1); err != nil {
			t.Fatal(err)
		}
		got, _ := objstore.ReadAll(ctx, b, "a/stream", 0, -1)
		if !bytes.Equal(got, data) {
			t.Fatal("mismatch")
		}
	})
	t.Run("Multipart", func(t *testing.T) {
		data := rnd(13 << 20) // three parts of 5 MiB, the last short
		if err := b.Upload(ctx, "big/obj", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		got, err := objstore.ReadAll(ctx, b, "big/obj", 0, -1)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("multipart read back: %v equal=%v len=%d", err, bytes.Equal(got, data), len(got))
		}
		part, err := objstore.ReadAll(ctx, b, "big/obj", 5<<20-10, 20)
		if err != nil || !bytes.Equal(part, data[5<<20-10:5<<20+10]) {
			t.Fatalf("range across parts: %v", err)
		}
	})
	t.Run("GetRange", func(t *testing.T) {
		data := rnd(4096)
		if err := b.Upload(ctx, "r/obj", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ off, n int64 }{{0, 1}, {100, 200}, {4000, -1}, {4000, 500}, {0, 4096}} {
			got, err := objstore.ReadAll(ctx, b, "r/obj", tc.off, tc.n)
			if err != nil {
				t.Fatalf("%v: %v", tc, err)
			}
			end := int64(len(data))
			if tc.n >= 0 {
				end = min(end, tc.off+tc.n)
			}
			if !bytes.Equal(got, data[tc.off:end]) {
				t.Fatalf("%v: got %d bytes", tc, len(got))
			}
		}
		if _, err := b.GetRange(ctx, "r/missing", 0, 10); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
	})
	t.Run("ExistsDelete", func(t *testing.T) {
		if err := b.Upload(ctx, "d/obj", strings.NewReader("x"), 1); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.Exists(ctx, "d/obj"); !ok || err != nil {
			t.Fatalf("exists: %v %v", ok, err)
		}
		for range 2 { // Delete is idempotent
			if err := b.Delete(ctx, "d/obj"); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := b.Exists(ctx, "d/obj"); ok || err != nil {
			t.Fatalf("exists after delete: %v %v", ok, err)
		}
	})
	t.Run("List", func(t *testing.T) {
		for _, k := range []string{"l/p/3", "l/p/1", "l/p/2", "l/q/1"} {
			if err := b.Upload(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
				t.Fatal(err)
			}
		}
		var keys []string
		if err := b.List(ctx, "l/p/", func(o objstore.ObjectInfo) error {
			keys = append(keys, o.Key)
			if o.Size != int64(len(o.Key)) {
				t.Errorf("%s size %d", o.Key, o.Size)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(keys, ",") != "l/p/1,l/p/2,l/p/3" {
			t.Fatalf("list: %v", keys)
		}
	})
	t.Run("PutIf", func(t *testing.T) {
		e1, err := b.PutIf(ctx, "m/manifest", []byte("v1"), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PutIf(ctx, "m/manifest", []byte("v1b"), ""); !errors.Is(err, objstore.ErrPrecondition) {
			t.Fatalf("create over existing: %v", err)
		}
		e2, err := b.PutIf(ctx, "m/manifest", []byte("v2"), e1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PutIf(ctx, "m/manifest", []byte("v3"), e1); !errors.Is(err, objstore.ErrPrecondition) {
			t.Fatalf("stale etag: %v", err)
		}
		data, etag, err := b.Get(ctx, "m/manifest")
		if err != nil || string(data) != "v2" || etag != e2 {
			t.Fatalf("get: %q %q %v (want etag %q)", data, etag, err, e2)
		}
	})
}
