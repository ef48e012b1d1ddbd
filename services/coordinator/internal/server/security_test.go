package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// The tests here call the handlers in process, with the principal in the
// context as lib/serve's authentication middleware leaves it (as); the
// ACLs reach the coordinator's guard through a fake controller's
// metadata stream (--controller).

// as is a request context of principal p ("User:alice", "Service:gateway").
func as(t *testing.T, p string) context.Context {
	t.Helper()
	pr, err := acl.ParsePrincipal(p)
	if err != nil {
		t.Fatal(err)
	}
	return authn.NewContext(context.Background(), authn.Info{Principal: pr, Method: authn.MethodToken})
}

// binding is an ACL binding allowing principal op on a topic or a group.
func binding(principal string, op acl.Operation, rt acl.ResourceType, name string) *commonv1.AclBinding {
	return &commonv1.AclBinding{Principal: principal, Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW,
		Operation: commonv1.AclOperation(op), ResourceType: commonv1.AclResourceType(rt), ResourceName: name}
}

// secureCoordinator is a coordinator whose guard enforces (--require-auth)
// and follows a fake controller's metadata stream (--controller).
type secureCoordinator struct {
	*Coordinator
	t    *testing.T
	ctrl *fakecluster.Cluster
}

func startSecureCoordinator(t *testing.T, s offsetstore.Store, parts map[string]int32) *secureCoordinator {
	t.Helper()
	ctrl := fakecluster.New(0)
	t.Cleanup(ctrl.Close)
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(&metadataGateway{parts: parts}))
	gw := httptest.NewServer(mux)
	t.Cleanup(gw.Close)
	logger := slog.New(slog.DiscardHandler)
	g, err := guard.New(context.Background(), guard.Config{RequireAuth: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{InstanceID: "coordinator-test", Gateway: gw.URL, Controller: ctrl.ControllerURL(),
		SessionTimeout: time.Minute, OwnershipLease: time.Minute, LagInterval: time.Hour}
	var nextPID atomic.Int64
	pids := func(context.Context) (int64, int32, error) { return 1000 + 10*nextPID.Add(1), 10, nil }
	c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: gw.Client(), Logger: logger, Guard: g, ProducerIDs: pids})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = s.Close()
	})
	testwait.Until(t, 30*time.Second, "the coordinator to be ready", func() error { return c.Ready(context.Background()) })
	return &secureCoordinator{Coordinator: c, t: t, ctrl: ctrl}
}

// setACLs publishes acls through the controller's stream and waits until
// the coordinator's guard has them.
func (c *secureCoordinator) setACLs(acls ...*commonv1.AclBinding) {
	c.t.Helper()
	st := &commonv1.SecurityState{Acls: acls}
	c.ctrl.SetSecurity(st)
	testwait.Until(c.t, 30*time.Second, "the ACLs in the coordinator's guard", func() error {
		if got := c.guard.Applied(); !proto.Equal(got, st) {
			return testwait.ErrNotYet
		}
		return nil
	})
}

func (c *secureCoordinator) heartbeat(ctx context.Context, groupID, member string, epoch int32, topics ...string) (*coordinatorv1.ConsumerGroupHeartbeatResponse, error) {
	resp, err := c.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: groupID, MemberId: member, MemberEpoch: epoch, SubscribedTopicNames: topics}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func (c *secureCoordinator) commit(ctx context.Context, groupID, member string, epoch int32, topic string, p int32, offset int64) (*commonv1.ErrorDetail, error) {
	resp, err := c.OffsetCommit(ctx, connect.NewRequest(&coordinatorv1.OffsetCommitRequest{GroupId: groupID, MemberId: member, MemberEpoch: epoch,
		Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: topic, Partition: p, CommittedOffset: offset, CommittedLeaderEpoch: -1}}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetPartitions()[0].GetError(), nil
}

// committed is g's committed offset of orders-p, read under the
// gateway's identity.
func (c *secureCoordinator) committed(p int32) int64 {
	c.t.Helper()
	resp, err := c.OffsetFetch(as(c.t, "Service:gateway"), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g",
		Topics: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{p}}}}))
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Msg.GetOffsets()[0].GetCommittedOffset()
}

