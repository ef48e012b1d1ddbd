package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember/etcdtest"
)

// secureController is one controller serving mutual TLS with a guard that
// enforces (User:admin a super user), and a dev CA to make callers.
type secureController struct {
	c   *Controller
	url string
	ca  *devca.CA
}

func startSecure(t *testing.T) *secureController {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := guard.New(ctx, guard.Config{RequireAuth: true, SuperUsers: []acl.Principal{acl.User("admin")}})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devca.New("controller test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String()
	c, err := Start(ctx, Config{
		Member:             etcdmember.Config{Name: "1", Dir: t.TempDir(), Peers: etcdtest.TestPeers(t, 1)},
		Address:            url,
		NodeSessionTimeout: 6 * time.Second,
		SessionTTL:         6 * time.Second,
		Guard:              g,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := serve.StartServerTLS(ln, g.Wrap(httpMux(c)), &tls.Config{
		Certificates: []tls.Certificate{cert.TLS()}, ClientCAs: ca.Pool(),
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})
	t.Cleanup(func() {
		srv.Close()
		c.Close()
	})
	eventually(t, 30*time.Second, "the controller to be ready", func() bool { return c.Ready(ctx) == nil })
	return &secureController{c: c, url: url, ca: ca}
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// client calls the controller with cert (nil: none) and token ("": none).
func (s *secureController) client(t *testing.T, cert *devca.Cert, tok string) controllerv1connect.ControllerServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool(), MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS()}
	}
	hc := serve.NewTLSHTTPClient(cfg)
	t.Cleanup(hc.CloseIdleConnections)
	if tok != "" {
		hc.Transport = bearer{token: tok, next: hc.Transport}
	}
	return controllerv1connect.NewControllerServiceClient(hc, s.url)
}

func (s *secureController) user(t *testing.T, name string) controllerv1connect.ControllerServiceClient {
	t.Helper()
	cert, err := s.ca.IssueClient(name)
	if err != nil {
		t.Fatal(err)
	}
	return s.client(t, cert, "")
}

func (s *secureController) service(t *testing.T, role tlsconfig.Role, id string) controllerv1connect.ControllerServiceClient {
	t.Helper()
	cert, err := s.ca.IssueService(tlsconfig.Identity{Role: role, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return s.client(t, cert, "")
}

// refused checks that err is code with one line containing every one of want.
func refused(t *testing.T, what string, err error, code connect.Code, want ...string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	msg := ce.Message()
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: refusal is not one line: %q", what, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: refusal %q does not name %q", what, msg, w)
		}
	}
}

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

func grant(principal string, perm commonv1.AclPermission, op commonv1.AclOperation, rt commonv1.AclResourceType, name string, pt commonv1.AclPatternType) *commonv1.AclBinding {
	return &commonv1.AclBinding{Principal: principal, Permission: perm, Operation: op, ResourceType: rt, ResourceName: name, PatternType: pt}
}

const (
	allowACL = commonv1.AclPermission_ACL_PERMISSION_ALLOW
	denyACL  = commonv1.AclPermission_ACL_PERMISSION_DENY
	topicACL = commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC
	literal  = commonv1.AclPatternType_ACL_PATTERN_TYPE_LITERAL
	prefixed = commonv1.AclPatternType_ACL_PATTERN_TYPE_PREFIXED
)

// watchFirst opens WatchMetadata and returns its first message, or the
// stream's error.
func watchFirst(ctx context.Context, cl controllerv1connect.ControllerServiceClient) (*controllerv1.WatchMetadataResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cl.WatchMetadata(ctx, req(&controllerv1.WatchMetadataRequest{}))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if st.Receive() {
		return st.Msg(), nil
	}
	if st.Err() == nil {
		return nil, errors.New("stream ended without a message")
	}
	return nil, st.Err()
}

