package kafka

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
)

// fetchReq is a Fetch request at version for session id and epoch,
// naming parts ("topic/partition@offset") and forgetting forget
// ("topic/partition").
func fetchReq(version int16, id, epoch int32, parts []string, forget ...string) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.SessionID, req.SessionEpoch = version, id, epoch
	for _, s := range parts {
		var topic string
		var p int32
		var off int64
		if _, err := fmt.Sscanf(s, "%1s/%d@%d", &topic, &p, &off); err != nil {
			panic(s)
		}
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != topic {
			t := kmsg.NewFetchRequestTopic()
			t.Topic = topic
			req.Topics = append(req.Topics, t)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
		req.Topics[len(req.Topics)-1].Partitions = append(req.Topics[len(req.Topics)-1].Partitions, rp)
	}
	for _, s := range forget {
		var topic string
		var p int32
		if _, err := fmt.Sscanf(s, "%1s/%d", &topic, &p); err != nil {
			panic(s)
		}
		ft := kmsg.NewFetchRequestForgottenTopic()
		ft.Topic, ft.Partitions = topic, []int32{p}
		req.ForgottenTopics = append(req.ForgottenTopics, ft)
	}
	return req
}

// openFull makes a full fetch of parts from owner, read without an error,
// and returns its plan: sessionID is the session it opened, 0 for none.
func openFull(c *fetchSessions, owner string, id int32, parts ...string) fetchPlan {
	p := c.open(12, fetchReq(12, id, 0, parts), owner)
	c.answer(&p, make([]fetchResult, len(p.parts)))
	return p
}

func partNames(parts []fetchPart) []string {
	var out []string
	for _, p := range parts {
		out = append(out, fmt.Sprintf("%s/%d@%d", p.topic, p.partition, p.offset))
	}
	return out
}

