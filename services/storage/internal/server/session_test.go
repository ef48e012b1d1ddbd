package server

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
)

// inFlight counts the Replicate calls a node is serving, and the most at
// once since the last reset.
type inFlight struct {
	mu       sync.Mutex
	now, max int
}

func (f *inFlight) wrap(id int32, h http.Handler) http.Handler {
	if id != 1 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/Replicate") {
			h.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		f.now++
		f.max = max(f.max, f.now)
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.now--
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

func (f *inFlight) get() (now, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now, f.max
}

func (f *inFlight) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.max = f.now
}

// Each follower keeps one Replicate long poll at a time with a leader node,
// carrying every partition it follows there (Kafka's fetch session per
// broker), not one per partition: with six partitions led by node 1 and
// two followers, node 1 serves at most two Replicate calls at once, and
// acks=all writes to every partition still complete.
func TestOneReplicateSessionPerLeaderNode(t *testing.T) {
	f := &inFlight{}
	c := newWrappedCluster(t, 3, 10*time.Second, f.wrap)
	const topics = 6
	for i := range topics {
		c.createTopic(fmt.Sprintf("t%d", i), 3, 2)
	}
	for i := range topics {
		if _, err := produce(c.storage(1), fmt.Sprintf("t%d", i), acksAll, 1, batch(t, "warm"), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Both followers parked in their session.
	testwait.Until(t, 30*time.Second, "two parked sessions", func() error {
		if now, _ := f.get(); now != 2 {
			return fmt.Errorf("%d Replicate calls in flight", now)
		}
		return nil
	})
	f.reset()
	for round := range 5 {
		for i := range topics {
			if _, err := produce(c.storage(1), fmt.Sprintf("t%d", i), acksAll, 1, batch(t, fmt.Sprint(round)), 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, most := f.get(); most > 2 {
		t.Fatalf("node 1 served %d Replicate calls at once for 2 followers", most)
	}
	for i := range topics {
		name := fmt.Sprintf("t%d", i)
		for _, id := range []int32{2, 3} {
			if leo := c.node(id).node.replica(name, 0).Log().LogEndOffset(); leo != 6 {
				t.Fatalf("follower %d of %s has log end %d after acks=all, want 6", id, name, leo)
			}
		}
	}
}