// checkDenied fails unless d is a one-line PERMISSION_DENIED naming every
// one of words.
func checkDenied(t *testing.T, what string, d *commonv1.ErrorDetail, words ...string) {
	t.Helper()
	if d.GetCode() != commonv1.Code_CODE_PERMISSION_DENIED {
		t.Fatalf("%s: %v, want PERMISSION_DENIED", what, d)
	}
	if strings.Contains(d.GetMessage(), "\n") {
		t.Errorf("%s: refusal is not one line: %q", what, d.GetMessage())
	}
	for _, w := range append([]string{"permission denied"}, words...) {
		if !strings.Contains(d.GetMessage(), w) {
			t.Errorf("%s: refusal %q does not name %q", what, d.GetMessage(), w)
		}
	}
}

// forEachSecureStore runs fn with a secure coordinator on SQLite and on
// Postgres (the test fails when Postgres is absent).
func forEachSecureStore(t *testing.T, parts map[string]int32, fn func(t *testing.T, c *secureCoordinator)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { fn(t, startSecureCoordinator(t, openStore(t, kind), parts)) })
	}
}

// Joining and committing need read on the group; committing a topic's
// offsets needs read on the topic, which describe (enough to be
// assigned it) is not.
func TestGroupAndTopicReadToJoinAndCommit(t *testing.T) {
	forEachSecureStore(t, map[string]int32{"orders": 2}, func(t *testing.T, c *secureCoordinator) {
		c.setACLs(
			binding("User:alice", acl.Read, acl.Group, "g"), binding("User:alice", acl.Describe, acl.Topic, "orders"),
			binding("User:bob", acl.Read, acl.Topic, "orders"),
		)
		_, err := c.heartbeat(as(t, "User:bob"), "g", "b", 0, "orders")
		checkDenied(t, "bob's join", apierr.AsDetail(err), "User:bob", "read", "group g")
		_, err = c.commit(as(t, "User:bob"), "g", "b", 1, "orders", 0, 10)
		checkDenied(t, "bob's commit", apierr.AsDetail(err), "User:bob", "read", "group g")
		_, err = c.LeaveGroup(as(t, "User:bob"), connect.NewRequest(&coordinatorv1.LeaveGroupRequest{GroupId: "g",
			Members: []*coordinatorv1.MemberIdentity{{MemberId: "a"}}}))
		checkDenied(t, "bob's leave", apierr.AsDetail(err), "User:bob", "read", "group g")

		r, err := c.heartbeat(as(t, "User:alice"), "g", "a", 0, "orders")
		if err != nil {
			t.Fatalf("alice's join: %v", err)
		}
		if got := assigned(r); len(got) != 2 {
			t.Fatalf("alice assigned %v, want both partitions of orders", got)
		}
		d, err := c.commit(as(t, "User:alice"), "g", "a", r.GetMemberEpoch(), "orders", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		checkDenied(t, "alice's commit with describe on orders", d, "User:alice", "read", "topic orders")
		if got := c.committed(0); got != -1 {
			t.Fatalf("orders-0 committed at %d after a refused commit", got)
		}

		c.setACLs(binding("User:alice", acl.Read, acl.Group, "g"), binding("User:alice", acl.Read, acl.Topic, "orders"))
		if d, err := c.commit(as(t, "User:alice"), "g", "a", r.GetMemberEpoch(), "orders", 0, 10); err != nil || d != nil {
			t.Fatalf("alice's commit once granted read on orders: %v %v", d, err)
		}
		if got := c.committed(0); got != 10 {
			t.Fatalf("orders-0 committed at %d, want 10", got)
		}
	})
}

// Subscribed topics the member's principal may not describe are left out
// of its assignment, and a grant adds them at its next heartbeat.
func TestUnauthorizedSubscribedTopicsAreNotAssigned(t *testing.T) {
	forEachSecureStore(t, map[string]int32{"orders": 2, "secret": 2}, func(t *testing.T, c *secureCoordinator) {
		c.setACLs(binding("User:alice", acl.Read, acl.Group, "g"), binding("User:alice", acl.Read, acl.Topic, "orders"))
		r, err := c.heartbeat(as(t, "User:alice"), "g", "a", 0, "orders", "secret")
		if err != nil {
			t.Fatal(err)
		}
		var topics []string
		for _, tp := range r.GetAssignment().GetPartitions() {
			topics = append(topics, tp.GetTopic())
		}
		if !slices.Equal(topics, []string{"orders"}) || len(assigned(r)) != 2 {
			t.Fatalf("alice assigned %v, want orders-0 and orders-1 only", r.GetAssignment())
		}

		c.setACLs(binding("User:alice", acl.Read, acl.Group, "g"), binding("User:alice", acl.Read, acl.Topic, "orders"),
			binding("User:alice", acl.Describe, acl.Topic, "secret"))
		if r, err = c.heartbeat(as(t, "User:alice"), "g", "a", r.GetMemberEpoch()); err != nil {
			t.Fatal(err)
		}
		if got := assigned(r); len(got) != 4 {
			t.Fatalf("alice assigned %v once granted describe on secret, want all four partitions", r.GetAssignment())
		}
	})
}

// ListGroups lists only the groups the caller may describe; describing,
// deleting, locating and reading a group's offsets each need their
// operation.
func TestGroupListingAndAdminNeedTheirOperations(t *testing.T) {
	forEachSecureStore(t, map[string]int32{"orders": 1, "secret": 1}, func(t *testing.T, c *secureCoordinator) {
		c.setACLs(
			binding("User:alice", acl.Describe, acl.Group, "g1"), binding("User:alice", acl.Describe, acl.Topic, "orders"),
		)
		// Offsets in g1 for both topics and in g2, committed under the
		// gateway's identity as an operator's commit through it would be.
		gw := as(t, "Service:gateway")
		for _, gt := range [][2]string{{"g1", "orders"}, {"g1", "secret"}, {"g2", "orders"}} {
			if d, err := c.commit(gw, gt[0], "", -1, gt[1], 0, 7); err != nil || d != nil {
				t.Fatalf("commit of %s-0 to %s: %v %v", gt[1], gt[0], d, err)
			}
		}

		lg, err := c.ListGroups(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range lg.Msg.GetGroups() {
			ids = append(ids, g.GetGroupId())
		}
		if !slices.Equal(ids, []string{"g1"}) {
			t.Fatalf("alice lists %v, want [g1]", ids)
		}
		if lg, err = c.ListGroups(gw, connect.NewRequest(&coordinatorv1.ListGroupsRequest{})); err != nil || len(lg.Msg.GetGroups()) != 2 {
			t.Fatalf("the gateway lists %v, %v; want both groups", lg.Msg.GetGroups(), err)
		}

		if _, err := c.DescribeGroup(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.DescribeGroupRequest{GroupId: "g1"})); err != nil {
			t.Fatalf("alice describing g1: %v", err)
		}
		_, err = c.DescribeGroup(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.DescribeGroupRequest{GroupId: "g2"}))
		checkDenied(t, "describe g2", apierr.AsDetail(err), "User:alice", "describe", "group g2")
		_, err = c.DeleteGroup(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.DeleteGroupRequest{GroupId: "g1"}))
		checkDenied(t, "delete g1", apierr.AsDetail(err), "User:alice", "delete", "group g1")
		_, err = c.ResetOffsets(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.ResetOffsetsRequest{GroupId: "g1",
			Spec: coordinatorv1.ResetSpec_RESET_SPEC_EARLIEST, Topics: []*commonv1.TopicPartitions{{Topic: "orders"}}}))
		checkDenied(t, "reset g1", apierr.AsDetail(err), "User:alice", "read", "group g1")
		_, err = c.LocateGroup(as(t, "User:bob"), connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "g1"}))
		checkDenied(t, "bob locating g1", apierr.AsDetail(err), "User:bob", "describe", "group g1")
		if _, err := c.LocateGroup(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "g1"})); err != nil {
			t.Fatalf("alice locating g1: %v", err)
		}

		// Offsets: the topics alice may not describe are left out of a
		// fetch of everything, and naming one is refused.
		of, err := c.OffsetFetch(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g1"}))
		if err != nil {
			t.Fatal(err)
		}
		if o := of.Msg.GetOffsets(); len(o) != 1 || o[0].GetTopic() != "orders" || o[0].GetCommittedOffset() != 7 {
			t.Fatalf("alice fetches g1's offsets %v, want orders-0 at 7 only", o)
		}
		_, err = c.OffsetFetch(as(t, "User:alice"), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g1",
			Topics: []*commonv1.TopicPartitions{{Topic: "secret"}}}))
		checkDenied(t, "offsets of secret", apierr.AsDetail(err), "User:alice", "describe", "topic secret")
	})
}