func TestFetchSessionLifecycle(t *testing.T) {
	c := newFetchSessions(10)
	// Before v7 there are no sessions.
	if p := c.open(6, fetchReq(6, 0, -1, []string{"a/0@0"}), ""); p.sessionID != 0 || p.session != nil || len(p.parts) != 1 {
		t.Fatalf("v6: %+v", p)
	}
	// A full fetch at epoch 0 opens a session with a nonzero id.
	full := c.open(12, fetchReq(12, 0, 0, []string{"a/0@0", "a/1@5", "b/0@7"}), "")
	if full.errCode != 0 || full.sessionID != 0 || full.incremental || c.len() != 0 {
		t.Fatalf("full, before it is read: %+v, %d sessions", full, c.len())
	}
	inc := c.answer(&full, []fetchResult{{hw: 10}, {hw: 5}, {hw: 7}})
	if !slices.Equal(inc, []bool{true, true, true}) {
		t.Fatalf("a full fetch answers everything: %v", inc)
	}
	if full.sessionID <= 0 || c.len() != 1 {
		t.Fatalf("full, once read: %+v, %d sessions", full, c.len())
	}
	id := full.sessionID
	// Epoch 1: nothing named, every session partition read at its offset;
	// only what is new is answered.
	p := c.open(12, fetchReq(12, id, 1, nil), "")
	if p.errCode != 0 || p.sessionID != id || !p.incremental || !slices.Equal(partNames(p.parts), []string{"a/0@0", "a/1@5", "b/0@7"}) {
		t.Fatalf("incremental: %+v", p)
	}
	inc = c.answer(&p, []fetchResult{
		{hw: 10, records: []byte("x")}, // records
		{hw: 5},                        // nothing new
		{hw: 8},                        // high watermark moved
	})
	if !slices.Equal(inc, []bool{true, false, true}) {
		t.Fatalf("incremental answer %v", inc)
	}
	// Answered partitions go to the end of the order; a.1 is read first.
	// Epoch 2 moves a/0 on and adds c/0; the new partition is answered
	// even with nothing in it, the moved one only if something is new.
	p = c.open(12, fetchReq(12, id, 2, []string{"a/0@10", "c/0@0"}), "")
	if want := []string{"a/1@5", "a/0@10", "b/0@7", "c/0@0"}; !slices.Equal(partNames(p.parts), want) {
		t.Fatalf("parts %v, want %v", partNames(p.parts), want)
	}
	inc = c.answer(&p, []fetchResult{{hw: 5}, {hw: 10}, {hw: 8}, {hw: 0}})
	if !slices.Equal(inc, []bool{false, false, false, true}) {
		t.Fatalf("answer %v", inc)
	}
	// An error is always answered, and the partition is answered again
	// once the error is gone.
	p = c.open(12, fetchReq(12, id, 3, nil), "")
	inc = c.answer(&p, []fetchResult{{hw: 5}, {errCode: kerr.NotLeaderForPartition.Code, hw: -1, lso: -1, logStart: -1}, {hw: 8}, {hw: 0}})
	if !slices.Equal(inc, []bool{false, true, false, false}) {
		t.Fatalf("error answer %v", inc)
	}
	p = c.open(12, fetchReq(12, id, 4, nil), "")
	if got := partNames(p.parts); got[len(got)-1] != "a/0@10" {
		t.Fatalf("the answered partition is last: %v", got)
	}
	inc = c.answer(&p, []fetchResult{{hw: 5}, {hw: 8}, {hw: 0}, {hw: 10}})
	if !slices.Equal(inc, []bool{false, false, false, true}) {
		t.Fatalf("after the error %v", inc)
	}
	// A log start offset or last stable offset that moved is answered.
	p = c.open(12, fetchReq(12, id, 5, nil), "")
	inc = c.answer(&p, []fetchResult{{hw: 5, logStart: 2}, {hw: 8, lso: 3}, {hw: 0}, {hw: 10}})
	if !slices.Equal(inc, []bool{true, true, false, false}) {
		t.Fatalf("log start / LSO %v", inc)
	}
	// A wrong epoch and an unknown id are refused without reading.
	if p := c.open(12, fetchReq(12, id, 5, nil), ""); p.errCode != errInvalidFetchSessionEpoch || len(p.parts) != 0 {
		t.Fatalf("old epoch: %+v", p)
	}
	if p := c.open(12, fetchReq(12, id, 9, nil), ""); p.errCode != errInvalidFetchSessionEpoch {
		t.Fatalf("future epoch: %+v", p)
	}
	if p := c.open(12, fetchReq(12, id+1, 1, nil), ""); p.errCode != errFetchSessionIDNotFound || len(p.parts) != 0 {
		t.Fatalf("unknown id: %+v", p)
	}
	// A refused request leaves the session as it was.
	p = c.open(12, fetchReq(12, id, 6, nil, "a/1", "b/0", "c/0"), "")
	if !slices.Equal(partNames(p.parts), []string{"a/0@10"}) {
		t.Fatalf("forgotten: %v", partNames(p.parts))
	}
	c.answer(&p, []fetchResult{{hw: 10}})
	// Forgetting the last partition ends the session.
	if p := c.open(12, fetchReq(12, id, 7, nil, "a/0"), ""); p.sessionID != 0 || len(p.parts) != 0 || c.len() != 0 {
		t.Fatalf("all forgotten: %+v, %d sessions", p, c.len())
	}
	if p := c.open(12, fetchReq(12, id, 8, nil), ""); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("ended session: %+v", p)
	}
}

func TestFetchSessionCloseAndReopen(t *testing.T) {
	c := newFetchSessions(10)
	a := openFull(c, "", 0, "a/0@0")
	// A full fetch naming a session (epoch 0) closes it and opens another.
	b := openFull(c, "", a.sessionID, "a/0@3")
	if b.sessionID == 0 || b.sessionID == a.sessionID || c.len() != 1 {
		t.Fatalf("reopen: %d then %d, %d sessions", a.sessionID, b.sessionID, c.len())
	}
	if p := c.open(12, fetchReq(12, a.sessionID, 1, nil), ""); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("closed session still served: %+v", p)
	}
	// Epoch -1 closes it and reads sessionless.
	p := c.open(12, fetchReq(12, b.sessionID, -1, []string{"a/0@3"}), "")
	if p.sessionID != 0 || p.session != nil || len(p.parts) != 1 || c.len() != 0 {
		t.Fatalf("final epoch: %+v, %d sessions", p, c.len())
	}
	// The answer to a closed session's fetch still answers it in full.
	if inc := c.answer(&b, []fetchResult{{hw: 3}}); !inc[0] {
		t.Fatal("full answer of a closed session left a partition out")
	}
	// An empty full fetch opens nothing.
	if p := c.open(12, fetchReq(12, 0, 0, nil), ""); p.sessionID != 0 || c.len() != 0 {
		t.Fatalf("empty full fetch: %+v", p)
	}
	// A listener without sessions (no Storage) answers sessionless.
	none := newFetchSessions(0)
	if p := openFull(none, "", 0, "a/0@0"); p.sessionID != 0 || len(p.parts) != 1 {
		t.Fatalf("no slots: %+v", p)
	}
	if p := none.open(12, fetchReq(12, 5, 1, nil), ""); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("no slots, incremental: %+v", p)
	}
}

