package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/internal/classic"
	"github.com/strata-mq/strata/services/coordinator/internal/group"
)

func classicJoin(t *testing.T, c *Coordinator, group, member string, sessionMs int32) *coordinatorv1.ClassicJoinGroupResponse {
	t.Helper()
	resp, err := c.ClassicJoinGroup(context.Background(), connect.NewRequest(&coordinatorv1.ClassicJoinGroupRequest{
		GroupId: group, MemberId: member, ProtocolType: "connect", SessionTimeoutMs: sessionMs, RebalanceTimeoutMs: 60000,
		Protocols: []*coordinatorv1.ClassicProtocol{{Name: "sessioned", Metadata: []byte("worker")}}}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

// TestClassicGroupSurvivesRestart: a classic group's generation, leader,
// protocol and assignments are in the offsets database, so the next
// coordinator instance answers its members as the first did; a member's
// commit is checked against the generation, and the group is refused to
// KIP-848 members while it has classic ones.
func TestClassicGroupSurvivesRestart(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			t.Cleanup(func() { _ = s.Close() })
			mux := http.NewServeMux()
			mux.Handle(gatewayv1connect.NewGatewayServiceHandler(&metadataGateway{parts: map[string]int32{"orders": 2}}))
			gw := httptest.NewServer(mux)
			t.Cleanup(gw.Close)
			start := func(id string) *Coordinator {
				cfg := &Config{InstanceID: id, Gateway: gw.URL, SessionTimeout: time.Minute, OwnershipLease: time.Minute, LagInterval: time.Hour}
				c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: gw.Client(), Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			ctx := context.Background()
			first := start("coordinator-a")
			j := classicJoin(t, first, "g", "", 30000)
			if j.GetErrorCode() != 0 || j.GetGeneration() != 1 || j.GetLeaderId() != j.GetMemberId() {
				t.Fatalf("join = %v", j)
			}
			id := j.GetMemberId()
			assignment := []byte("\x00\x01leader\xffuser data")
			sr, err := first.ClassicSyncGroup(ctx, connect.NewRequest(&coordinatorv1.ClassicSyncGroupRequest{GroupId: "g", MemberId: id, Generation: 1,
				Assignments: []*coordinatorv1.ClassicAssignment{{MemberId: id, Assignment: assignment}}}))
			if err != nil || sr.Msg.GetErrorCode() != 0 || string(sr.Msg.GetAssignment()) != string(assignment) {
				t.Fatalf("sync = %v, %v", sr, err)
			}
			if d := commit(t, first, id, 1, 0, 0, 5); d != nil {
				t.Fatalf("commit at the generation: %v", d)
			}
			_, err = first.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "k", SubscribedTopicNames: []string{"orders"}}))
			if d := apierr.AsDetail(err); d.GetReason() != commonv1.Reason_REASON_GROUP_ID_NOT_FOUND {
				t.Fatalf("KIP-848 heartbeat to a classic group: %v; want GROUP_ID_NOT_FOUND", err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			second := start("coordinator-b")
			hb, err := second.ClassicHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ClassicHeartbeatRequest{GroupId: "g", MemberId: id, Generation: 1}))
			if err != nil || hb.Msg.GetErrorCode() != 0 {
				t.Fatalf("heartbeat after the handover = %v, %v", hb, err)
			}
			sr, err = second.ClassicSyncGroup(ctx, connect.NewRequest(&coordinatorv1.ClassicSyncGroupRequest{GroupId: "g", MemberId: id, Generation: 1}))
			if err != nil || sr.Msg.GetErrorCode() != 0 || string(sr.Msg.GetAssignment()) != string(assignment) || sr.Msg.GetProtocolName() != "sessioned" || sr.Msg.GetProtocolType() != "connect" {
				t.Fatalf("sync after the handover = %v, %v", sr, err)
			}
			if d := commit(t, second, id, 0, 0, 0, 6); d.GetReason() != commonv1.Reason_REASON_ILLEGAL_GENERATION {
				t.Fatalf("commit at another generation: %v; want ILLEGAL_GENERATION", d)
			}
			if d := commit(t, second, id, 1, 0, 0, 7); d != nil || committed(t, second, 0) != 7 {
				t.Fatalf("commit after the handover: %v", d)
			}
		})
	}
}

// TestClassicJoinOfKIP848Group: a JoinGroup to a group with KIP-848
// members answers INCONSISTENT_GROUP_PROTOCOL, as Kafka.
func TestClassicJoinOfKIP848Group(t *testing.T) {
	c := startTestCoordinator(t, openStore(t, "sqlite"), map[string]int32{"orders": 2})
	heartbeat(t, c, "m1", 0)
	if j := classicJoin(t, c, "g", "", 30000); j.GetErrorCode() != int32(classic.ErrInconsistentGroupProtocol) {
		t.Fatalf("join = %v; want INCONSISTENT_GROUP_PROTOCOL", j)
	}
}