// Without --require-auth every request is allowed, whatever the ACLs say.
func TestWithoutRequireAuthEverythingIsAllowed(t *testing.T) {
	c := startTestCoordinator(t, openStore(t, "sqlite"), map[string]int32{"orders": 1})
	c.guard.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{binding("User:alice", acl.Read, acl.Group, "other")}})
	resp, err := c.ConsumerGroupHeartbeat(as(t, "User:bob"), connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: "g", MemberId: "b", SubscribedTopicNames: []string{"orders"}}))
	if err != nil || len(assigned(resp.Msg)) != 1 {
		t.Fatalf("bob's join on a coordinator that does not enforce: %v %v", resp, err)
	}
	lg, err := c.ListGroups(as(t, "User:bob"), connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
	if err != nil || len(lg.Msg.GetGroups()) != 1 {
		t.Fatalf("bob's listing: %v %v", lg, err)
	}
}

// --require-auth needs --controller, where the ACLs come from; the
// problem is one line naming the flag.
func TestConfigNeedsControllerWithRequireAuth(t *testing.T) {
	cfg := &Config{DataDir: t.TempDir(), Gateway: DefaultGateway, SessionTimeout: DefaultSessionTimeout,
		OwnershipLease: DefaultOwnershipLease, LagInterval: DefaultLagInterval}
	cfg.RequireAuth = true
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--controller") || !strings.Contains(err.Error(), "--require-auth") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("--require-auth without --controller: %v, want one line naming both", err)
	}
	cfg.Controller = "https://controller-0:9093,https://controller-1:9093"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with --controller: %v", err)
	}
	cfg.Controller = "ftp://controller"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--controller") {
		t.Fatalf("a bad controller URL: %v", err)
	}
}