func TestFetchSessionEviction(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newFetchSessions(2)
	c.now = func() time.Time { return now }
	one := openFull(c, "", 0, "a/0@0", "a/1@0")
	now = now.Add(time.Second)
	two := openFull(c, "", 0, "a/0@0", "a/1@0", "a/2@0")
	if one.sessionID == 0 || two.sessionID == 0 {
		t.Fatal("no session")
	}
	// Full, nothing stale, the newcomer no larger than the smallest: no
	// session for it, and the others stay.
	now = now.Add(time.Second)
	if p := openFull(c, "", 0, "b/0@0", "b/1@0"); p.sessionID != 0 || p.session != nil || len(p.parts) != 2 || c.len() != 2 {
		t.Fatalf("no room: %+v", p)
	}
	// A larger newcomer evicts the smallest session.
	three := openFull(c, "", 0, "b/0@0", "b/1@0", "b/2@0")
	if three.sessionID == 0 || c.len() != 2 {
		t.Fatalf("larger newcomer: %+v", three)
	}
	if p := c.open(12, fetchReq(12, one.sessionID, 1, nil), ""); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("the smallest was not evicted: %+v", p)
	}
	// Keep three in use; two goes stale and makes room for anyone.
	now = now.Add(fetchSessionStaleAfter - time.Second)
	if p := c.open(12, fetchReq(12, three.sessionID, 1, nil), ""); p.errCode != 0 {
		t.Fatal(p.errCode)
	}
	now = now.Add(2 * time.Second)
	four := openFull(c, "", 0, "c/0@0")
	if four.sessionID == 0 {
		t.Fatal("a stale session was not evicted")
	}
	if p := c.open(12, fetchReq(12, two.sessionID, 1, nil), ""); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("the stale session was not the one evicted: %+v", p)
	}
	if p := c.open(12, fetchReq(12, three.sessionID, 2, nil), ""); p.errCode != 0 {
		t.Fatalf("the session in use was evicted: %+v", p)
	}
}

func TestNextSessionEpoch(t *testing.T) {
	if nextSessionEpoch(1) != 2 || nextSessionEpoch(math.MaxInt32) != 1 {
		t.Fatal("epoch order")
	}
}

// logStorage answers Fetch from per-partition high watermarks: a
// partition below its high watermark gets one record batch's worth of
// bytes ("r"). It records the partitions each Fetch asked for.
type logStorage struct {
	storagev1connect.StorageServiceClient
	mu    sync.Mutex
	hw    map[string]int64 // "topic/partition"
	asked [][]string
}

func (s *logStorage) Fetch(_ context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &storagev1.FetchResponse{}
	var asked []string
	for _, p := range req.Msg.GetPartitions() {
		k := fmt.Sprintf("%s/%d", p.GetTopic(), p.GetPartition())
		asked = append(asked, fmt.Sprintf("%s@%d", k, p.GetFetchOffset()))
		r := &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), HighWatermark: s.hw[k], LastStableOffset: s.hw[k]}
		if p.GetFetchOffset() < s.hw[k] {
			r.Records = []byte("r")
		}
		out.Partitions = append(out.Partitions, r)
	}
	s.asked = append(s.asked, asked)
	return connect.NewResponse(out), nil
}

