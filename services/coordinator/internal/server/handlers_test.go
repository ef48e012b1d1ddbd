package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
)

// metadataGateway answers Metadata with fixed partition counts; the
// coordinator needs nothing else from the gateway for group calls.
type metadataGateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	mu    sync.Mutex
	parts map[string]int32
}

// create adds a topic of n partitions.
func (m *metadataGateway) create(name string, n int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[name] = n
}

func (m *metadataGateway) Metadata(_ context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &gatewayv1.MetadataResponse{}
	names := req.Msg.GetTopics()
	if len(names) == 0 { // every topic
		names = slices.Sorted(maps.Keys(m.parts))
	}
	for _, name := range names {
		n, ok := m.parts[name]
		if !ok {
			out.UnknownTopics = append(out.UnknownTopics, name)
			continue
		}
		md := &commonv1.TopicMetadata{Name: name}
		for p := range n {
			md.Partitions = append(md.Partitions, &commonv1.PartitionMetadata{Partition: p, LeaderId: -1})
		}
		out.Topics = append(out.Topics, md)
	}
	return connect.NewResponse(out), nil
}

// forEachStore runs fn with a coordinator on a fresh SQLite file and on a
// fresh Postgres database (the test fails when Postgres is absent).
func forEachStore(t *testing.T, parts map[string]int32, fn func(t *testing.T, c *Coordinator)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { fn(t, startTestCoordinator(t, openStore(t, kind), parts)) })
	}
}

// openStore opens a fresh offsets database: "sqlite" or "postgres".
func openStore(tb testing.TB, kind string) offsetstore.Store {
	tb.Helper()
	var s offsetstore.Store
	var err error
	if kind == "sqlite" {
		s, err = offsetstore.OpenSQLite(context.Background(), filepath.Join(tb.TempDir(), "offsets.db"))
	} else {
		s, err = offsetstore.OpenPostgres(context.Background(), pgtest.NewDatabase(tb))
	}
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func startTestCoordinator(t testing.TB, s offsetstore.Store, parts map[string]int32) *Coordinator {
	t.Helper()
	c, _ := startWithGateway(t, s, parts)
	return c
}

// startWithGateway is startTestCoordinator, with the gateway it asks for
// metadata.
func startWithGateway(t testing.TB, s offsetstore.Store, parts map[string]int32) (*Coordinator, *metadataGateway) {
	t.Helper()
	mgw := &metadataGateway{parts: maps.Clone(parts)}
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(mgw))
	gw := httptest.NewServer(mux)
	t.Cleanup(gw.Close)
	cfg := &Config{InstanceID: "coordinator-test", Gateway: gw.URL, SessionTimeout: time.Minute,
		OwnershipLease: time.Minute, LagInterval: time.Hour}
	return startUntilCleanup(t, cfg, s, gw.Client()), mgw
}

// startUntilCleanup starts a coordinator on s with cfg, its calls sent
// through httpc, and closes it and s when t ends.
func startUntilCleanup(t testing.TB, cfg *Config, s offsetstore.Store, httpc connect.HTTPClient) *Coordinator {
	t.Helper()
	c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: httpc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = s.Close()
	})
	return c
}

// heartbeat sends one heartbeat of member id at epoch owning the given
// partitions of "orders".
func heartbeat(t testing.TB, c *Coordinator, id string, epoch int32, owned ...int32) *coordinatorv1.ConsumerGroupHeartbeatResponse {
	t.Helper()
	req := &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: id, MemberEpoch: epoch, SubscribedTopicNames: []string{"orders"}}
	if len(owned) > 0 {
		req.OwnedPartitions = []*commonv1.TopicPartitions{{Topic: "orders", Partitions: owned}}
	}
	resp, err := c.ConsumerGroupHeartbeat(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("heartbeat %s@%d: %v", id, epoch, err)
	}
	return resp.Msg
}

func assigned(r *coordinatorv1.ConsumerGroupHeartbeatResponse) []int32 {
	var out []int32
	for _, tp := range r.GetAssignment().GetPartitions() {
		out = append(out, tp.GetPartitions()...)
	}
	return out
}

func committed(t *testing.T, c *Coordinator, p int32) int64 {
	t.Helper()
	resp, err := c.OffsetFetch(context.Background(), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g",
		Topics: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{p}}}}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetOffsets()[0].GetCommittedOffset()
}

// commit commits offset of orders-p for member at memberEpoch (the
// request's epoch) with records read under readEpoch (0: unset), and
// returns the partition's error, or the request's.
func commit(t testing.TB, c *Coordinator, member string, memberEpoch, readEpoch int32, p int32, offset int64) *commonv1.ErrorDetail {
	t.Helper()
	resp, err := c.OffsetCommit(context.Background(), connect.NewRequest(&coordinatorv1.OffsetCommitRequest{GroupId: "g", MemberId: member, MemberEpoch: memberEpoch,
		Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: "orders", Partition: p, CommittedOffset: offset, CommittedLeaderEpoch: -1, MemberEpoch: readEpoch}}}))
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatal(err)
		}
		return apierr.AsDetail(err)
	}
	return resp.Msg.GetPartitions()[0].GetError()
}