// With --controller the coordinator is not ready before the metadata
// (and so the ACLs) have arrived.
func TestNotReadyBeforeTheFirstSnapshot(t *testing.T) {
	s := openStore(t, "sqlite")
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // nothing answers there
	cfg := &Config{InstanceID: "coordinator-test", Gateway: dead.URL, Controller: dead.URL,
		SessionTimeout: time.Minute, OwnershipLease: time.Minute, LagInterval: time.Hour}
	c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: serve.NewHTTPClient(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	if err := c.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("Ready with no controller reachable: %v, want an error about metadata", err)
	}
}

// A transactional id is a resource of its own, as Kafka's TransactionalId:
// write on it to initialize its producer (which fences the one before) and
// to end its transactions, describe on it to find its coordinator and see
// its state. Write on the topic is not enough.
func TestTransactionalIDNeedsItsOwnACL(t *testing.T) {
	forEachSecureStore(t, map[string]int32{"orders": 2}, func(t *testing.T, c *secureCoordinator) {
		etl := binding("User:alice", acl.Write, acl.TransactionalID, "etl-")
		etl.PatternType = commonv1.AclPatternType_ACL_PATTERN_TYPE_PREFIXED
		c.setACLs(etl,
			binding("User:alice", acl.Write, acl.Topic, "orders"),
			binding("User:bob", acl.Write, acl.Topic, "orders"),
			binding("User:bob", acl.Describe, acl.TransactionalID, "etl-1"),
		)
		alice, bob, carol := as(t, "User:alice"), as(t, "User:bob"), as(t, "User:carol")
		initAs := func(ctx context.Context, id string) (*coordinatorv1.InitTransactionalProducerResponse, error) {
			resp, err := c.InitTransactionalProducer(ctx, connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
				TransactionalId: id, TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		}
		refused := func(what string, err error) {
			t.Helper()
			if apierr.ReasonOf(err) != commonv1.Reason_REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED {
				t.Fatalf("%s: %v, want REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED", what, err)
			}
			checkDenied(t, what, apierr.AsDetail(err), "transactional-id")
		}

		// bob may write the topic but not run etl-1's producer: he cannot
		// fence alice's.
		_, err := initAs(bob, "etl-1")
		refused("bob initializes etl-1", err)
		p, err := initAs(alice, "etl-1")
		if err != nil {
			t.Fatalf("alice initializes etl-1: %v", err)
		}
		_, err = initAs(alice, "other")
		refused("alice initializes other", err)
		_, err = c.EndTxn(bob, connect.NewRequest(&coordinatorv1.EndTxnRequest{TransactionalId: "etl-1", ProducerId: p.GetProducerId(), ProducerEpoch: p.GetProducerEpoch()}))
		refused("bob ends etl-1's transaction", err)
		_, err = c.AddPartitionsToTxn(bob, connect.NewRequest(&coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: "etl-1", ProducerId: p.GetProducerId(),
			ProducerEpoch: p.GetProducerEpoch(), Partitions: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0}}}}))
		refused("bob adds a partition to etl-1's transaction", err)
		if _, err := c.AddPartitionsToTxn(alice, connect.NewRequest(&coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: "etl-1", ProducerId: p.GetProducerId(),
			ProducerEpoch: p.GetProducerEpoch(), Partitions: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0}}}})); err != nil {
			t.Fatalf("alice adds a partition: %v", err)
		}
		_, err = c.LocateGroup(carol, connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "etl-1", KeyType: coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION}))
		refused("carol locates etl-1", err)

		// Listing and describing show only what the caller may describe.
		list := func(ctx context.Context) []string {
			t.Helper()
			resp, err := c.ListTransactions(ctx, connect.NewRequest(&coordinatorv1.ListTransactionsRequest{}))
			if err != nil {
				t.Fatalf("ListTransactions: %v", err)
			}
			var ids []string
			for _, l := range resp.Msg.GetTransactions() {
				ids = append(ids, l.GetTransactionalId())
			}
			return ids
		}
		if got := list(bob); !slices.Equal(got, []string{"etl-1"}) {
			t.Errorf("bob lists %v, want [etl-1]", got)
		}
		if got := list(carol); len(got) != 0 {
			t.Errorf("carol lists %v, want nothing", got)
		}
		desc, err := c.DescribeTransactions(carol, connect.NewRequest(&coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{"etl-1"}}))
		if err != nil {
			t.Fatal(err)
		}
		d := desc.Msg.GetTransactions()[0]
		if d.GetError().GetReason() != commonv1.Reason_REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED || d.GetProducerId() != 0 {
			t.Errorf("carol describes etl-1: %v", d)
		}
		desc, err = c.DescribeTransactions(bob, connect.NewRequest(&coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{"etl-1"}}))
		if err != nil {
			t.Fatal(err)
		}
		if d := desc.Msg.GetTransactions()[0]; d.GetError() != nil || d.GetProducerId() != p.GetProducerId() || len(d.GetPartitions()) != 1 {
			t.Errorf("bob describes etl-1: %v", d)
		}
	})
}