// Only a storage node's own identity registers, heartbeats and alters
// partitions as that node; only services watch metadata and allocate
// producer ids. A super user is a user: refused too.
func TestStorageAndServiceRPCsNeedServiceIdentities(t *testing.T) {
	ctx := context.Background()
	s := startSecure(t)
	admin, node3, gateway := s.user(t, "admin"), s.service(t, tlsconfig.RoleStorage, "3"), s.service(t, tlsconfig.RoleGateway, "1")
	anonymous := s.client(t, nil, "")
	register := func(id int32) *controllerv1.RegisterNodeRequest {
		return &controllerv1.RegisterNodeRequest{NodeId: id, Address: fmt.Sprintf("https://127.0.0.1:%d", 9100+id), IncarnationId: fmt.Sprint("inc-", id)}
	}

	_, err := anonymous.ListTopics(ctx, req(&controllerv1.ListTopicsRequest{}))
	refused(t, "no credentials", err, connect.CodeUnauthenticated, "unauthenticated")

	_, err = admin.RegisterNode(ctx, req(register(3)))
	refused(t, "a user registers node 3", err, connect.CodePermissionDenied, "User:admin", "storage")
	_, err = admin.Heartbeat(ctx, req(&controllerv1.HeartbeatRequest{NodeId: 3, NodeEpoch: 1}))
	refused(t, "a user heartbeats as node 3", err, connect.CodePermissionDenied, "User:admin")
	_, err = admin.AlterPartition(ctx, req(&controllerv1.AlterPartitionRequest{NodeId: 3, NodeEpoch: 1}))
	refused(t, "a user alters partitions as node 3", err, connect.CodePermissionDenied, "User:admin")
	_, err = admin.AllocateProducerIds(ctx, req(&controllerv1.AllocateProducerIdsRequest{}))
	refused(t, "a user allocates producer ids", err, connect.CodePermissionDenied, "User:admin")
	_, err = watchFirst(ctx, admin)
	refused(t, "a user watches metadata", err, connect.CodePermissionDenied, "User:admin")

	_, err = node3.RegisterNode(ctx, req(register(4)))
	refused(t, "storage 3 registers as node 4", err, connect.CodePermissionDenied, "Service:storage/3", "storage node 4")
	_, err = gateway.RegisterNode(ctx, req(register(3)))
	refused(t, "the gateway registers as node 3", err, connect.CodePermissionDenied, "Service:gateway/1")
	reg, err := node3.RegisterNode(ctx, req(register(3)))
	if err != nil {
		t.Fatalf("storage 3 registers as node 3: %v", err)
	}
	if _, err := node3.Heartbeat(ctx, req(&controllerv1.HeartbeatRequest{NodeId: 3, NodeEpoch: reg.Msg.NodeEpoch})); err != nil {
		t.Fatalf("storage 3 heartbeats: %v", err)
	}
	_, err = node3.Heartbeat(ctx, req(&controllerv1.HeartbeatRequest{NodeId: 4, NodeEpoch: reg.Msg.NodeEpoch}))
	refused(t, "storage 3 heartbeats as node 4", err, connect.CodePermissionDenied, "storage node 4")
	_, err = node3.AlterPartition(ctx, req(&controllerv1.AlterPartitionRequest{NodeId: 4, NodeEpoch: reg.Msg.NodeEpoch}))
	refused(t, "storage 3 alters partitions as node 4", err, connect.CodePermissionDenied, "storage node 4")

	msg, err := watchFirst(ctx, gateway)
	if err != nil {
		t.Fatalf("the gateway watches metadata: %v", err)
	}
	if msg.GetSnapshot().GetSecurity() == nil {
		t.Fatalf("snapshot without the security state: %v", msg)
	}
	if _, err := gateway.AllocateProducerIds(ctx, req(&controllerv1.AllocateProducerIdsRequest{})); err != nil {
		t.Fatalf("the gateway allocates producer ids: %v", err)
	}
}

