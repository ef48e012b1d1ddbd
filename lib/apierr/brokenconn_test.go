package apierr

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// resettingServer answers every request by resetting its connection, as a
// peer that died under a pooled connection does.
func resettingServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.(*net.TCPConn).SetLinger(0) // close sends RST
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestBrokenConnectionIsUnavailable: connect-go reports a call whose
// connection was reset as CANCELED, though the caller cancelled nothing;
// with the interceptor the same call is UNAVAILABLE and still wraps the
// reset, and a call the caller did cancel stays CANCELED.
func TestBrokenConnectionIsUnavailable(t *testing.T) {
	srv := resettingServer(t)
	call := func(ctx context.Context, opts ...connect.ClientOption) error {
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+"/test.v1.Test/Call", opts...)
		_, err := c.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
		return err
	}
	err := call(context.Background())
	if connect.CodeOf(err) != connect.CodeCanceled || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("without the interceptor: %v (code %v); the premise (CANCELED wrapping ECONNRESET) no longer holds", err, connect.CodeOf(err))
	}
	err = call(context.Background(), connect.WithInterceptors(BrokenConnectionInterceptor{}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("with the interceptor: %v (code %v), want UNAVAILABLE wrapping ECONNRESET", err, connect.CodeOf(err))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := call(ctx, connect.WithInterceptors(BrokenConnectionInterceptor{})); connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("a call the caller cancelled: %v (code %v), want CANCELED", err, connect.CodeOf(err))
	}
	answered := New(connect.CodeCanceled, 0, "canceled by the server")
	if got := BrokenConnection(context.Background(), answered); got != error(answered) {
		t.Fatalf("a server's CANCELED answer became %v", got)
	}
}
