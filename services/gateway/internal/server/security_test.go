package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/token"
)

// fakeClock is the guard's clock in the quota tests: time moves only when
// a test advances it, so throttles and holds are exact.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// secureGateway is a gateway behind its guard's authentication, as
// lib/serve mounts it, on loopback h2c; callers authenticate with the
// tokens of users the metadata stream announces, as a real cluster's
// would. User:admin is a super user.
type secureGateway struct {
	t       *testing.T
	g       *Gateway
	guard   *guard.Guard
	url     string
	clock   *fakeClock
	meta    chan *controllerv1.WatchMetadataResponse // stream messages after the snapshot
	users   []*commonv1.UserCredential
	tokens  map[string]token.Token // by user name
	version int64
	// upstream records the principal each call of the gateway forwarded.
	upstream *principalRecorder
}

// principalRecorder is the gateway's transport in these tests: it records
// the authn.ForwardHeader of each upstream call ("" for a call the
// gateway made as itself), the metadata watch left out.
type principalRecorder struct {
	rt  http.RoundTripper
	mu  sync.Mutex
	got []string
}

func (r *principalRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/WatchMetadata") {
		r.mu.Lock()
		r.got = append(r.got, req.Header.Get(authn.ForwardHeader))
		r.mu.Unlock()
	}
	return r.rt.RoundTrip(req)
}

func (r *principalRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = nil
}

func (r *principalRecorder) principals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// secureSetup is what startSecure builds: the gateway's config (the
// controller URL set by the caller), the snapshot to send first (its
// security state is replaced), the users, and the first ACLs and quotas.
type secureSetup struct {
	require  bool
	cfg      *Config
	fc       *fakeController
	snapshot *controllerv1.WatchMetadataResponse
	users    []string
	acls     []*commonv1.AclBinding
	quotas   []*commonv1.Quota
}