// TestCommitOfRecordsReadBeforeReassignment: a member reads records of a
// partition, gives it up, gets it back and commits further; the commit of
// the records it read before is refused and the offset does not move back.
func TestCommitOfRecordsReadBeforeReassignment(t *testing.T) {
	forEachStore(t, map[string]int32{"orders": 2}, func(t *testing.T, c *Coordinator) {
		r := heartbeat(t, c, "a", 0)
		e1 := r.GetMemberEpoch()
		heartbeat(t, c, "a", e1, 0, 1) // a reads orders-1 under e1, up to offset 119
		heartbeat(t, c, "c", 0)
		if r = heartbeat(t, c, "a", e1, 0, 1); !slices.Equal(assigned(r), []int32{0}) {
			t.Fatalf("a told %v after c joined, want [0]", assigned(r))
		}
		heartbeat(t, c, "c", -1)
		if r = heartbeat(t, c, "a", e1, 0); !slices.Equal(assigned(r), []int32{0, 1}) {
			t.Fatalf("a told %v after c left, want [0 1]", assigned(r))
		}
		e2 := r.GetMemberEpoch()
		if d := commit(t, c, "a", e2, 0, 1, 200); d != nil {
			t.Fatalf("commit under the new assignment: %v", d)
		}
		// The records read under e1 come to be committed now: with e1 as
		// the request's epoch (a commit sent then and delivered late), and
		// as the records' epoch in a commit sent under e2.
		for _, tc := range []struct{ request, read int32 }{{e1, 0}, {e2, e1}} {
			d := commit(t, c, "a", tc.request, tc.read, 1, 120)
			if d == nil {
				t.Fatalf("commit (epoch %d) of records read under epoch %d accepted after orders-1 was assigned again at %d", tc.request, e1, e2)
			}
			if d.GetReason() != commonv1.Reason_REASON_FENCED_MEMBER_EPOCH || !strings.Contains(d.GetMessage(), "move the offset back") {
				t.Fatalf("refused with %v, want REASON_FENCED_MEMBER_EPOCH saying why", d)
			}
			if got := committed(t, c, 1); got != 200 {
				t.Fatalf("orders-1 committed at %d, want 200", got)
			}
		}
		// Partition 0 stayed a's: what a read of it under e1 commits.
		if d := commit(t, c, "a", e2, e1, 0, 50); d != nil {
			t.Fatalf("commit of orders-0, held since epoch %d: %v", e1, d)
		}
		if got := committed(t, c, 0); got != 50 {
			t.Fatalf("orders-0 committed at %d, want 50", got)
		}
	})
}

// TestLateHeartbeatKeepsRevokingPartition: a heartbeat a member sent
// before it was granted partitions, delivered after it was told to give
// one up, does not release that partition to another member.
func TestLateHeartbeatKeepsRevokingPartition(t *testing.T) {
	forEachStore(t, map[string]int32{"orders": 4}, func(t *testing.T, c *Coordinator) {
		rb := heartbeat(t, c, "b", 0)
		heartbeat(t, c, "b", rb.GetMemberEpoch(), 0, 1, 2, 3)
		first := heartbeat(t, c, "a", 0)
		rb = heartbeat(t, c, "b", rb.GetMemberEpoch(), 0, 1, 2, 3)
		heartbeat(t, c, "b", rb.GetMemberEpoch(), 0, 1)
		ra := heartbeat(t, c, "a", first.GetMemberEpoch())
		ra = heartbeat(t, c, "a", ra.GetMemberEpoch(), 2, 3)
		rc := heartbeat(t, c, "c", 0)
		if ra = heartbeat(t, c, "a", ra.GetMemberEpoch(), 2, 3); !slices.Equal(assigned(ra), []int32{2}) {
			t.Fatalf("a told %v after c joined, want [2]", assigned(ra))
		}
		// a's heartbeat from before the grant arrives now.
		_, _ = c.ConsumerGroupHeartbeat(context.Background(), connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
			GroupId: "g", MemberId: "a", MemberEpoch: first.GetMemberEpoch(), SubscribedTopicNames: []string{"orders"}}))
		for range 3 {
			rc = heartbeat(t, c, "c", rc.GetMemberEpoch())
			if slices.Contains(assigned(rc), 3) {
				t.Fatalf("c was given orders-3 while a still reads it")
			}
		}
		d, err := c.DescribeGroup(context.Background(), connect.NewRequest(&coordinatorv1.DescribeGroupRequest{GroupId: "g"}))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range d.Msg.GetGroup().GetMembers() {
			if m.GetMemberId() == "a" && !slices.Contains(m.GetAssignment().GetPartitions()[0].GetPartitions(), 3) {
				t.Fatalf("a no longer holds orders-3 after its late heartbeat: %v", m.GetAssignment())
			}
		}
	})
}