// answered lists a Fetch response's partitions as "topic/partition",
// with "+" when they carry records.
func answered(resp *kmsg.FetchResponse) []string {
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			s := fmt.Sprintf("%s/%d", t.Topic, p.Partition)
			if len(p.RecordBatches) > 0 {
				s += "+"
			}
			out = append(out, s)
		}
	}
	return out
}

// TestFetchSessionBridge runs a client's fetches through the bridge: a
// full fetch opens a session, incremental ones name only what moved and
// are answered only what is new.
func TestFetchSessionBridge(t *testing.T) {
	st := &logStorage{hw: map[string]int64{"a/0": 2, "a/1": 0, "b/0": 0}}
	b, err := New(Config{Gateway: fakeGateway{}, Storage: st, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fetch := func(req *kmsg.FetchRequest) *kmsg.FetchResponse {
		t.Helper()
		resp, err := b.fetch(ctx, req.Version, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse)
	}
	resp := fetch(fetchReq(12, 0, 0, []string{"a/0@0", "a/1@0", "b/0@0"}))
	if resp.SessionID == 0 || resp.ErrorCode != 0 || !slices.Equal(answered(resp), []string{"a/0+", "a/1", "b/0"}) {
		t.Fatalf("full fetch: session %d, error %d, %v", resp.SessionID, resp.ErrorCode, answered(resp))
	}
	id := resp.SessionID
	// The client read a/0 to 2 and names it alone; b/0 got a record.
	st.hw["b/0"] = 1
	resp = fetch(fetchReq(12, id, 1, []string{"a/0@2"}))
	if resp.SessionID != id || !slices.Equal(answered(resp), []string{"b/0+"}) {
		t.Fatalf("incremental: session %d, %v", resp.SessionID, answered(resp))
	}
	if got := st.asked[1]; !slices.Equal(got, []string{"a/0@2", "a/1@0", "b/0@0"}) {
		t.Fatalf("incremental read %v", got)
	}
	// Nothing new anywhere: an empty answer of the same session.
	resp = fetch(fetchReq(12, id, 2, []string{"b/0@1"}))
	if resp.SessionID != id || resp.ErrorCode != 0 || len(answered(resp)) != 0 {
		t.Fatalf("nothing new: session %d, error %d, %v", resp.SessionID, resp.ErrorCode, answered(resp))
	}
	// A replayed epoch is refused, with nothing read.
	n := len(st.asked)
	resp = fetch(fetchReq(12, id, 2, nil))
	if resp.ErrorCode != errInvalidFetchSessionEpoch || len(resp.Topics) != 0 || len(st.asked) != n {
		t.Fatalf("replayed epoch: error %d, %v", resp.ErrorCode, answered(resp))
	}
	// A restarted node has no sessions: the client's next fetch gets
	// FETCH_SESSION_ID_NOT_FOUND, and its full fetch a new session.
	b2, _ := New(Config{Gateway: fakeGateway{}, Storage: st, HTTPClient: http.DefaultClient})
	r2, _ := b2.fetch(ctx, 12, fetchReq(12, id, 3, nil))
	if code := r2.(*kmsg.FetchResponse).ErrorCode; code != errFetchSessionIDNotFound {
		t.Fatalf("restarted: error %d", code)
	}
	// Fetch v4 has no sessions.
	resp = fetch(fetchReq(4, 0, -1, []string{"a/0@0"}))
	if resp.SessionID != 0 || !slices.Equal(answered(resp), []string{"a/0+"}) {
		t.Fatalf("v4: %d %v", resp.SessionID, answered(resp))
	}
	// A listener without Storage opens no session.
	gw, _ := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient})
	r3, _ := gw.fetch(ctx, 12, fetchReq(12, 0, 0, []string{"a/0@0"}))
	if fr := r3.(*kmsg.FetchResponse); fr.SessionID != 0 || fr.Topics[0].Partitions[0].ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("gateway: %+v", fr)
	}
}