func startSecure(t *testing.T, s secureSetup) *secureGateway {
	t.Helper()
	sg := &secureGateway{
		t: t, clock: &fakeClock{now: time.Unix(1_700_000_000, 0)},
		meta: make(chan *controllerv1.WatchMetadataResponse, 16), tokens: map[string]token.Token{},
	}
	for _, name := range s.users {
		tok, err := token.New()
		if err != nil {
			t.Fatal(err)
		}
		h := token.Hash(tok)
		sg.tokens[name] = tok
		sg.users = append(sg.users, &commonv1.UserCredential{Name: name, TokenSha256: h[:]})
	}
	snap := proto.CloneOf(s.snapshot)
	snap.GetSnapshot().Security = &commonv1.SecurityState{Users: sg.users, Acls: s.acls, Quotas: s.quotas}
	sg.version = snap.GetVersion()
	s.fc.scripts <- func(ctx context.Context, send func(*controllerv1.WatchMetadataResponse) error) error {
		if err := send(snap); err != nil {
			return err
		}
		for {
			select {
			case m := <-sg.meta:
				if err := send(m); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	gd, err := guard.New(context.Background(), guard.Config{RequireAuth: s.require, Now: sg.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.cfg
	cfg.ProducerIDBlockSize = DefaultProducerIDBlockSize
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sg.guard = gd
	hc := serve.NewHTTPClient()
	sg.upstream = &principalRecorder{rt: hc.Transport}
	hc.Transport = guard.ForwardingTransport(sg.upstream)
	sg.g, err = Start(context.Background(), cfg, Options{
		HTTPClient: hc, Guard: gd,
		WatchMinBackoff: 10 * time.Millisecond, WatchMaxBackoff: 50 * time.Millisecond, RetryBackoff: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sg.g.Close() })
	mux := http.NewServeMux()
	mux.Handle(sg.g.Handler())
	sg.url = serveOn(t, gd.Wrap(mux))
	waitReady(t, sg.g)
	sg.waitApplied(snap.GetSnapshot().GetSecurity())
	return sg
}

// waitApplied waits until the guard holds want: the gateway applies the
// stream's state right after the cache takes a message.
func (sg *secureGateway) waitApplied(want *commonv1.SecurityState) {
	sg.t.Helper()
	waitFor(sg.t, "the security state to reach the guard", func() bool { return proto.Equal(sg.guard.Applied(), want) })
}

// setSecurity sends a delta that replaces the ACLs and quotas (the users
// stay) and waits until the gateway applied it.
func (sg *secureGateway) setSecurity(acls []*commonv1.AclBinding, quotas []*commonv1.Quota) {
	sg.t.Helper()
	sg.version++
	st := &commonv1.SecurityState{Users: sg.users, Acls: acls, Quotas: quotas}
	sg.meta <- &controllerv1.WatchMetadataResponse{Version: sg.version, Change: &controllerv1.WatchMetadataResponse_Delta{
		Delta: &controllerv1.MetadataDelta{Security: st},
	}}
	sg.waitApplied(st)
}

// client is a GatewayService client sending user's token; "" sends no
// credentials.
func (sg *secureGateway) client(user string) gatewayv1connect.GatewayServiceClient {
	var opts []connect.ClientOption
	if user != "" {
		tok, ok := sg.tokens[user]
		if !ok {
			sg.t.Fatalf("no user %q", user)
		}
		opts = append(opts, connect.WithInterceptors(bearer(tok.Reveal())))
	}
	return gatewayv1connect.NewGatewayServiceClient(serve.NewHTTPClient(), sg.url, opts...)
}

// bearer sends Authorization: Bearer text on every unary call.
func bearer(text string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+text)
			return next(ctx, req)
		}
	}
}

// binding is an ACL binding in its wire form; a name ending in * is a
// prefix.
func binding(who string, perm acl.Permission, op acl.Operation, rt acl.ResourceType, name string) *commonv1.AclBinding {
	b := acl.Binding{Principal: acl.User(who), Permission: perm, Operation: op, ResourceType: rt, ResourceName: name, PatternType: acl.Literal}
	if n := len(name); n > 1 && name[n-1] == '*' {
		b.ResourceName, b.PatternType = name[:n-1], acl.Prefixed
	}
	return guard.BindingToProto(b)
}

// groupCoordinator owns every group and answers the group calls the
// gateway passes through, recording them.
type groupCoordinator struct {
	// describe, when set, is the description DescribeGroup answers.
	describe *coordinatorv1.GroupDescription
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	self   string
	groups []*coordinatorv1.GroupListing

	mu    sync.Mutex
	calls []proto.Message
}

func (f *groupCoordinator) start(t *testing.T) string {
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(f))
	return serveOn(t, mux)
}

func (f *groupCoordinator) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, m)
}

// called returns the recorded calls other than LocateGroup and
// ListGroups.
func (f *groupCoordinator) called() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *groupCoordinator) LocateGroup(context.Context, *connect.Request[coordinatorv1.LocateGroupRequest]) (*connect.Response[coordinatorv1.LocateGroupResponse], error) {
	return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: "c1", Address: f.self, ListenerResolved: true}), nil
}

func (f *groupCoordinator) ListGroups(context.Context, *connect.Request[coordinatorv1.ListGroupsRequest]) (*connect.Response[coordinatorv1.ListGroupsResponse], error) {
	return connect.NewResponse(&coordinatorv1.ListGroupsResponse{Groups: f.groups}), nil
}

func (f *groupCoordinator) DescribeGroup(_ context.Context, req *connect.Request[coordinatorv1.DescribeGroupRequest]) (*connect.Response[coordinatorv1.DescribeGroupResponse], error) {
	f.record(req.Msg)
	d := &coordinatorv1.GroupDescription{GroupId: req.Msg.GetGroupId()}
	if f.describe != nil {
		d = proto.Clone(f.describe).(*coordinatorv1.GroupDescription)
		d.GroupId = req.Msg.GetGroupId()
	}
	return connect.NewResponse(&coordinatorv1.DescribeGroupResponse{Group: d}), nil
}

