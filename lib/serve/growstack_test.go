package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGrownStackServesTheRequest(t *testing.T) {
	h := withGrownStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write(append([]byte("got "), body...))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/a/b", strings.NewReader("hello")))
	if rec.Code != http.StatusTeapot || rec.Header().Get("X-Path") != "/a/b" || rec.Body.String() != "got hello" {
		t.Fatalf("answer %d %q %q, want the handler's own", rec.Code, rec.Header().Get("X-Path"), rec.Body.String())
	}
}

// deep uses about n KiB of stack, as a handler deep in interceptors,
// protobuf and the service does.
//
//go:noinline
func deep(n int) byte {
	var b [1 << 10]byte
	b[n%len(b)] = byte(n)
	if n == 0 {
		return b[0]
	}
	return deep(n-1) + b[len(b)-1-n%len(b)]
}

// BenchmarkRequestStack runs each request as an HTTP/2 server does, on a
// new goroutine, with a handler that needs about 24 KiB of stack: grown
// as it goes (plain) or once at the start (grown).
func BenchmarkRequestStack(b *testing.B) {
	handler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { deep(24) })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"plain", handler}, {"grown", withGrownStack(handler)}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			done := make(chan struct{})
			for b.Loop() {
				go func() {
					c.h.ServeHTTP(nil, req)
					done <- struct{}{}
				}()
				<-done
			}
		})
	}
}