// TestFetchSessionOwners: on a listener that authenticates, a session
// opens only after a read that no partition was refused, one principal
// holds a bounded number of sessions, never evicts another's session in
// use, and cannot use another's session id.
func TestFetchSessionOwners(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newFetchSessions(3)
	c.perOwner = 2
	c.now = func() time.Time { return now }

	// A partition refused for authorization: no session.
	p := c.open(12, fetchReq(12, 0, 0, []string{"a/0@0", "h/0@0"}), "User:a")
	c.answer(&p, []fetchResult{{hw: 1}, {errCode: kerr.TopicAuthorizationFailed.Code, hw: -1, lso: -1, logStart: -1}})
	if p.sessionID != 0 || c.len() != 0 {
		t.Fatalf("a fetch refused for authorization opened session %d (%d open)", p.sessionID, c.len())
	}

	// User:a's third session replaces its own least recently used.
	a1 := openFull(c, "User:a", 0, "a/0@0")
	now = now.Add(time.Second)
	a2 := openFull(c, "User:a", 0, "a/0@0")
	now = now.Add(time.Second)
	a3 := openFull(c, "User:a", 0, "a/0@0")
	if a1.sessionID == 0 || a2.sessionID == 0 || a3.sessionID == 0 || c.len() != 2 {
		t.Fatalf("sessions %d %d %d, %d open; want three ids and 2 open", a1.sessionID, a2.sessionID, a3.sessionID, c.len())
	}
	if p := c.open(12, fetchReq(12, a1.sessionID, 1, nil), "User:a"); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("User:a's oldest session survived its bound: %+v", p)
	}
	// Another principal cannot use User:a's session.
	if p := c.open(12, fetchReq(12, a2.sessionID, 1, nil), "User:b"); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("User:b used User:a's session: %+v", p)
	}
	b1 := openFull(c, "User:b", 0, "b/0@0")
	if b1.sessionID == 0 || c.len() != 3 {
		t.Fatalf("User:b: session %d, %d open", b1.sessionID, c.len())
	}
	// The cache is full: a larger session of User:c evicts nobody's
	// session in use, for all of them are smaller.
	if p := openFull(c, "User:c", 0, "c/0@0", "c/1@0", "c/2@0"); p.sessionID != 0 || c.len() != 3 {
		t.Fatalf("User:c evicted a session in use: session %d, %d open", p.sessionID, c.len())
	}
	// Stale sessions go to anyone: User:b keeps its in use.
	now = now.Add(fetchSessionStaleAfter)
	if p := c.open(12, fetchReq(12, b1.sessionID, 1, nil), "User:b"); p.errCode != 0 {
		t.Fatalf("User:b's session: %+v", p)
	}
	c1 := openFull(c, "User:c", 0, "c/0@0")
	if c1.sessionID == 0 {
		t.Fatal("no stale session was evicted for User:c")
	}
	if p := c.open(12, fetchReq(12, a2.sessionID, 1, nil), "User:a"); p.errCode != errFetchSessionIDNotFound {
		t.Fatalf("the stalest session (User:a's) was not the one evicted: %+v", p)
	}
	if p := c.open(12, fetchReq(12, b1.sessionID, 2, nil), "User:b"); p.errCode != 0 {
		t.Fatalf("User:b's session in use was evicted: %+v", p)
	}
}

// TestFetchSessionNeedsRead: through the bridge with a guard, a principal
// that may not read a topic opens no session fetching it, and one that
// may read opens one.
func TestFetchSessionNeedsRead(t *testing.T) {
	g, reader := readerGuard(t)
	b, err := New(Config{Gateway: fakeGateway{}, Storage: &fakeStorage{g: g}, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	stranger := authn.NewContext(context.Background(), authn.Info{Principal: acl.User("stranger"), Method: authn.MethodToken})
	full := func(ctx context.Context, topic string) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.SessionEpoch = 12, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := b.fetch(ctx, 12, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse)
	}
	for range 5 {
		if r := full(stranger, "granted"); r.SessionID != 0 || r.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("stranger: session %d, error %d", r.SessionID, r.Topics[0].Partitions[0].ErrorCode)
		}
		if r := full(reader, "hidden"); r.SessionID != 0 {
			t.Fatalf("reader of a topic it may not read: session %d", r.SessionID)
		}
	}
	if n := b.sessions.len(); n != 0 {
		t.Fatalf("%d sessions open after refused fetches", n)
	}
	if r := full(reader, "granted"); r.SessionID == 0 || b.sessions.len() != 1 {
		t.Fatalf("reader: session %d, %d open", r.SessionID, b.sessions.len())
	}
}