func (f *groupCoordinator) ResetOffsets(_ context.Context, req *connect.Request[coordinatorv1.ResetOffsetsRequest]) (*connect.Response[coordinatorv1.ResetOffsetsResponse], error) {
	f.record(req.Msg)
	return connect.NewResponse(&coordinatorv1.ResetOffsetsResponse{}), nil
}

func (f *groupCoordinator) DeleteGroup(_ context.Context, req *connect.Request[coordinatorv1.DeleteGroupRequest]) (*connect.Response[coordinatorv1.DeleteGroupResponse], error) {
	f.record(req.Msg)
	return connect.NewResponse(&coordinatorv1.DeleteGroupResponse{}), nil
}

// securedCluster starts a gateway enforcing ACLs over a fake cluster with
// topics orders (2 partitions), orders-eu and audit, a coordinator owning
// groups g, g-alice and g-bob, and users admin (allowed everything), alice and bob.
func securedCluster(t *testing.T, acls ...*commonv1.AclBinding) (*secureGateway, *fakeCluster, *fakeController, *groupCoordinator) {
	t.Helper()
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"orders", 0}, 1, 1)
	cl.setLeader(tp{"orders", 1}, 1, 1)
	cl.setLeader(tp{"orders-eu", 0}, 1, 1)
	cl.setLeader(tp{"audit", 0}, 1, 1)
	fc := newFakeController()
	fc.listing = &controllerv1.ListTopicsResponse{Topics: []*controllerv1.TopicListing{{Name: "audit"}, {Name: "orders"}, {Name: "orders-eu"}}}
	fc.describe = &controllerv1.DescribeTopicsResponse{Topics: []*controllerv1.TopicDescription{{Name: "audit"}, {Name: "orders"}, {Name: "orders-eu"}}}
	coord := &groupCoordinator{groups: []*coordinatorv1.GroupListing{{GroupId: "g"}, {GroupId: "g-alice"}, {GroupId: "g-bob"}}}
	coord.self = coord.start(t)
	sg := startSecure(t, secureSetup{
		require:  true,
		cfg:      &Config{Controllers: fc.start(t), Coordinators: coord.self},
		fc:       fc,
		snapshot: cl.snapshot(1, map[string]int32{"orders": 2, "orders-eu": 1, "audit": 1}),
		users:    []string{"admin", "alice", "bob"},
		// admin is allowed everything by ACLs: a super user's name is
		// reserved for its certificate, so no token user can be one.
		acls: append(acls,
			binding("admin", acl.Allow, acl.All, acl.Topic, acl.AnyResource),
			binding("admin", acl.Allow, acl.All, acl.Group, acl.AnyResource),
			binding("admin", acl.Allow, acl.All, acl.Cluster, acl.ClusterName)),
	})
	return sg, cl, fc, coord
}

