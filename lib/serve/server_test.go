package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func protoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	})
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestServerSpeaksH2CAndHTTP1(t *testing.T) {
	s := StartServer(listenLocal(t), protoHandler())
	defer s.Close()

	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	resp, body := get(t, c, s.URL()+"/")
	if resp.ProtoMajor != 2 || body != "HTTP/2.0" {
		t.Errorf("h2c client: response %s, server saw %s; want HTTP/2 both ways", resp.Proto, body)
	}

	// What curl does without flags.
	resp, body = get(t, &http.Client{Transport: &http.Transport{}}, s.URL()+"/")
	if resp.ProtoMajor != 1 || body != "HTTP/1.1" {
		t.Errorf("HTTP/1.1 client: response %s, server saw %s", resp.Proto, body)
	}
}

func TestServerURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:9092":   "http://127.0.0.1:9092",
		"[::]:9092":      "http://127.0.0.1:9092",
		"10.1.2.3:9092":  "http://10.1.2.3:9092",
		"[fe80::1]:9092": "http://[fe80::1]:9092",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := baseURL(a); got != want {
			t.Errorf("baseURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// slowHandler blocks each request until release is closed, announcing on
// started that it has begun.
func slowHandler(started chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
			io.WriteString(w, "done")
		case <-r.Context().Done():
		}
	})
}

func TestServerShutdownDrainsInFlight(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	s := StartServer(listenLocal(t), slowHandler(started, release))
	c := NewHTTPClient()
	defer c.CloseIdleConnections()

	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := c.Get(s.URL() + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-started

	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(context.Background()) }()
	<-s.Draining()
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r := <-got
	if r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request: body %q, err %v", r.body, r.err)
	}
	if s.Err() != nil {
		t.Errorf("Err after Shutdown = %v", s.Err())
	}
	// A new request finds nobody listening.
	if _, err := c.Get(s.URL() + "/"); err == nil {
		t.Error("request after Shutdown succeeded")
	}
}

func TestServerShutdownDeadlineCancelsStragglers(t *testing.T) {
	started := make(chan struct{}, 1)
	canceled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
		close(canceled)
	})
	s := StartServer(listenLocal(t), h)
	c := NewHTTPClient()
	defer c.CloseIdleConnections()
	go func() {
		if resp, err := c.Get(s.URL() + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	<-canceled // the straggler's context was canceled
}

func TestServerStopTwice(t *testing.T) {
	s := StartServer(listenLocal(t), protoHandler())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	<-s.Draining()

	s = StartServer(listenLocal(t), protoHandler())
	for range 2 {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestServerErrWhenListenerFails(t *testing.T) {
	ln := listenLocal(t)
	s := StartServer(ln, protoHandler())
	ln.Close() // not through the server
	<-s.Done()
	if s.Err() == nil {
		t.Error("Err = nil after the listener failed")
	}
	s.Close()
}
