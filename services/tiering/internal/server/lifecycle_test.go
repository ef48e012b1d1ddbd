package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
)

// freeAddr is a loopback address nothing listens on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestStartServesAndCloseStops runs the whole instance the binary runs:
// the embedded S3 server, the bucket, the loops and TieringService. Close
// stops the S3 server too, and a second Close is harmless.
func TestStartServesAndCloseStops(t *testing.T) {
	s3Addr := freeAddr(t)
	cfg := &Config{S3Bucket: "strata", S3Prefix: "strata", S3Region: "us-east-1",
		EmbeddedS3Listen: s3Addr, EmbeddedS3Dir: t.TempDir(), SpoolDir: t.TempDir(), CacheBytes: 1 << 20}
	ctx := context.Background()
	tr, err := Start(ctx, cfg, Options{HTTPClient: http.DefaultClient, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle(tr.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := tieringv1connect.NewTieringServiceClient(srv.Client(), srv.URL)
	resp, err := client.GetTieredState(ctx, connect.NewRequest(&tieringv1.GetTieredStateRequest{}))
	if err != nil {
		t.Fatalf("GetTieredState through the started instance: %v", err)
	}
	if n := len(resp.Msg.GetPartitions()); n != 0 {
		t.Errorf("an empty bucket lists %d partitions", n)
	}

	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tr.Ready(ctx); err == nil {
		t.Error("Ready after Close: nil, want an error")
	}
	if conn, err := net.Dial("tcp", s3Addr); err == nil {
		conn.Close()
		t.Errorf("the embedded S3 server still accepts on %s after Close", s3Addr)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestFailedStartLeavesNothingRunning: when the bucket cannot be opened,
// the embedded S3 server Start had started is stopped again.
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	s3Addr := freeAddr(t)
	cfg := &Config{S3Bucket: "strata", S3Region: "us-east-1", EmbeddedS3Listen: s3Addr, EmbeddedS3Dir: t.TempDir(),
		// An endpoint nothing answers on, so opening the bucket fails.
		S3Endpoint: "http://" + freeAddr(t), S3AccessKey: "a", S3SecretKey: "b", S3PathStyle: true}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no retries: the bucket check fails at once
	if _, err := Start(ctx, cfg, Options{HTTPClient: http.DefaultClient, Logger: discardLogger()}); err == nil {
		t.Fatal("Start with an unreachable bucket: nil error")
	}
	ln, err := net.Listen("tcp", s3Addr)
	if err != nil {
		t.Fatalf("the embedded S3 server's address is still taken after the failed Start: %v", err)
	}
	ln.Close()
}