// Every RPC refuses a caller without the ACL it needs with the one line
// naming the principal, the operation and the resource, and calls nothing
// upstream.
func TestRefusalsNameThePrincipalOperationAndResource(t *testing.T) {
	sg, _, fc, _ := securedCluster(t,
		binding("bob", acl.Allow, acl.Read, acl.Group, "g-bob"),
		binding("bob", acl.Allow, acl.Read, acl.Topic, "audit"),
		binding("bob", acl.Deny, acl.Read, acl.Topic, "audit"), // deny wins
	)
	bob := sg.client("bob")
	ctx := context.Background()
	orders := []*commonv1.TopicPartitions{{Topic: "orders"}}
	one := []*gatewayv1.JSONRecord{{ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}}}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Metadata", func() error {
			_, err := bob.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"orders"}}))
			return err
		}, "User:bob may not describe topic orders"},
		{"Metadata of a topic that does not exist", func() error {
			_, err := bob.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"nope"}}))
			return err
		}, "User:bob may not describe topic nope"},
		{"FindCoordinator", func() error {
			_, err := bob.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "g"}))
			return err
		}, "User:bob may not describe group g"},
		{"CreateTopic", func() error {
			_, err := bob.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{Name: "orders"}))
			return err
		}, "User:bob may not create topic orders"},
		{"DeleteTopic", func() error {
			_, err := bob.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: "orders"}))
			return err
		}, "User:bob may not delete topic orders"},
		{"DescribeTopics", func() error {
			_, err := bob.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{"orders"}}))
			return err
		}, "User:bob may not describe topic orders"},
		{"AlterTopicConfig", func() error {
			_, err := bob.AlterTopicConfig(ctx, connect.NewRequest(&gatewayv1.AlterTopicConfigRequest{Name: "orders"}))
			return err
		}, "User:bob may not alter topic orders"},
		{"CreatePartitions", func() error {
			_, err := bob.CreatePartitions(ctx, connect.NewRequest(&gatewayv1.CreatePartitionsRequest{Topic: "orders", Total: 4}))
			return err
		}, "User:bob may not alter topic orders"},
		{"DescribeCluster", func() error {
			_, err := bob.DescribeCluster(ctx, connect.NewRequest(&gatewayv1.DescribeClusterRequest{}))
			return err
		}, "User:bob may not describe cluster kafka-cluster"},
		{"ListPartitionReassignments", func() error {
			_, err := bob.ListPartitionReassignments(ctx, connect.NewRequest(&gatewayv1.ListPartitionReassignmentsRequest{}))
			return err
		}, "User:bob may not describe cluster kafka-cluster"},
		{"AlterPartitionReassignments", func() error {
			_, err := bob.AlterPartitionReassignments(ctx, connect.NewRequest(&gatewayv1.AlterPartitionReassignmentsRequest{}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"Rebalance", func() error {
			_, err := bob.Rebalance(ctx, connect.NewRequest(&gatewayv1.RebalanceRequest{DryRun: true}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"DrainNode", func() error {
			_, err := bob.DrainNode(ctx, connect.NewRequest(&gatewayv1.DrainNodeRequest{NodeId: 1}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"ElectLeaders", func() error {
			_, err := bob.ElectLeaders(ctx, connect.NewRequest(&gatewayv1.ElectLeadersRequest{}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"CreateUser", func() error {
			_, err := bob.CreateUser(ctx, connect.NewRequest(&gatewayv1.CreateUserRequest{Name: "mallory"}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"DeleteUser", func() error {
			_, err := bob.DeleteUser(ctx, connect.NewRequest(&gatewayv1.DeleteUserRequest{Name: "alice"}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"ListUsers", func() error {
			_, err := bob.ListUsers(ctx, connect.NewRequest(&gatewayv1.ListUsersRequest{}))
			return err
		}, "User:bob may not describe cluster kafka-cluster"},
		{"CreateAcls", func() error {
			_, err := bob.CreateAcls(ctx, connect.NewRequest(&gatewayv1.CreateAclsRequest{}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"DeleteAcls", func() error {
			_, err := bob.DeleteAcls(ctx, connect.NewRequest(&gatewayv1.DeleteAclsRequest{}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"DescribeAcls", func() error {
			_, err := bob.DescribeAcls(ctx, connect.NewRequest(&gatewayv1.DescribeAclsRequest{}))
			return err
		}, "User:bob may not describe cluster kafka-cluster"},
		{"SetQuota", func() error {
			_, err := bob.SetQuota(ctx, connect.NewRequest(&gatewayv1.SetQuotaRequest{Quota: &commonv1.Quota{Principal: "User:bob"}}))
			return err
		}, "User:bob may not alter cluster kafka-cluster"},
		{"ListQuotas", func() error {
			_, err := bob.ListQuotas(ctx, connect.NewRequest(&gatewayv1.ListQuotasRequest{}))
			return err
		}, "User:bob may not describe cluster kafka-cluster"},
		{"DescribeGroup", func() error {
			_, err := bob.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: "g"}))
			return err
		}, "User:bob may not describe group g"},
		{"ResetOffsets without the group", func() error {
			_, err := bob.ResetOffsets(ctx, connect.NewRequest(&gatewayv1.ResetOffsetsRequest{GroupId: "g", Topics: orders}))
			return err
		}, "User:bob may not read group g"},
		{"ResetOffsets without a topic", func() error {
			_, err := bob.ResetOffsets(ctx, connect.NewRequest(&gatewayv1.ResetOffsetsRequest{GroupId: "g-bob", Topics: orders}))
			return err
		}, "User:bob may not read topic orders"},
		{"DeleteGroup", func() error {
			_, err := bob.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: "g-bob"}))
			return err
		}, "User:bob may not delete group g-bob"},
		{"ProduceJSON", func() error {
			_, err := bob.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "orders", Records: one}))
			return err
		}, "User:bob may not write topic orders"},
		{"FetchJSON", func() error {
			_, err := bob.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "orders"}))
			return err
		}, "User:bob may not read topic orders"},
		{"FetchJSON denied", func() error {
			_, err := bob.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: "audit"}))
			return err
		}, "User:bob may not read topic audit"},
	} {
		rpc, _, _ := strings.Cut(tc.name, " ")
		rule, ok := rules["/strata.gateway.v1.GatewayService/"+rpc]
		if !ok {
			t.Fatalf("case %q names no GatewayService RPC", tc.name)
		}
		t.Run(tc.name, func(t *testing.T) {
			if rule.Access == guard.Forwarded {
				// The owner checks: the gateway calls it in bob's name
				// (the fakes upstream allow everything).
				sg.upstream.reset()
				tc.call() //nolint:errcheck // the fakes' answers do not matter here
				if got := sg.upstream.principals(); len(got) == 0 || slices.ContainsFunc(got, func(p string) bool { return p != "User:bob" }) {
					t.Fatalf("upstream calls carried %q; want User:bob on each", got)
				}
				return
			}
			err := tc.call()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodePermissionDenied {
				t.Fatalf("err = %v; want permission_denied", err)
			}
			if want := "permission denied: " + tc.want; ce.Message() != want {
				t.Errorf("message %q; want %q", ce.Message(), want)
			}
		})
	}
	fc.mu.Lock()
	allocs := fc.allocCalls
	fc.mu.Unlock()

	// Any authenticated caller may have a producer id, which the gateway
	// gets from the controller as itself; no credentials at all is
	// refused before any handler runs.
	sg.upstream.reset()
	if _, err := bob.InitProducerId(ctx, connect.NewRequest(&gatewayv1.InitProducerIdRequest{})); err != nil {
		t.Errorf("InitProducerId as bob: %v", err)
	}
	if got := sg.upstream.principals(); len(got) != 1 || got[0] != "" {
		t.Errorf("AllocateProducerIds carried %q; want one call as the gateway itself", got)
	}
	fc.mu.Lock()
	if fc.allocCalls != allocs+1 {
		t.Errorf("%d AllocateProducerIds calls; want one block for bob", fc.allocCalls-allocs)
	}
	fc.mu.Unlock()
	for name, call := range map[string]func(gatewayv1connect.GatewayServiceClient) error{
		"InitProducerId": func(c gatewayv1connect.GatewayServiceClient) error {
			_, err := c.InitProducerId(ctx, connect.NewRequest(&gatewayv1.InitProducerIdRequest{}))
			return err
		},
		"WhoAmI": func(c gatewayv1connect.GatewayServiceClient) error {
			_, err := c.WhoAmI(ctx, connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
			return err
		},
		"Metadata": func(c gatewayv1connect.GatewayServiceClient) error {
			_, err := c.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
			return err
		},
	} {
		err := call(sg.client(""))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || ce.Message() != "unauthenticated: no credentials: send a bearer token (STRATA_TOKEN) or a client certificate" {
			t.Errorf("%s without credentials: %v; want unauthenticated: no credentials", name, err)
		}
	}
}

// Metadata, which the gateway answers from its cache, shows only what the
// caller may describe; a super user sees all. (The lists it forwards are
// filtered by their owners.)
func TestListsShowOnlyWhatTheCallerMayDescribe(t *testing.T) {
	sg, _, _, _ := securedCluster(t,
		binding("alice", acl.Allow, acl.Write, acl.Topic, "orders*"), // write implies describe
		binding("alice", acl.Deny, acl.Describe, acl.Topic, "orders-eu"),
		binding("alice", acl.Allow, acl.Describe, acl.Group, "g-a*"),
	)
	ctx := context.Background()
	for _, tc := range []struct {
		user           string
		topics, groups []string
	}{
		{"alice", []string{"orders"}, []string{"g-alice"}},
		{"bob", nil, nil},
		{"admin", []string{"audit", "orders", "orders-eu"}, []string{"g", "g-alice", "g-bob"}},
	} {
		c := sg.client(tc.user)
		md, err := c.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := names(md.Msg.GetTopics(), (*commonv1.TopicMetadata).GetName); !slices.Equal(got, tc.topics) {
			t.Errorf("%s: Metadata topics %v; want %v", tc.user, got, tc.topics)
		}
		if len(md.Msg.GetNodes()) != 1 {
			t.Errorf("%s: Metadata nodes %v; want node 1 whatever the ACLs", tc.user, md.Msg.GetNodes())
		}
	}
	// A named topic alice may describe is answered, one she may not is
	// refused even beside it.
	alice := sg.client("alice")
	if md, err := alice.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"orders"}})); err != nil || len(md.Msg.GetTopics()) != 1 {
		t.Errorf("Metadata of orders as alice: %v %v; want orders", md, err)
	}
	_, err := alice.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"orders", "orders-eu"}}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Metadata of orders and orders-eu as alice: %v; want permission denied", err)
	}
}

func names[T any](s []T, name func(T) string) []string {
	var out []string
	for _, v := range s {
		out = append(out, name(v))
	}
	return out
}

func msgOf[T any, PT interface {
	*T
	proto.Message
}](r *connect.Response[T], err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	return PT(r.Msg), nil
}

// WhoAmI names the caller and how it authenticated; without
// --require-auth a caller without credentials is User:ANONYMOUS and may
// do everything, while a token still names its user.
func TestWhoAmI(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"orders", 0}, 1, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		require bool
		user    string
		want    *gatewayv1.WhoAmIResponse
	}{
		{true, "alice", &gatewayv1.WhoAmIResponse{Principal: "User:alice", Method: "token"}},
		{false, "alice", &gatewayv1.WhoAmIResponse{Principal: "User:alice", Method: "token"}},
		{false, "", &gatewayv1.WhoAmIResponse{Principal: "User:ANONYMOUS", Method: "anonymous"}},
	} {
		fc := newFakeController()
		sg := startSecure(t, secureSetup{
			require: tc.require, cfg: &Config{Controllers: fc.start(t)}, fc: fc,
			snapshot: cl.snapshot(1, map[string]int32{"orders": 1}), users: []string{"alice"},
		})
		c := sg.client(tc.user)
		res, err := c.WhoAmI(ctx, connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
		if err != nil {
			t.Fatalf("require %v user %q: %v", tc.require, tc.user, err)
		}
		if !proto.Equal(res.Msg, tc.want) {
			t.Errorf("require %v user %q: WhoAmI %v; want %v", tc.require, tc.user, res.Msg, tc.want)
		}
		if tc.require {
			continue
		}
		// No ACL at all, and everything is allowed.
		if _, err := c.CreateUser(ctx, connect.NewRequest(&gatewayv1.CreateUserRequest{Name: "carol"})); err != nil {
			t.Errorf("CreateUser without --require-auth: %v", err)
		}
		if _, err := c.ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: "orders", Records: []*gatewayv1.JSONRecord{
			{ValueData: &gatewayv1.JSONRecord_Value{Value: "x"}},
		}})); err != nil {
			t.Errorf("ProduceJSON without --require-auth: %v", err)
		}
	}
}
