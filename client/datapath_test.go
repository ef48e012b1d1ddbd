package client

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// acceptLog is a transport that records the Accept-Encoding of each
// StorageService call.
type acceptLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[string][]string // method → Accept-Encoding
}

func (l *acceptLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "StorageService/") {
		method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		l.mu.Lock()
		l.seen[method] = append(l.seen[method], r.Header.Get("Accept-Encoding"))
		l.mu.Unlock()
	}
	return l.next.RoundTrip(r)
}

// Record batches are already compressed by the producer's codec: the
// client's Produce and Fetch calls do not ask storage nodes for gzip.
func TestDataPathAsksForNoCompression(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	l := &acceptLog{next: newHTTPClient().Transport, seen: map[string][]string{}}
	hc := &http.Client{Transport: l}
	p := newProducer(t, fc, HTTPClient(hc))
	if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte(strings.Repeat("a", 4096))}); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, fc, HTTPClient(hc))
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
	pollN(t, c, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range []string{"Produce", "Fetch"} {
		if len(l.seen[m]) == 0 {
			t.Fatalf("no %s call seen", m)
		}
		for _, acc := range l.seen[m] {
			if strings.Contains(acc, "gzip") {
				t.Errorf("%s asked for Accept-Encoding %q", m, acc)
			}
		}
	}
}
