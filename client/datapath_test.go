package client

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
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
	l := &acceptLog{next: newHTTPClient(nil).Transport, seen: map[string][]string{}}
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

// slowNode delays every Fetch to one storage node.
type slowNode struct {
	next  http.RoundTripper
	host  string
	delay time.Duration
}

func (s *slowNode) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == s.host && strings.HasSuffix(r.URL.Path, "/Fetch") {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return s.next.RoundTrip(r)
}

// A leader slower to answer than another that always has records is not
// starved: its Fetch stays in flight across Polls and its records arrive
// long before the fast leader's backlog is read.
func TestConsumerDoesNotStarveSlowLeader(t *testing.T) {
	fc := newFake(t, 2, "t", 2) // partition 0 on node 1, partition 1 on node 2
	p := newProducer(t, fc, Linger(0), ManualPartitioning())
	ctx := ctxT(t)
	const backlog = 400
	for i := range backlog {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "fast-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("slow")}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(fc.NodeURL(2))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &slowNode{next: newHTTPClient(nil).Transport, host: u.Host, delay: 20 * time.Millisecond}}
	// Each Fetch of partition 0 carries about one record.
	c := newConsumer(t, fc, HTTPClient(hc), FetchMaxPartitionBytes(1))
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset(), 1: StartOffset()}})
	fast := 0
	for fast < backlog {
		rs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Partition == 1 {
				return
			}
			fast++
		}
	}
	t.Fatalf("all %d records of the fast leader came before the slow leader's one", backlog)
}