func topicNames(t *testing.T, cl controllerv1connect.ControllerServiceClient) []string {
	t.Helper()
	resp, err := cl.ListTopics(context.Background(), req(&controllerv1.ListTopicsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range resp.Msg.GetTopics() {
		out = append(out, l.GetName())
	}
	return out
}

func TestTopicAndClusterACLs(t *testing.T) {
	ctx := context.Background()
	s := startSecure(t)
	admin, alice, bob := s.user(t, "admin"), s.user(t, "alice"), s.user(t, "bob")
	gateway := s.service(t, tlsconfig.RoleGateway, "1")
	node1 := s.service(t, tlsconfig.RoleStorage, "1")
	if _, err := node1.RegisterNode(ctx, req(&controllerv1.RegisterNodeRequest{NodeId: 1, Address: "https://127.0.0.1:9101", IncarnationId: "inc-1"})); err != nil {
		t.Fatal(err)
	}
	// The super user creates topics; so does a service (the gateway
	// forwarding a request it checked itself).
	for _, name := range []string{"orders", "payments", "logs-app"} {
		if _, err := admin.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: name, ReplicationFactor: 1})); err != nil {
			t.Fatalf("admin creates %s: %v", name, err)
		}
	}
	if _, err := gateway.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: "via-gateway", ReplicationFactor: 1})); err != nil {
		t.Fatalf("the gateway creates a topic: %v", err)
	}

	// Without ACLs alice may do nothing, and each refusal says who, what
	// and on which resource.
	_, err := alice.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: "alice-1", ReplicationFactor: 1}))
	refused(t, "CreateTopic", err, connect.CodePermissionDenied, "permission denied", "User:alice", "create", "topic alice-1")
	_, err = alice.DeleteTopic(ctx, req(&controllerv1.DeleteTopicRequest{Name: "orders"}))
	refused(t, "DeleteTopic", err, connect.CodePermissionDenied, "User:alice", "delete", "topic orders")
	_, err = alice.AlterTopicConfig(ctx, req(&controllerv1.AlterTopicConfigRequest{Name: "orders", SetConfigs: map[string]string{"retention.ms": "1000"}}))
	refused(t, "AlterTopicConfig", err, connect.CodePermissionDenied, "User:alice", "alter", "topic orders")
	_, err = alice.CreatePartitions(ctx, req(&controllerv1.CreatePartitionsRequest{Topic: "orders", Total: 2}))
	refused(t, "CreatePartitions", err, connect.CodePermissionDenied, "User:alice", "alter", "topic orders")
	_, err = alice.ElectLeaders(ctx, req(&controllerv1.ElectLeadersRequest{ElectionType: controllerv1.ElectionType_ELECTION_TYPE_PREFERRED}))
	refused(t, "ElectLeaders", err, connect.CodePermissionDenied, "User:alice", "alter", "cluster kafka-cluster")
	_, err = alice.DescribeCluster(ctx, req(&controllerv1.DescribeClusterRequest{}))
	refused(t, "DescribeCluster", err, connect.CodePermissionDenied, "User:alice", "describe", "cluster kafka-cluster")
	_, err = alice.DescribeTopics(ctx, req(&controllerv1.DescribeTopicsRequest{Names: []string{"orders"}}))
	refused(t, "DescribeTopics", err, connect.CodePermissionDenied, "User:alice", "describe", "topic orders")
	_, err = alice.DescribeTopics(ctx, req(&controllerv1.DescribeTopicsRequest{Names: []string{"no-such-topic"}}))
	refused(t, "DescribeTopics of a missing topic", err, connect.CodePermissionDenied, "topic no-such-topic")
	_, err = alice.CreateAcls(ctx, req(&controllerv1.CreateAclsRequest{Acls: []*commonv1.AclBinding{
		grant("User:alice", allowACL, commonv1.AclOperation_ACL_OPERATION_ALL, topicACL, "*", literal)}}))
	refused(t, "CreateAcls", err, connect.CodePermissionDenied, "User:alice", "alter", "cluster kafka-cluster")
	_, err = alice.ListUsers(ctx, req(&controllerv1.ListUsersRequest{}))
	refused(t, "ListUsers", err, connect.CodePermissionDenied, "User:alice", "describe", "cluster kafka-cluster")
	if got := topicNames(t, alice); len(got) != 0 {
		t.Fatalf("alice lists %v without describe", got)
	}

	// Grants: create by prefix, everything on orders but delete (deny
	// wins), describe on topics starting with pay, alter on the cluster;
	// bob may create any topic (create on the cluster).
	if _, err := admin.CreateAcls(ctx, req(&controllerv1.CreateAclsRequest{Acls: []*commonv1.AclBinding{
		grant("User:alice", allowACL, commonv1.AclOperation_ACL_OPERATION_CREATE, topicACL, "alice-", prefixed),
		grant("User:alice", allowACL, commonv1.AclOperation_ACL_OPERATION_ALL, topicACL, "orders", literal),
		grant("User:alice", denyACL, commonv1.AclOperation_ACL_OPERATION_DELETE, topicACL, "orders", literal),
		grant("User:alice", allowACL, commonv1.AclOperation_ACL_OPERATION_DESCRIBE, topicACL, "pay", prefixed),
		grant("User:alice", allowACL, commonv1.AclOperation_ACL_OPERATION_ALTER, commonv1.AclResourceType_ACL_RESOURCE_TYPE_CLUSTER, acl.ClusterName, literal),
		grant("User:bob", allowACL, commonv1.AclOperation_ACL_OPERATION_CREATE, commonv1.AclResourceType_ACL_RESOURCE_TYPE_CLUSTER, acl.ClusterName, literal),
	}})); err != nil {
		t.Fatal(err)
	}
	// The grant reaches this controller's guard through its etcd watch.
	testwait.Until(t, 10*time.Second, "alice's create grant to apply", func() error {
		_, err := alice.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: "alice-1", ReplicationFactor: 1}))
		return err
	})
	_, err = alice.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: "bob-1", ReplicationFactor: 1}))
	refused(t, "CreateTopic outside the prefix", err, connect.CodePermissionDenied, "User:alice", "create", "topic bob-1")
	if _, err := alice.AlterTopicConfig(ctx, req(&controllerv1.AlterTopicConfigRequest{Name: "orders", SetConfigs: map[string]string{"retention.ms": "1000"}})); err != nil {
		t.Fatalf("alice alters orders: %v", err)
	}
	_, err = alice.DeleteTopic(ctx, req(&controllerv1.DeleteTopicRequest{Name: "orders"}))
	refused(t, "DeleteTopic denied despite all", err, connect.CodePermissionDenied, "User:alice", "delete", "topic orders")
	if _, err := alice.ElectLeaders(ctx, req(&controllerv1.ElectLeadersRequest{ElectionType: controllerv1.ElectionType_ELECTION_TYPE_PREFERRED})); err != nil {
		t.Fatalf("alice elects leaders with alter on the cluster: %v", err)
	}
	if _, err := alice.DescribeTopics(ctx, req(&controllerv1.DescribeTopicsRequest{Names: []string{"orders", "payments"}})); err != nil {
		t.Fatalf("alice describes orders and payments: %v", err)
	}
	_, err = alice.DescribeTopics(ctx, req(&controllerv1.DescribeTopicsRequest{Names: []string{"orders", "logs-app"}}))
	refused(t, "DescribeTopics with one topic not allowed", err, connect.CodePermissionDenied, "topic logs-app")
	// Listings show only what alice may describe (create does not imply it).
	if got := topicNames(t, alice); !slices.Equal(got, []string{"orders", "payments"}) {
		t.Fatalf("alice lists %v, want [orders payments]", got)
	}
	all, err := alice.DescribeTopics(ctx, req(&controllerv1.DescribeTopicsRequest{}))
	if err != nil || len(all.Msg.GetTopics()) != 2 {
		t.Fatalf("alice describes every topic: %v, %v", all, err)
	}
	if got := topicNames(t, admin); !slices.Equal(got, []string{"alice-1", "logs-app", "orders", "payments", "via-gateway"}) {
		t.Fatalf("admin lists %v", got)
	}
	if _, err := bob.CreateTopic(ctx, req(&controllerv1.CreateTopicRequest{Name: "anything", ReplicationFactor: 1})); err != nil {
		t.Fatalf("bob creates a topic with create on the cluster: %v", err)
	}

	// A revoke takes effect the same way.
	if _, err := admin.DeleteAcls(ctx, req(&controllerv1.DeleteAclsRequest{Filter: &controllerv1.AclFilter{
		Principal: "User:alice", ResourceName: "orders"}})); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "alice's grant on orders to be revoked", func() error {
		_, err := alice.AlterTopicConfig(ctx, req(&controllerv1.AlterTopicConfigRequest{Name: "orders", SetConfigs: map[string]string{"retention.ms": "2000"}}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			return fmt.Errorf("AlterTopicConfig: %v", err)
		}
		return nil
	})
}

