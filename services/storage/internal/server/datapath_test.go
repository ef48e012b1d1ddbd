package server

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// headerLog records the compression headers of a node's requests and
// answers.
type headerLog struct {
	mu      sync.Mutex
	accepts map[string][]string // method → Accept-Encoding of its requests
	encoded map[string][]string // method → Content-Encoding of its answers
}

func (l *headerLog) wrap(_ int32, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		h.ServeHTTP(w, r)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.accepts[method] = append(l.accepts[method], r.Header.Get("Accept-Encoding"))
		l.encoded[method] = append(l.encoded[method], w.Header().Get("Content-Encoding"))
	})
}

func (l *headerLog) get(m map[string][]string, method string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), m[method]...)
}

// Record batches are already compressed by the producer's codec: storage
// nodes neither ask each other for gzip on Replicate nor gzip their
// Produce, Fetch and Replicate answers, even to a caller that accepts it.
func TestDataPathIsNotCompressed(t *testing.T) {
	l := &headerLog{accepts: map[string][]string{}, encoded: map[string][]string{}}
	c := newWrappedCluster(t, 3, 10*time.Second, l.wrap)
	c.createTopic("t", 3, 2)
	// Compressible values: gzip would shrink them a hundredfold.
	big := strings.Repeat("a", 64<<10)
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte(big)}})
	if err != nil {
		t.Fatal(err)
	}
	// c.storage's client is Connect's default, which accepts gzip.
	if _, err := produce(c.storage(1), "t", acksAll, 1, b, 5*time.Second); err != nil {
		t.Fatalf("produce: %v", err)
	}
	res := fetch(t, c.storage(1), "t", 0, time.Second)
	if !bytes.Contains(res.GetRecords(), []byte(big)) {
		t.Fatalf("fetched %d bytes without the value", len(res.GetRecords()))
	}
	for _, m := range []string{"Produce", "Fetch", "Replicate"} {
		if len(l.get(l.encoded, m)) == 0 {
			t.Fatalf("no %s call seen", m)
		}
		for _, enc := range l.get(l.encoded, m) {
			if enc != "" && enc != "identity" {
				t.Errorf("%s answered with Content-Encoding %q", m, enc)
			}
		}
	}
	for _, acc := range l.get(l.accepts, "Replicate") {
		if strings.Contains(acc, "gzip") {
			t.Errorf("a follower's Replicate asked for Accept-Encoding %q", acc)
		}
	}
	if accs := l.get(l.accepts, "Fetch"); len(accs) == 0 || !strings.Contains(accs[0], "gzip") {
		t.Fatalf("the test's own client should accept gzip, sent %q", accs)
	}
}
