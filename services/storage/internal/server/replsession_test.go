package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/testwait"
)

// replicateLog records (and may rewrite) the Replicate requests node 1
// serves, as they came over the wire.
type replicateLog struct {
	mu      sync.Mutex
	reqs    []*storagev1.ReplicateRequest
	rewrite func(*storagev1.ReplicateRequest) // nil: as sent
}

func (l *replicateLog) wrap(id int32, h http.Handler) http.Handler {
	if id != 1 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/Replicate") || r.Header.Get("Content-Encoding") != "" {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m := &storagev1.ReplicateRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		if l.rewrite != nil {
			l.rewrite(m)
		}
		l.reqs = append(l.reqs, proto.CloneOf(m))
		l.mu.Unlock()
		if body, err = proto.Marshal(m); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// since returns follower's requests recorded from index from on.
func (l *replicateLog) since(from int, follower int32) []*storagev1.ReplicateRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*storagev1.ReplicateRequest
	for _, m := range l.reqs[min(from, len(l.reqs)):] {
		if m.GetReplicaId() == follower {
			out = append(out, m)
		}
	}
	return out
}

func (l *replicateLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

func (l *replicateLog) setRewrite(f func(*storagev1.ReplicateRequest)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rewrite = f
}

// sessionTopics creates n one-partition topics led by node 1 over three
// replicas and returns their names.
func sessionTopics(c *testCluster, n int) []string {
	var names []string
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		c.createTopic(name, 3, 2)
		names = append(names, name)
	}
	return names
}