// TestReservedUserNames: with the certificate principal User:admin a
// super user, no one (not even the admin) can create a token user named
// admin, any case of it, or a service role, so holding alter on the
// cluster never yields the super user's name. (It ran against a real
// secure cluster in tests/ before; only this handler decides it.)
func TestReservedUserNames(t *testing.T) {
	ctx := context.Background()
	s := startSecure(t)
	admin := s.user(t, "admin")
	for name, want := range map[string]string{
		"admin":     "user name admin is reserved: a super user",
		"ADMIN":     "user name ADMIN is reserved: a super user",
		"storage":   "user name storage is reserved: the name of a Strata service role",
		"ANONYMOUS": "ANONYMOUS",
	} {
		_, err := admin.CreateUser(ctx, req(&controllerv1.CreateUserRequest{Name: name}))
		refused(t, "CreateUser "+name, err, connect.CodeInvalidArgument, want)
	}
	users, err := admin.ListUsers(ctx, req(&controllerv1.ListUsersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if u := users.Msg.GetUsers(); len(u) != 0 {
		t.Fatalf("%d users were created: %v", len(u), u)
	}
	if _, err := admin.CreateUser(ctx, req(&controllerv1.CreateUserRequest{Name: "alice"})); err != nil {
		t.Fatalf("CreateUser alice: %v", err)
	}
}

func TestUsersTokensAndQuotas(t *testing.T) {
	ctx := context.Background()
	s := startSecure(t)
	admin := s.user(t, "admin")

	created, err := admin.CreateUser(ctx, req(&controllerv1.CreateUserRequest{Name: "carol"}))
	if err != nil {
		t.Fatal(err)
	}
	tok := created.Msg.GetToken()
	if !strings.HasPrefix(tok, "strata_") || created.Msg.GetUser().GetName() != "carol" || len(created.Msg.GetUser().GetTokenSha256()) != 0 ||
		created.Msg.GetUser().GetScramSha256() != nil || created.Msg.GetUser().GetScramSha512() != nil {
		t.Fatalf("CreateUser answered %v", created.Msg.GetUser())
	}
	_, err = admin.CreateUser(ctx, req(&controllerv1.CreateUserRequest{Name: "carol"}))
	refused(t, "CreateUser again", err, connect.CodeAlreadyExists, "carol")
	_, err = admin.CreateUser(ctx, req(&controllerv1.CreateUserRequest{Name: "no spaces"}))
	refused(t, "CreateUser with a bad name", err, connect.CodeInvalidArgument)
	_, err = admin.DeleteUser(ctx, req(&controllerv1.DeleteUserRequest{Name: "nobody"}))
	refused(t, "DeleteUser of an unknown user", err, connect.CodeNotFound, "nobody")
	users, err := admin.ListUsers(ctx, req(&controllerv1.ListUsersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if u := users.Msg.GetUsers(); len(u) != 1 || u[0].GetName() != "carol" || len(u[0].GetTokenSha256()) != 0 || u[0].GetScramSha256() != nil || u[0].GetCreatedMs() <= 0 {
		t.Fatalf("ListUsers: %v", u)
	}

	// The token authenticates as User:carol once the controller's guard
	// has the user, and stops when the user is deleted.
	carol := s.client(t, nil, tok)
	testwait.Until(t, 10*time.Second, "carol's token to authenticate", func() error {
		_, err := carol.ListTopics(ctx, req(&controllerv1.ListTopicsRequest{}))
		return err
	})
	_, err = carol.DescribeCluster(ctx, req(&controllerv1.DescribeClusterRequest{}))
	refused(t, "carol describes the cluster", err, connect.CodePermissionDenied, "User:carol", "describe", "cluster")
	if _, err := admin.DeleteUser(ctx, req(&controllerv1.DeleteUserRequest{Name: "carol"})); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "carol's token to be revoked", func() error {
		_, err := carol.ListTopics(ctx, req(&controllerv1.ListTopicsRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			return fmt.Errorf("ListTopics: %v", err)
		}
		return nil
	})

	// Quotas reach the guard too.
	if _, err := admin.SetQuota(ctx, req(&controllerv1.SetQuotaRequest{Quota: &commonv1.Quota{Principal: "User:carol", ProduceBytesPerSecond: 1 << 20}})); err != nil {
		t.Fatal(err)
	}
	_, err = admin.SetQuota(ctx, req(&controllerv1.SetQuotaRequest{Quota: &commonv1.Quota{Principal: "User:carol", FetchBytesPerSecond: -1}}))
	refused(t, "a negative quota", err, connect.CodeInvalidArgument)
	quotas, err := admin.ListQuotas(ctx, req(&controllerv1.ListQuotasRequest{}))
	if err != nil || len(quotas.Msg.GetQuotas()) != 1 || quotas.Msg.GetQuotas()[0].GetProduceBytesPerSecond() != 1<<20 {
		t.Fatalf("ListQuotas: %v, %v", quotas, err)
	}
	testwait.Until(t, 10*time.Second, "carol's quota in the guard", func() error {
		if q := s.c.Guard().Applied().GetQuotas(); len(q) != 1 || q[0].GetPrincipal() != "User:carol" {
			return fmt.Errorf("applied quotas %v", q)
		}
		return nil
	})
	acls, err := admin.DescribeAcls(ctx, req(&controllerv1.DescribeAclsRequest{}))
	if err != nil || len(acls.Msg.GetAcls()) != 0 {
		t.Fatalf("DescribeAcls: %v, %v", acls, err)
	}
}