// TestCloseHandsGroupsOverAtOnce: Close releases the leases of the groups
// an instance owns, so another instance on the same database takes a group
// over before its lease (a minute here) runs out; Ready fails once Close
// has begun, and a second Close is harmless.
func TestCloseHandsGroupsOverAtOnce(t *testing.T) {
	s := openStore(t, "sqlite")
	t.Cleanup(func() { _ = s.Close() })
	parts := map[string]int32{"orders": 2}
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(&metadataGateway{parts: parts}))
	gw := httptest.NewServer(mux)
	t.Cleanup(gw.Close)
	start := func(id string) *Coordinator {
		cfg := &Config{InstanceID: id, Gateway: gw.URL, SessionTimeout: time.Minute, OwnershipLease: time.Minute, LagInterval: time.Hour}
		c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: gw.Client(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()

	first := start("coordinator-a")
	if err := first.Ready(ctx); err != nil {
		t.Fatalf("Ready before Close: %v", err)
	}
	if got := assigned(heartbeat(t, first, "m1", 0)); len(got) != 2 {
		t.Fatalf("m1 assigned %v, want both partitions", got)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := first.Ready(ctx); err == nil {
		t.Error("Ready after Close: nil, want an error")
	}
	if err := first.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	second := start("coordinator-b")
	t.Cleanup(func() { second.Close() })
	resp, err := second.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: "g", MemberId: "m2", SubscribedTopicNames: []string{"orders"}}))
	if err != nil {
		t.Fatalf("the group did not move to the second instance at once: %v", err)
	}
	if resp.Msg.GetMemberEpoch() == 0 {
		t.Errorf("m2 joined with epoch 0: %v", resp.Msg)
	}
}

// TestRegexSubscriptionTakesTopicsCreatedLater: a member subscribed with
// a regular expression (KIP-848's SubscribedTopicRegex) is assigned the
// topics whose whole name matches, and a topic created later once the
// coordinator sees it; DescribeGroup shows the expression; one that does
// not compile is refused.
func TestRegexSubscriptionTakesTopicsCreatedLater(t *testing.T) {
	c, gw := startWithGateway(t, openStore(t, "sqlite"), map[string]int32{"orders-a": 2, "orders": 1, "other": 1})
	beat := func(epoch int32, regex string) (*coordinatorv1.ConsumerGroupHeartbeatResponse, error) {
		resp, err := c.ConsumerGroupHeartbeat(context.Background(), connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
			GroupId: "g", MemberId: "m", MemberEpoch: epoch, SubscribedTopicRegex: regex}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	names := func(r *coordinatorv1.ConsumerGroupHeartbeatResponse) []string {
		var out []string
		for _, tp := range r.GetAssignment().GetPartitions() {
			for _, p := range tp.GetPartitions() {
				out = append(out, fmt.Sprintf("%s-%d", tp.GetTopic(), p))
			}
		}
		slices.Sort(out)
		return out
	}
	r, err := beat(0, "orders-.*")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(r); !slices.Equal(got, []string{"orders-a-0", "orders-a-1"}) {
		t.Fatalf("joined with orders-.*: assigned %v, want orders-a's two partitions (not orders, not other)", got)
	}
	epoch := r.GetMemberEpoch()
	gw.create("orders-b", 1)
	var last []string
	testwait.Until(t, 30*time.Second, "orders-b, created later, to be assigned", func() error {
		r, err := beat(epoch, "orders-.*")
		if err != nil {
			return err
		}
		epoch = r.GetMemberEpoch()
		if r.GetAssignment() != nil {
			last = names(r)
		}
		if !slices.Equal(last, []string{"orders-a-0", "orders-a-1", "orders-b-0"}) {
			return fmt.Errorf("assigned %v", last)
		}
		return nil
	})
	d, err := c.DescribeGroup(context.Background(), connect.NewRequest(&coordinatorv1.DescribeGroupRequest{GroupId: "g"}))
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Msg.GetGroup().GetMembers()[0]; m.GetSubscribedTopicRegex() != "orders-.*" || !slices.Equal(m.GetSubscribedTopicNames(), []string{"orders-a", "orders-b"}) {
		t.Fatalf("described member: regex %q topics %v", m.GetSubscribedTopicRegex(), m.GetSubscribedTopicNames())
	}
	if _, err := beat(epoch, "orders-("); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "does not compile") {
		t.Fatalf("a regular expression that does not compile: %v, want INVALID_ARGUMENT", err)
	}
}