// TestClassicMemberExpires: a classic member that stops heartbeating is
// removed after its own session timeout, and the group is empty again.
func TestClassicMemberExpires(t *testing.T) {
	s := openStore(t, "sqlite")
	c := startTestCoordinator(t, s, nil)
	j := classicJoin(t, c, "quiet", "", 300)
	if j.GetErrorCode() != 0 {
		t.Fatalf("join = %v", j)
	}
	testwait.Until(t, 30*time.Second, "the silent member to be removed", func() error {
		resp, err := c.ListGroups(context.Background(), connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
		if err != nil {
			return err
		}
		for _, g := range resp.Msg.GetGroups() {
			if g.GetGroupId() == "quiet" && g.GetMemberCount() == 0 && g.GetState() == coordinatorv1.GroupState_GROUP_STATE_EMPTY {
				return nil
			}
		}
		return fmt.Errorf("groups %v", resp.Msg.GetGroups())
	})
	// The removal is saved with it (under the same lock), so the next
	// owner does not bring the member back.
	if saved, ok, err := s.LoadGroup(context.Background(), "quiet"); err != nil || !ok || saved.MemberCount != 0 || saved.State != group.StateEmpty {
		t.Fatalf("saved group: found %v, state %q, %d members, err %v; want it empty", ok, saved.State, saved.MemberCount, err)
	}
	hb, err := c.ClassicHeartbeat(context.Background(), connect.NewRequest(&coordinatorv1.ClassicHeartbeatRequest{GroupId: "quiet", MemberId: j.GetMemberId(), Generation: j.GetGeneration()}))
	if err != nil || hb.Msg.GetErrorCode() != int32(classic.ErrUnknownMemberID) {
		t.Fatalf("heartbeat of the removed member = %v, %v; want UNKNOWN_MEMBER_ID", hb, err)
	}
}

// TestClassicMemberIDRequired: from JoinGroup v4 a new member is given an
// id first (KIP-394), and the join with it makes it a member.
func TestClassicMemberIDRequired(t *testing.T) {
	c := startTestCoordinator(t, openStore(t, "sqlite"), nil)
	req := &coordinatorv1.ClassicJoinGroupRequest{GroupId: "g", ProtocolType: "sr", SessionTimeoutMs: 30000, RebalanceTimeoutMs: 60000,
		RequireKnownMemberId: true, Protocols: []*coordinatorv1.ClassicProtocol{{Name: "v0", Metadata: []byte("{}")}}}
	first, err := c.ClassicJoinGroup(context.Background(), connect.NewRequest(req))
	if err != nil || first.Msg.GetErrorCode() != int32(classic.ErrMemberIDRequired) || first.Msg.GetMemberId() == "" {
		t.Fatalf("first join = %v, %v; want MEMBER_ID_REQUIRED with an id", first, err)
	}
	req.MemberId = first.Msg.GetMemberId()
	second, err := c.ClassicJoinGroup(context.Background(), connect.NewRequest(req))
	if err != nil || second.Msg.GetErrorCode() != 0 || second.Msg.GetLeaderId() != req.MemberId || second.Msg.GetProtocolType() != "sr" {
		t.Fatalf("join with the id = %v, %v", second, err)
	}
}

// describeClassic shows each member's metadata for the protocol the group
// chose, which need not be the member's first.
func TestDescribeClassicChosenProtocolMetadata(t *testing.T) {
	g := classic.New("g")
	now := time.Now()
	join := func(member, newID string, protos ...classic.Protocol) {
		t.Helper()
		_, got := g.Join(classic.Join{MemberID: member, ProtocolType: "consumer", Protocols: protos, SessionTimeout: time.Minute, RebalanceTimeout: time.Minute},
			func() string { return newID }, now)
		if got != newID {
			t.Fatalf("joined as %q, want %q", got, newID)
		}
	}
	both := []classic.Protocol{{Name: "range", Metadata: []byte("a-range")}, {Name: "sticky", Metadata: []byte("a-sticky")}}
	join("", "a", both...)
	join("", "b", classic.Protocol{Name: "sticky", Metadata: []byte("b-sticky")})
	join("a", "a", both...) // a joins the rebalance b started
	if g.State != classic.StateCompletingRebalance || g.Protocol != "sticky" {
		t.Fatalf("state %s protocol %q, want CompletingRebalance with sticky", g.State, g.Protocol)
	}
	d := describeClassic("g", "coordinator-a", g)
	want := map[string]string{"a": "a-sticky", "b": "b-sticky"}
	if len(d.GetMembers()) != len(want) {
		t.Fatalf("members %v, want a and b", d.GetMembers())
	}
	for _, m := range d.GetMembers() {
		if got := string(m.GetClassicMetadata()); got != want[m.GetMemberId()] {
			t.Errorf("member %s metadata %q, want %q", m.GetMemberId(), got, want[m.GetMemberId()])
		}
	}
}
