// Package objstore is the object-store interface tiering writes the bucket
// through, in the style of thanos objstore: a small interface whose comments
// state the contract, one S3 implementation (aws-sdk-go-v2, so AWS S3, MinIO,
// R2, Ceph and the embedded gofakes3 server all take the same code path), and
// wrappers for tests.
//
// Keys are slash-separated and relative to the bucket. Objects are immutable
// once written except where a caller replaces one whole with PutIf (the
// manifest); an object is visible to readers only once complete, as S3
// guarantees, so a reader never sees part of an upload.
package objstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors returned by every Bucket implementation. Wrapped errors keep the
// cause; test with errors.Is.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrPrecondition: a PutIf condition failed (the object changed or
	// exists when it should not).
	ErrPrecondition = errors.New("objstore: precondition failed")
)

// ObjectInfo describes one listed object.
type ObjectInfo struct {
	Key          string    // key relative to the bucket
	Size         int64     // bytes
	LastModified time.Time // as the store reports it; zero when unknown
}

// Bucket is an object-store bucket. Every method is safe for concurrent use
// and honours ctx cancellation.
type Bucket interface {
	// Upload writes the object at key from r, which yields exactly size
	// bytes (size < 0: unknown). Upload is idempotent: uploading the same
	// bytes to the same key again succeeds and leaves the same object. The
	// object becomes visible only once every byte is stored; a failed or
	// cancelled Upload leaves either no object or the one that was there
	// before, never a partial one. When r is an io.ReaderAt with a known
	// size, large objects go as a multipart upload whose parts are retried
	// on their own.
	Upload(ctx context.Context, key string, r io.Reader, size int64) error

	// GetRange returns length bytes of the object at key starting at off;
	// length < 0 reads to the end. Reading past the end returns what exists.
	// ErrNotFound when the object does not exist. The caller closes the
	// reader.
	GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)

	// Get returns the whole object and its entity tag, for small objects
	// that are replaced whole (the manifest). ErrNotFound when missing.
	Get(ctx context.Context, key string) (data []byte, etag string, err error)

	// PutIf writes data at key only if the object's current entity tag is
	// ifMatch, or, when ifMatch is empty, only if no object exists at key.
	// It returns the new entity tag. ErrPrecondition when the condition
	// fails, so concurrent writers cannot lose each other's updates.
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (etag string, err error)

	// Delete removes the object at key. Deleting a missing object is not
	// an error, so Delete is idempotent.
	Delete(ctx context.Context, key string) error

	// List calls fn for every object whose key starts with prefix, in key
	// order. An error from fn stops the listing and is returned.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error

	// Exists reports whether an object exists at key.
	Exists(ctx context.Context, key string) (bool, error)
}

// ReadAll reads a range fully with GetRange.
func ReadAll(ctx context.Context, b Bucket, key string, off, length int64) ([]byte, error) {
	rc, err := b.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
