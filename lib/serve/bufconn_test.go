package serve

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// countingListener counts the Read calls made on the connections it
// accepts: one per read system call.
type countingListener struct {
	net.Listener
	reads *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.reads}, nil
}

type countingConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// TestServerReadsFramesThroughABuffer: an h2c call with a body arrives as
// at least a HEADERS and a DATA frame. Read unbuffered, each frame costs two
// reads (its 9-byte header, then its payload), so 200 calls cost at least
// 800; through the server's read buffer the frames that arrived together
// are taken in one read.
func TestServerReadsFramesThroughABuffer(t *testing.T) {
	var reads atomic.Int64
	s := StartServer(countingListener{listenLocal(t), &reads}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	}))
	defer s.Close()
	c := NewHTTPClient()
	defer c.CloseIdleConnections()

	const calls = 200
	body := bytes.Repeat([]byte("x"), 1000)
	get(t, c, s.URL()+"/") // the connection's preface and settings
	before := reads.Load()
	for range calls {
		resp, err := c.Post(s.URL()+"/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("echo: %d bytes, err %v", len(got), err)
		}
	}
	n := reads.Load() - before
	t.Logf("%d reads for %d calls", n, calls)
	if n >= 3*calls {
		t.Errorf("%d reads for %d calls with a body: want fewer than 3 per call", n, calls)
	}
}