// A follower's requests in a session name only the partitions whose fetch
// state changed: with ten partitions and appends to one, no request after
// the one that opened the session names any other, and idle requests name
// none. The partitions it does not name stay in the ISR, well past the lag
// time, because the session counts them as fetched.
func TestReplicateSessionCarriesOnlyChangedPartitions(t *testing.T) {
	l := &replicateLog{}
	const lag = 600 * time.Millisecond
	c := newWrappedCluster(t, 3, lag, l.wrap)
	topics := sessionTopics(c, 10)
	if _, err := produce(c.storage(1), topics[3], acksAll, 1, batch(t, "warm"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Wait until follower 2's session is settled (its last requests name
	// nothing: every partition added, none in a backoff), then count.
	testwait.Until(t, 30*time.Second, "a settled session", func() error {
		reqs := l.since(0, 2)
		if len(reqs) < 3 {
			return fmt.Errorf("%d requests", len(reqs))
		}
		for _, m := range reqs[len(reqs)-3:] {
			if m.GetSessionId() == 0 || len(m.GetPartitions()) > 0 || len(m.GetForgottenPartitions()) > 0 {
				return fmt.Errorf("not settled: %v", m)
			}
		}
		return nil
	})
	from := l.len()
	fetcher := c.node(2).node.fetcher(1)
	examined := fetcher.Examined()
	epochs := map[string]int32{} // every ISR change bumps it
	for _, name := range topics {
		epochs[name] = c.ctrl.Partition(name, 0).GetPartitionEpoch()
	}
	for i := range 5 {
		if _, err := produce(c.storage(1), topics[3], acksAll, 1, batch(t, fmt.Sprint(i)), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Idle for several lag times: only the session's requests keep the
	// unnamed partitions' followers caught up (replica.Poller; the
	// session's refresh comes every three lag times).
	time.Sleep(5 * lag)
	for _, name := range topics {
		if got := isr(c, name); !slices.Equal(got, []int32{1, 2, 3}) {
			t.Fatalf("topic %s: ISR %v after %v idle, want [1 2 3]", name, got, 5*lag)
		}
		if e := c.ctrl.Partition(name, 0).GetPartitionEpoch(); e != epochs[name] {
			t.Fatalf("topic %s: partition epoch %d after %v idle, was %d: the ISR changed", name, e, 5*lag, epochs[name])
		}
	}
	reqs := l.since(from, 2)
	if len(reqs) < 5 {
		t.Fatalf("%d requests from follower 2, want several", len(reqs))
	}
	idle, named3 := 0, 0
	for _, m := range reqs {
		if m.GetSessionId() == 0 {
			t.Fatalf("a full request while the session held: %v", m)
		}
		if len(m.GetPartitions()) == 0 {
			idle++
		}
		for _, p := range m.GetPartitions() {
			if p.GetTopic() != topics[3] {
				t.Fatalf("request names unchanged partition %s/%d: %v", p.GetTopic(), p.GetPartition(), m)
			}
			named3++
		}
	}
	if named3 == 0 || idle == 0 {
		t.Fatalf("%d requests named the written partition, %d named none; want both", named3, idle)
	}
	// Nor did building them look at every partition each time: only at
	// those given a result, and at all of them at most once per walk
	// (WalkEvery, 10 s; the window is shorter, so twice at most).
	if n, most := fetcher.Examined()-examined, uint64(named3+2*len(topics)); n > most {
		t.Fatalf("follower 2 read the fetch state of %d partitions over %d requests, want at most %d", n, len(reqs), most)
	}
	// The followers have every record.
	for _, id := range []int32{2, 3} {
		if leo := c.node(id).node.replica(topics[3], 0).Log().LogEndOffset(); leo != 6 {
			t.Fatalf("follower %d has log end %d, want 6", id, leo)
		}
	}
}

// A change of a followed replica made outside the fetch loop (here a new
// record; a move to the tier's end is another) makes the follower's next
// request look at the partition, without waiting for a walk over every
// partition (ReplicaWalkEvery, an hour here).
func TestFollowerLooksAtAReplicaThatChangedOutsideItsFetches(t *testing.T) {
	c := newClusterOf(t, 3, 10*time.Second, &testCluster{walkEvery: time.Hour})
	topics := sessionTopics(c, 3)
	if _, err := produce(c.storage(1), topics[1], acksAll, 1, batch(t, "warm"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	fetcher := c.node(2).node.fetcher(1)
	// Settled: no request looks at any partition for a while.
	var settled uint64
	testwait.Until(t, 30*time.Second, "a settled session", func() error {
		n := fetcher.Examined()
		defer func() { settled = n }()
		if n != settled {
			return fmt.Errorf("examined %d partitions, then %d", settled, n)
		}
		time.Sleep(4 * 200 * time.Millisecond) // several long polls
		if m := fetcher.Examined(); m != n {
			return fmt.Errorf("examined %d partitions, then %d", n, m)
		}
		return nil
	})
	r := c.node(2).node.replica(topics[1], 0)
	st := r.View().State
	st.PartitionEpoch++
	r.ApplyState(st)
	testwait.Until(t, 30*time.Second, "the changed partition looked at", func() error {
		if n := fetcher.Examined(); n == settled {
			return fmt.Errorf("examined %d partitions, as before the change", n)
		}
		return nil
	})
}

// A session the leader does not know (it restarted, or evicted it) is
// answered SESSION_NOT_FOUND, and the follower sends a full request that
// opens a new one; replication goes on.
func TestReplicateUnknownSessionFallsBackToFullRequest(t *testing.T) {
	l := &replicateLog{}
	c := newWrappedCluster(t, 3, 10*time.Second, l.wrap)
	topics := sessionTopics(c, 3)
	testwait.Until(t, 30*time.Second, "an incremental request", func() error {
		for _, m := range l.since(0, 2) {
			if m.GetSessionId() != 0 {
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	// From now on node 1 sees a session id it never gave.
	l.setRewrite(func(m *storagev1.ReplicateRequest) {
		if m.GetSessionId() != 0 {
			m.SessionId = m.GetSessionId() ^ 0x5a5a
		}
	})
	from := l.len()
	testwait.Until(t, 30*time.Second, "a full request after the refusal", func() error {
		refused := false
		for _, m := range l.since(from, 2) {
			if m.GetSessionId() != 0 {
				refused = true
			} else if refused && m.GetOpenSession() && len(m.GetPartitions()) == len(topics) {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	l.setRewrite(nil)
	for _, name := range topics {
		if _, err := produce(c.storage(1), name, acksAll, 1, batch(t, "after"), 10*time.Second); err != nil {
			t.Fatalf("acks=all produce to %s after the fallback: %v", name, err)
		}
	}
}

// A leader that does not know sessions (simulated: node 1 sees requests
// without open_session, as an old leader ignores it) answers no session
// id: the follower goes on with full requests and replication works.
func TestReplicateFollowerAgainstLeaderWithoutSessions(t *testing.T) {
	l := &replicateLog{rewrite: func(m *storagev1.ReplicateRequest) { m.OpenSession = false }}
	c := newWrappedCluster(t, 3, 10*time.Second, l.wrap)
	topics := sessionTopics(c, 3)
	for _, name := range topics {
		if _, err := produce(c.storage(1), name, acksAll, 1, batch(t, "x"), 10*time.Second); err != nil {
			t.Fatalf("acks=all produce to %s: %v", name, err)
		}
	}
	reqs := l.since(0, 2)
	if len(reqs) == 0 {
		t.Fatal("no requests from follower 2")
	}
	for _, m := range reqs[len(reqs)/2:] {
		if m.GetSessionId() != 0 {
			t.Fatalf("an incremental request to a leader that opened no session: %v", m)
		}
	}
}

// The leader's handler serves old-style full requests (no session asked)
// as before: one result per partition in the request's order, no session
// id. A session's request with the wrong epoch or an unknown id is refused
// with the session error, and a full request of the follower closes its
// session.
func TestReplicateLeaderSessionRules(t *testing.T) {
	c := newCluster(t, 3, 10*time.Second)
	topics := sessionTopics(c, 4)
	for _, name := range topics {
		if _, err := produce(c.storage(1), name, acksAll, 1, batch(t, "a", "b"), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s := &service{n: c.node(1).node} // sessions of its own, beside the node's
	nodeEpoch := c.node(2).node.meta.NodeEpoch()
	full := func(open bool) *storagev1.ReplicateRequest {
		m := &storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, MaxWaitMs: 50, MinBytes: 1, OpenSession: open}
		for i := len(topics) - 1; i >= 0; i-- { // not sorted: the answer keeps this order
			m.Partitions = append(m.Partitions, &storagev1.ReplicatePartition{Topic: topics[i], CurrentLeaderEpoch: 1, FetchOffset: 2, LastFetchedEpoch: 1})
		}
		return m
	}
	call := func(m *storagev1.ReplicateRequest) *storagev1.ReplicateResponse {
		t.Helper()
		resp, err := s.Replicate(context.Background(), connect.NewRequest(m))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	old := call(full(false))
	if old.GetSessionId() != 0 || len(old.GetPartitions()) != len(topics) {
		t.Fatalf("old-style request: session %d, %d results", old.GetSessionId(), len(old.GetPartitions()))
	}
	for i, res := range old.GetPartitions() {
		if res.GetTopic() != topics[len(topics)-1-i] || res.GetError() != nil || res.GetHighWatermark() != 2 {
			t.Fatalf("old-style result %d: %v", i, res)
		}
	}

	opened := call(full(true))
	id := opened.GetSessionId()
	if id == 0 || len(opened.GetPartitions()) != len(topics) {
		t.Fatalf("opening request: session %d, %d results", id, len(opened.GetPartitions()))
	}
	// Nothing changed: an incremental request naming nothing waits and
	// answers nothing.
	idle := call(&storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, MaxWaitMs: 50, MinBytes: 1, SessionId: id, SessionEpoch: 1})
	if idle.GetSessionId() != id || len(idle.GetPartitions()) != 0 || idle.GetSessionError() != 0 {
		t.Fatalf("idle incremental answer: %v", idle)
	}
	unknown := call(&storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, SessionId: id + 1, SessionEpoch: 2})
	if unknown.GetSessionError() != storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_SESSION_NOT_FOUND {
		t.Fatalf("unknown session: %v", unknown)
	}
	stale := call(&storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, SessionId: id, SessionEpoch: 1})
	if stale.GetSessionError() != storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_INVALID_SESSION_EPOCH {
		t.Fatalf("repeated epoch: %v", stale)
	}
	// The wrong epoch closed it.
	gone := call(&storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, SessionId: id, SessionEpoch: 2})
	if gone.GetSessionError() != storagev1.ReplicateSessionError_REPLICATE_SESSION_ERROR_SESSION_NOT_FOUND {
		t.Fatalf("closed session: %v", gone)
	}
	// A full request without a session closes the follower's session.
	id = call(full(true)).GetSessionId()
	call(full(false))
	if res := call(&storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, SessionId: id, SessionEpoch: 1}); res.GetSessionError() == 0 {
		t.Fatalf("session still open after a full request without one: %v", res)
	}
	if n := s.sessions().feed.watching(); n != 0 {
		t.Fatalf("%d replicas still watched with no session and no call", n)
	}
}

// A parked session call wakes on an append to any one of its partitions
// and answers that partition alone; it waits on its session's channel
// (park), not on a select over every partition's channel.
func TestReplicateSessionWakesOnAppendToAnyPartition(t *testing.T) {
	c := newCluster(t, 3, 10*time.Second)
	topics := sessionTopics(c, 8)
	s := &service{n: c.node(1).node}
	nodeEpoch := c.node(2).node.meta.NodeEpoch()
	open := &storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, MaxWaitMs: 50, MinBytes: 1, OpenSession: true}
	for _, name := range topics {
		open.Partitions = append(open.Partitions, &storagev1.ReplicatePartition{Topic: name, CurrentLeaderEpoch: 1, FetchOffset: 0, LastFetchedEpoch: -1})
	}
	resp, err := s.Replicate(context.Background(), connect.NewRequest(open))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.GetSessionId()
	if n := s.sessions().feed.watching(); n != len(topics) {
		t.Fatalf("%d replicas watched, want %d", n, len(topics))
	}
	epoch := int32(1)
	next := func(wait time.Duration, named ...*storagev1.ReplicatePartition) (*storagev1.ReplicateResponse, error) {
		m := &storagev1.ReplicateRequest{ReplicaId: 2, NodeEpoch: nodeEpoch, MaxWaitMs: int32(wait / time.Millisecond), MinBytes: 1,
			SessionId: id, SessionEpoch: epoch, Partitions: named}
		epoch++
		resp, err := s.Replicate(context.Background(), connect.NewRequest(m))
		if err != nil {
			return nil, err
		}
		if e := resp.Msg.GetSessionError(); e != 0 {
			return nil, fmt.Errorf("session error %v", e)
		}
		return resp.Msg, nil
	}
	var named []*storagev1.ReplicatePartition
	for _, k := range []int{5, 0, 7} {
		// Until nothing is new (the high watermarks the real followers
		// move), so the next call parks.
		for {
			res, err := next(200*time.Millisecond, named...)
			if err != nil {
				t.Fatal(err)
			}
			named = nil
			if len(res.GetPartitions()) == 0 {
				break
			}
		}
		type answer struct {
			res *storagev1.ReplicateResponse
			err error
			at  time.Duration
		}
		done := make(chan answer, 1)
		start := time.Now()
		go func() {
			res, err := next(20 * time.Second)
			done <- answer{res, err, time.Since(start)}
		}()
		testwait.Until(t, 10*time.Second, "the call parked", func() error {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
			if !strings.Contains(b.String(), "(*service).park(") {
				return fmt.Errorf("not parked yet")
			}
			return nil
		})
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		for _, g := range strings.Split(b.String(), "\n\n") {
			if strings.Contains(g, "(*service).replicateSession") && strings.Contains(g, "reflect.Select") {
				t.Fatalf("the session call waits in reflect.Select:\n%s", g)
			}
		}
		if _, err := produce(c.storage(1), topics[k], acksLeader, 1, batch(t, "v"), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.at > 10*time.Second {
			t.Fatalf("the call answered after %v, not on the append", a.at)
		}
		ps := a.res.GetPartitions()
		if len(ps) != 1 || ps[0].GetTopic() != topics[k] || len(ps[0].GetRecords()) == 0 {
			t.Fatalf("woken answer: %v, want %s with its record", a.res, topics[k])
		}
		// As a follower that appended it: the next request names it.
		named = []*storagev1.ReplicatePartition{{Topic: topics[k], CurrentLeaderEpoch: 1, FetchOffset: 1, LastFetchedEpoch: 1}}
	}
}
