// Package s3test gives tests a bucket on a real S3 API: the embedded
// S3-compatible server on a loopback port and a temporary directory, opened
// through objstore's S3 client, so tests run the code path production runs.
package s3test

import (
	"context"
	"testing"

	"github.com/strata-mq/strata/services/tiering/internal/embeds3"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
)

// Bucket starts an embedded S3 server for the test and returns its bucket
// "tier", created, with path-style addressing and no client retries
// (MaxAttempts 1), so a fault a test injects is seen once. The server
// stops when the test ends.
func Bucket(t testing.TB) objstore.Bucket {
	t.Helper()
	srv, err := embeds3.Start("127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	b, err := objstore.OpenS3(context.Background(), objstore.S3Config{Endpoint: srv.URL(), Bucket: "tier", AccessKey: "a", SecretKey: "b",
		PathStyle: true, CreateBucket: true, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
