package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/tests/harness"
)

// The security tests of issue 22, on real processes. TestSecurity runs
// one secure cluster (harness ClusterConfig.Secure: a dev CA, a
// certificate per process, TLS and mutual TLS, --require-auth, User:admin
// a super user) with every service: a controller, two storage nodes,
// tiering, a gateway and a coordinator. Its subtests share it and each
// uses principals, topics and groups of its own. TestSecurityDevSecure
// (security_dev_test.go) runs `strata dev --secure` with the CLI.
//
// Refusals are checked with their whole line, as a user sees it:
// "permission denied: User:bob may not write topic secret".

// secureCluster is TestSecurity's cluster and the callers its subtests
// make.
type secureCluster struct {
	c      *harness.Cluster
	tr     *harness.Tiering
	gw     *harness.Node
	co     *harness.Node
	strata string // the CLI binary

	mu      sync.Mutex
	clients map[harness.Credentials]*http.Client
}

func TestSecurity(t *testing.T) {
	t.Parallel()
	c, tr := harness.StartTieredCluster(t, harness.ClusterConfig{StorageNodes: 2, Secure: true}, harness.TieringConfig{})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{})
	s := &secureCluster{c: c, tr: tr, gw: gs.Gateway, co: gs.Coordinators[0],
		strata: harness.Binary(t, harness.StrataPkg), clients: map[harness.Credentials]*http.Client{}}
	t.Run("Transport", s.testTransport)
	t.Run("ServiceIdentities", s.testServiceIdentities)
	t.Run("Refusals", s.testRefusals)
	t.Run("DenyBeatsAllowAndPrefixes", s.testDenyAndPrefixes)
	t.Run("GrantAndRevokeDelay", s.testGrantRevokeDelay)
	t.Run("Quota", s.testQuota)
	t.Run("Audit", s.testAudit)
	t.Run("Forwarding", s.testForwarding)
}

// http is an HTTP client calling as cr, one per credentials.
func (s *secureCluster) http(cr harness.Credentials) *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hc, ok := s.clients[cr]; ok {
		return hc
	}
	hc := s.c.HTTPClientAs(cr)
	s.clients[cr] = hc
	return hc
}

func (s *secureCluster) controller(cr harness.Credentials) controllerv1connect.ControllerServiceClient {
	return controllerv1connect.NewControllerServiceClient(s.http(cr), s.c.Controller(1).URL)
}

func (s *secureCluster) storage(cr harness.Credentials, n *harness.Node) storagev1connect.StorageServiceClient {
	return storagev1connect.NewStorageServiceClient(s.http(cr), n.URL)
}

func (s *secureCluster) gateway(cr harness.Credentials) gatewayv1connect.GatewayServiceClient {
	return gatewayv1connect.NewGatewayServiceClient(s.http(cr), s.gw.URL)
}

func (s *secureCluster) coordinator(cr harness.Credentials) coordinatorv1connect.CoordinatorServiceClient {
	return coordinatorv1connect.NewCoordinatorServiceClient(s.http(cr), s.co.URL)
}

// processes are one process of each service.
func (s *secureCluster) processes() []*harness.Node {
	return []*harness.Node{s.c.Controller(1), s.c.Storage(1), s.tr.Node, s.gw, s.co}
}

// ping makes one cheap call to n with hc: an RPC every caller may make
// once authenticated, except on tiering, which serves services only.
func ping(ctx context.Context, n *harness.Node, hc *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	switch n.Service {
	case "controller":
		_, err = controllerv1connect.NewControllerServiceClient(hc, n.URL).DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
	case "storage":
		_, err = storagev1connect.NewStorageServiceClient(hc, n.URL).ListOffsets(ctx, connect.NewRequest(&storagev1.ListOffsetsRequest{}))
	case "gateway":
		_, err = gatewayv1connect.NewGatewayServiceClient(hc, n.URL).WhoAmI(ctx, connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
	case "coordinator":
		_, err = coordinatorv1connect.NewCoordinatorServiceClient(hc, n.URL).ListGroups(ctx, connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
	case "tiering":
		_, err = tieringv1connect.NewTieringServiceClient(hc, n.URL).GetTieredState(ctx, connect.NewRequest(&tieringv1.GetTieredStateRequest{}))
	default:
		return fmt.Errorf("no call for %s", n.Service)
	}
	return err
}

// refusal is the code and one-line message of a refusal: a Connect
// error, the Go client's *client.Error, or an ErrorDetail in an answer.
func refusal(err error) (connect.Code, string) {
	if ce, ok := errors.AsType[*client.Error](err); ok {
		return ce.Code, ce.Message
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce.Code(), ce.Message()
	}
	return connect.CodeOf(err), fmt.Sprint(err)
}

// wantRefused fails unless err is a refusal with code and exactly the
// message want.
func wantRefused(t *testing.T, what string, err error, code connect.Code, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want %v %q", what, code, want)
		return
	}
	gotCode, msg := refusal(err)
	if gotCode != code || msg != want {
		t.Errorf("%s:\n got %v %q\nwant %v %q", what, gotCode, msg, code, want)
	}
}

// wantDetail fails unless d is the ErrorDetail of a PERMISSION_DENIED
// with exactly the message want.
func wantDetail(t *testing.T, what string, d *commonv1.ErrorDetail, want string) {
	t.Helper()
	if d.GetCode() != commonv1.Code_CODE_PERMISSION_DENIED || d.GetMessage() != want {
		t.Errorf("%s:\n got detail %v %q\nwant PERMISSION_DENIED %q", what, d.GetCode(), d.GetMessage(), want)
	}
}

// denied is the line of an ACL refusal.
func denied(principal string, op acl.Operation, rt acl.ResourceType, name string) string {
	return fmt.Sprintf("permission denied: %s may not %s %s %s", principal, op, rt, name)
}

// bindings is the wire form of the ACLs specs name, as `strata acl
// create` would send them.
func bindings(t *testing.T, specs ...acl.Spec) []*commonv1.AclBinding {
	t.Helper()
	var out []*commonv1.AclBinding
	for _, sp := range specs {
		bs, err := sp.Bindings()
		if err != nil {
			t.Fatalf("acl spec %+v: %v", sp, err)
		}
		for _, b := range bs {
			out = append(out, guard.BindingToProto(b))
		}
	}
	return out
}

// createACLs creates the ACLs specs name through the controller, as the
// admin. They take effect on each service when its metadata stream brings
// them: a test waits for the outcome it needs (waitAllowed).
func createACLs(ctx context.Context, t *testing.T, c *harness.Cluster, specs ...acl.Spec) {
	t.Helper()
	if _, err := c.Ctl().CreateAcls(ctx, connect.NewRequest(&controllerv1.CreateAclsRequest{Acls: bindings(t, specs...)})); err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
}

// deleteACLs deletes every ACL of principal through the controller.
func deleteACLs(ctx context.Context, t *testing.T, c *harness.Cluster, principal string) {
	t.Helper()
	if _, err := c.Ctl().DeleteAcls(ctx, connect.NewRequest(&controllerv1.DeleteAclsRequest{
		Filter: &controllerv1.AclFilter{Principal: principal}})); err != nil {
		t.Fatalf("delete ACLs of %s: %v", principal, err)
	}
}

// waitAllowed polls call until it succeeds: a grant has reached the
// service it asks. A grant takes effect within a second; the 30s are for
// a loaded machine. Each call is bounded by 10s.
func waitAllowed(t *testing.T, what string, call func(ctx context.Context) error) {
	t.Helper()
	testwait.Until(t, 30*time.Second, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return call(ctx)
	})
}

// waitRefused polls call until it fails with PERMISSION_DENIED (a revoke
// or a deny reached the service), and returns that error.
func waitRefused(t *testing.T, what string, call func(ctx context.Context) error) error {
	t.Helper()
	var refused error
	testwait.Until(t, 30*time.Second, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := call(ctx)
		if code, _ := refusal(err); err != nil && code == connect.CodePermissionDenied {
			refused = err
			return nil
		}
		return fmt.Errorf("answer %v", err)
	})
	return refused
}

// listOffsets asks st for the end offset of topic's partition: describe
// on the topic. A per-partition refusal is returned as its error.
func listOffsets(ctx context.Context, st storagev1connect.StorageServiceClient, topic string, partition int32) error {
	resp, err := st.ListOffsets(ctx, connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
		{Topic: topic, Partition: partition, CurrentLeaderEpoch: -1, Spec: storagev1.OffsetSpec_OFFSET_SPEC_LATEST}}}))
	if err != nil {
		return err
	}
	for _, p := range resp.Msg.GetPartitions() {
		if p.GetError() != nil {
			return apierr.Error(p.GetError())
		}
	}
	return nil
}

// produceDirect sends one non-idempotent batch of values to the leader of
// topic's partition, as st's caller (acks=all, the leader's epoch not
// checked).
func produceDirect(ctx context.Context, t *testing.T, st storagev1connect.StorageServiceClient, topic string, partition int32, values ...string) (*storagev1.ProduceResponse, error) {
	return produce(ctx, st, topic, partition, -1, commonv1.Acks_ACKS_ALL, 5*time.Second, textBatch(t, "", values, -1, 0))
}

// fetchDirect fetches topic's partition from offset 0 at st and returns
// the partition's result.
func fetchDirect(ctx context.Context, st storagev1connect.StorageServiceClient, topic string, partition int32) (*storagev1.FetchPartitionResult, error) {
	resp, err := st.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: topic, Partition: partition, FetchOffset: 0, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20}},
		MaxBytes:   1 << 20,
	}))
	if err != nil {
		return nil, err
	}
	if len(resp.Msg.GetPartitions()) != 1 {
		return nil, fmt.Errorf("fetch: %d partitions in answer", len(resp.Msg.GetPartitions()))
	}
	return resp.Msg.GetPartitions()[0], nil
}

// leaderOf returns the storage node leading topic's partition.
func (s *secureCluster) leaderOf(ctx context.Context, topic string, partition int32) *harness.Node {
	n, _ := s.c.Leader(ctx, topic, partition)
	return n
}

// cliResult is one run of the strata CLI.
type cliResult struct {
	stdout, stderr string
	code           int // exit status
}

// runCLI runs the strata binary with the gateway at gateway, cr's
// credential flags, then args, with stdin; the environment has no
// STRATA_ variable of the test's.
func runCLI(t *testing.T, strata, gateway string, cr harness.Credentials, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append(append([]string{"--gateway", gateway}, cr.CLIArgs()...), args...)
	return runCLIEnv(ctx, t, strata, nil, stdin, argv...)
}

// runCLIEnv runs the strata binary with args and stdin, in the test's
// environment without its STRATA_ variables plus env.
func runCLIEnv(ctx context.Context, t *testing.T, strata string, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, strata, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STRATA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// wantCLIRefused fails unless r exited 1 with one line on stderr holding
// every one of parts.
func wantCLIRefused(t *testing.T, what string, r cliResult, parts ...string) {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	ok := r.code == 1 && line != "" && !strings.Contains(line, "\n")
	for _, p := range parts {
		ok = ok && strings.Contains(line, p)
	}
	if !ok {
		t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line containing %q", what, r.code, r.stderr, parts)
	}
}

// testTransport: every service's API port refuses callers that do not
// authenticate. Without any certificate the TLS handshake succeeds (a
// user may authenticate with a token instead: the listeners verify client
// certificates when given, lib/serve) and the request is UNAUTHENTICATED;
// a certificate from another CA is refused in the handshake; a client
// that does not trust the cluster's CA refuses the server; plain HTTP/2
// gets no answer.
func (s *secureCluster) testTransport(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	dir := t.TempDir()
	other, err := devca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(dir, "other-ca.pem")
	if err := other.WriteFiles(otherCA, filepath.Join(dir, "other-ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	issue := func(name string, c *devca.Cert, err error) harness.Credentials {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		cr := harness.Credentials{CA: s.c.CAFile(), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
		if err := c.WriteFiles(cr.Cert, cr.Key); err != nil {
			t.Fatal(err)
		}
		return cr
	}
	// Another CA's "admin" and "storage node 1": the names are the
	// cluster's own, the signature is not.
	adminCert, err := other.IssueClient("admin")
	foreignUser := issue("admin", adminCert, err)
	nodeCert, err := other.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "1"})
	foreignNode := issue("storage-1", nodeCert, err)
	distrusting := s.c.Admin()
	distrusting.CA = otherCA

	for _, n := range s.processes() {
		// The admin is answered (a positive control), except by tiering,
		// which serves Strata services only.
		err := ping(ctx, n, s.http(s.c.Admin()))
		if n.Service == "tiering" {
			wantRefused(t, n.Name()+" as the admin", err, connect.CodePermissionDenied, "permission denied: User:admin is not a Strata service")
		} else if err != nil {
			t.Errorf("%s as the admin: %v", n.Name(), err)
		}

		err = ping(ctx, n, s.http(s.c.NoCredentials()))
		wantRefused(t, n.Name()+" without credentials", err, connect.CodeUnauthenticated,
			"unauthenticated: no credentials: send a bearer token (STRATA_TOKEN) or a client certificate")

		if err := handshake(n, s.c.Admin()); err != nil {
			t.Errorf("%s: TLS with the admin's certificate: %v", n.Name(), err)
		}
		for what, cr := range map[string]harness.Credentials{"a user certificate": foreignUser, "a storage identity": foreignNode} {
			if err := handshake(n, cr); err == nil || !strings.Contains(err.Error(), "remote error: tls: ") {
				t.Errorf("%s: TLS with %s from another CA: %v; want the handshake refused by the server (remote error: tls: ...)", n.Name(), what, err)
			}
			if err := ping(ctx, n, s.http(cr)); err == nil || connect.CodeOf(err) == connect.CodeUnauthenticated {
				t.Errorf("%s with %s from another CA: answered %v; want no answer", n.Name(), what, err)
			}
		}

		err = ping(ctx, n, s.http(distrusting))
		if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
			t.Errorf("%s from a client trusting another CA: %v; want the server's certificate refused", n.Name(), err)
		}

		if err := ping(ctx, n, s.http(harness.Credentials{})); err == nil {
			t.Errorf("%s over plain HTTP/2: answered", n.Name())
		}
	}
}

// handshake opens a TLS connection to n's API port as cr, offering h2,
// and reads its first bytes: the server's HTTP/2 settings once it accepts
// the client. In TLS 1.3 the client's handshake ends before the server
// has checked the client's certificate, so a refusal arrives as the
// server's alert at that first read ("remote error: tls: ...").
func handshake(n *harness.Node, cr harness.Credentials) error {
	cfg, err := cr.TLSConfig()
	if err != nil {
		return err
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(n.URL, "https://"), cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// testServiceIdentities: only a storage node's own identity may register
// as that node or replicate for it, and only Strata services may watch the
// metadata stream or call tiering. A user's certificate or token is
// refused for all of these, the admin's (a super user) too.
func (s *secureCluster) testServiceIdentities(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	users := []harness.Credentials{s.c.UserCert("mallory"), s.c.Admin(), s.c.CreateUser(ctx, "trudy")}
	register := func(cr harness.Credentials, node int32) error {
		_, err := s.controller(cr).RegisterNode(ctx, connect.NewRequest(&controllerv1.RegisterNodeRequest{
			NodeId: node, Address: "https://127.0.0.1:1", IncarnationId: "impostor"}))
		return err
	}
	replicate := func(cr harness.Credentials, replica int32) error {
		_, err := s.storage(cr, s.c.Storage(1)).Replicate(ctx, connect.NewRequest(&storagev1.ReplicateRequest{ReplicaId: replica, MaxWaitMs: 1}))
		return err
	}
	watch := func(cr harness.Credentials) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stream, err := s.controller(cr).WatchMetadata(wctx, connect.NewRequest(&controllerv1.WatchMetadataRequest{NodeId: -1}))
		if err != nil {
			return err
		}
		defer stream.Close()
		if stream.Receive() {
			return nil
		}
		return stream.Err()
	}
	for _, u := range users {
		wantRefused(t, u.Principal+" registering as storage node 1", register(u, 1), connect.CodePermissionDenied,
			"permission denied: "+u.Principal+" is not the storage service")
		wantRefused(t, u.Principal+" replicating from storage-1", replicate(u, 2), connect.CodePermissionDenied,
			"permission denied: "+u.Principal+" is not the storage service")
		wantRefused(t, u.Principal+" watching metadata", watch(u), connect.CodePermissionDenied,
			"permission denied: "+u.Principal+" is not a Strata service")
		if u.Token == "" {
			wantRefused(t, u.Principal+" calling tiering", ping(ctx, s.tr.Node, s.http(u)), connect.CodePermissionDenied,
				"permission denied: "+u.Principal+" is not a Strata service")
		} else {
			// Tiering keeps no users: a token is nobody there.
			wantRefused(t, u.Principal+" calling tiering", ping(ctx, s.tr.Node, s.http(u)), connect.CodeUnauthenticated,
				"unauthenticated: unknown or revoked token")
		}
	}

	// Storage node 2's own certificate may act only as node 2.
	node2 := s.c.ServiceCert(tlsconfig.RoleStorage, "2")
	for _, as := range []int32{1, 3} {
		wantRefused(t, fmt.Sprintf("storage-2 registering as node %d", as), register(node2, as), connect.CodePermissionDenied,
			fmt.Sprintf("permission denied: Service:storage/2 may not act as storage node %d", as))
	}
	wantRefused(t, "storage-2 replicating as node 1", replicate(node2, 1), connect.CodePermissionDenied,
		"permission denied: Service:storage/2 may not act as storage node 1")
	// A service may watch metadata: the gateway's certificate gets the
	// snapshot (a positive control for the refusals above).
	if err := watch(s.c.ServiceCert(tlsconfig.RoleGateway, "1")); err != nil {
		t.Errorf("the gateway's identity watching metadata: %v", err)
	}
}

// testRefusals: a principal without the ACL cannot produce, fetch, see a
// topic, join a group or commit for it, or create, alter or delete a
// topic; each refusal is PERMISSION_DENIED with the line naming the
// principal, the operation and the resource, through direct calls to each
// service, the Go client and the CLI. Grants then move the refusal to the
// next operation the principal lacks.
func (s *secureCluster) testRefusals(t *testing.T) {
	ctx := harness.Deadline(t, 3*time.Minute)
	const topic, group = "secret", "secret-group"
	s.c.CreateTopic(ctx, topic, 1, 2, nil)
	s.c.WaitFullISR(ctx, topic, 1)
	if _, err := produceToLeader(ctx, t, s.c, topic, 0, textBatch(t, "", []string{"classified"}, -1, 0)); err != nil {
		t.Fatalf("produce as the admin: %v", err)
	}
	bob := s.c.UserCert("bob")
	const p = "User:bob"
	leader := s.leaderOf(ctx, topic, 0)
	st, gw, ctl, co := s.storage(bob, leader), s.gateway(bob), s.controller(bob), s.coordinator(bob)

	// Storage: produce and fetch.
	_, err := produceDirect(ctx, t, st, topic, 0, "x")
	wantRefused(t, "produce at the leader", err, connect.CodePermissionDenied, denied(p, acl.Write, acl.Topic, topic))
	res, err := fetchDirect(ctx, st, topic, 0)
	if err != nil {
		t.Errorf("fetch at the leader: %v; want an answer with the partition refused", err)
	} else {
		wantDetail(t, "fetch at the leader", res.GetError(), denied(p, acl.Read, acl.Topic, topic))
		if len(res.GetRecords()) > 0 {
			t.Errorf("fetch at the leader: %d bytes of records in a refused partition", len(res.GetRecords()))
		}
	}
	wantRefused(t, "list offsets at the leader", listOffsets(ctx, st, topic, 0), connect.CodePermissionDenied, denied(p, acl.Describe, acl.Topic, topic))

	// Gateway: the topic is not seen; data and admin calls are refused.
	_, err = gw.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{topic}}))
	wantRefused(t, "gateway Metadata", err, connect.CodePermissionDenied, denied(p, acl.Describe, acl.Topic, topic))
	if list, err := gw.ListTopics(ctx, connect.NewRequest(&gatewayv1.ListTopicsRequest{})); err != nil {
		t.Errorf("gateway ListTopics: %v", err)
	} else if len(list.Msg.GetTopics()) != 0 {
		t.Errorf("gateway ListTopics shows bob %d topics, want none", len(list.Msg.GetTopics()))
	}
	_, err = gw.FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: topic, MaxRecords: 10}))
	wantRefused(t, "gateway FetchJSON", err, connect.CodePermissionDenied, denied(p, acl.Read, acl.Topic, topic))
	_, err = gw.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{Name: "bob-topic", Partitions: 1, ReplicationFactor: 1}))
	wantRefused(t, "gateway CreateTopic", err, connect.CodePermissionDenied, denied(p, acl.Create, acl.Topic, "bob-topic"))
	_, err = gw.DeleteTopic(ctx, connect.NewRequest(&gatewayv1.DeleteTopicRequest{Name: topic}))
	wantRefused(t, "gateway DeleteTopic", err, connect.CodePermissionDenied, denied(p, acl.Delete, acl.Topic, topic))

	// Controller, called directly: the same table.
	_, err = ctl.CreateTopic(ctx, connect.NewRequest(&controllerv1.CreateTopicRequest{Name: "bob-topic", Partitions: 1, ReplicationFactor: 1}))
	wantRefused(t, "controller CreateTopic", err, connect.CodePermissionDenied, denied(p, acl.Create, acl.Topic, "bob-topic"))
	_, err = ctl.AlterTopicConfig(ctx, connect.NewRequest(&controllerv1.AlterTopicConfigRequest{Name: topic, SetConfigs: map[string]string{"retention.ms": "1"}}))
	wantRefused(t, "controller AlterTopicConfig", err, connect.CodePermissionDenied, denied(p, acl.Alter, acl.Topic, topic))
	_, err = ctl.CreatePartitions(ctx, connect.NewRequest(&controllerv1.CreatePartitionsRequest{Topic: topic, Total: 2}))
	wantRefused(t, "controller CreatePartitions", err, connect.CodePermissionDenied, denied(p, acl.Alter, acl.Topic, topic))
	_, err = ctl.DeleteTopic(ctx, connect.NewRequest(&controllerv1.DeleteTopicRequest{Name: topic}))
	wantRefused(t, "controller DeleteTopic", err, connect.CodePermissionDenied, denied(p, acl.Delete, acl.Topic, topic))
	_, err = ctl.DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{Names: []string{topic}}))
	wantRefused(t, "controller DescribeTopics", err, connect.CodePermissionDenied, denied(p, acl.Describe, acl.Topic, topic))
	_, err = ctl.CreateUser(ctx, connect.NewRequest(&controllerv1.CreateUserRequest{Name: "bob2"}))
	wantRefused(t, "controller CreateUser", err, connect.CodePermissionDenied, denied(p, acl.Alter, acl.Cluster, acl.ClusterName))
	_, err = ctl.CreateAcls(ctx, connect.NewRequest(&controllerv1.CreateAclsRequest{Acls: bindings(t, acl.Spec{Principal: p, Allow: "all", Topic: "*"})}))
	wantRefused(t, "controller CreateAcls (bob granting himself)", err, connect.CodePermissionDenied, denied(p, acl.Alter, acl.Cluster, acl.ClusterName))

	// Coordinator, called directly: join, commit.
	_, err = co.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: group, MemberId: "bob-1", MemberEpoch: 0, RebalanceTimeoutMs: 5000, SubscribedTopicNames: []string{topic}}))
	wantRefused(t, "coordinator heartbeat (join)", err, connect.CodePermissionDenied, denied(p, acl.Read, acl.Group, group))
	commit := func() (*coordinatorv1.OffsetCommitResponse, error) {
		resp, err := co.OffsetCommit(ctx, connect.NewRequest(&coordinatorv1.OffsetCommitRequest{GroupId: group, MemberEpoch: -1,
			Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: topic, Partition: 0, CommittedOffset: 1, CommittedLeaderEpoch: -1}}}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	_, err = commit()
	wantRefused(t, "coordinator OffsetCommit", err, connect.CodePermissionDenied, denied(p, acl.Read, acl.Group, group))

	// The Go client: a producer and a consumer see no topic.
	opts := bob.ClientOpts()
	goProduce := func() error {
		pr, err := client.NewProducer(s.gw.URL, asProducerOpts(opts)...)
		if err != nil {
			return err
		}
		defer pr.Close()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return pr.ProduceSync(pctx, &client.Record{Topic: topic, Value: []byte("x")})
	}
	goConsume := func() error {
		cons, err := client.NewConsumer(s.gw.URL, asConsumerOpts(opts)...)
		if err != nil {
			return err
		}
		defer cons.Close()
		cons.Assign(map[string]map[int32]client.Offset{topic: {0: client.StartOffset()}})
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			recs, err := cons.Poll(pctx)
			if err != nil || len(recs) > 0 {
				return err
			}
		}
	}
	err = goProduce()
	wantRefused(t, "Go producer", err, connect.CodePermissionDenied, denied(p, acl.Describe, acl.Topic, topic))
	if !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("Go producer: %v does not match client.ErrPermissionDenied", err)
	}
	wantRefused(t, "Go consumer", goConsume(), connect.CodePermissionDenied, denied(p, acl.Describe, acl.Topic, topic))

	// The CLI: exit 1, one line.
	cli := func(cr harness.Credentials, stdin string, args ...string) cliResult {
		return runCLI(t, s.strata, s.gw.URL, cr, stdin, args...)
	}
	wantCLIRefused(t, "strata produce", cli(bob, "x\n", "produce", topic), "permission denied", denied(p, acl.Describe, acl.Topic, topic))
	wantCLIRefused(t, "strata topic create", cli(bob, "", "topic", "create", "bob-topic", "-p", "1", "-r", "1"),
		"permission denied", denied(p, acl.Create, acl.Topic, "bob-topic"))
	wantCLIRefused(t, "strata topic delete", cli(bob, "", "topic", "delete", topic), "permission denied", denied(p, acl.Delete, acl.Topic, topic))
	wantCLIRefused(t, "strata user create", cli(bob, "", "user", "create", "eve"), "permission denied", denied(p, acl.Alter, acl.Cluster, acl.ClusterName))
	wantCLIRefused(t, "strata topic list without credentials", cli(s.c.NoCredentials(), "", "topic", "list"), "unauthenticated")
	if r := cli(bob, "", "whoami"); r.code != 0 || r.stdout != "User:bob\n" {
		t.Errorf("strata whoami as bob: exit %d, stdout %q, stderr %q; want User:bob", r.code, r.stdout, r.stderr)
	}

	// Describe on the topic: bob sees it, and is refused its data.
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Allow: "describe", Topic: topic})
	waitAllowed(t, "the gateway to show bob "+topic, func(ctx context.Context) error {
		_, err := gw.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{topic}}))
		return err
	})
	waitAllowed(t, leader.Name()+" to let bob describe "+topic, func(ctx context.Context) error { return listOffsets(ctx, st, topic, 0) })
	wantRefused(t, "Go producer with describe", goProduce(), connect.CodePermissionDenied, denied(p, acl.Write, acl.Topic, topic))
	wantRefused(t, "Go consumer with describe", goConsume(), connect.CodePermissionDenied, denied(p, acl.Read, acl.Topic, topic))
	// Here the refusal comes with the first record, after the metadata:
	// every record would meet it, so produce says it once, as its error.
	r := cli(bob, "x\ny\n", "produce", topic)
	if want := "strata: " + denied(p, acl.Write, acl.Topic, topic) + "\n"; r.code != 1 || r.stderr != want {
		t.Errorf("strata produce with describe: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
	}
	wantCLIRefused(t, "strata consume with describe", cli(bob, "", "consume", topic, "-e"), "permission denied", denied(p, acl.Read, acl.Topic, topic))
	goJoin := func() error {
		gc, err := client.NewGroupConsumer(s.gw.URL, group, []string{topic}, client.GroupConsumerOptions(asConsumerOpts(opts)...))
		if err != nil {
			return err
		}
		defer gc.Close(context.Background())
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			recs, err := gc.Poll(pctx)
			if err != nil || len(recs) > 0 {
				return err
			}
		}
	}
	wantRefused(t, "Go group consumer", goJoin(), connect.CodePermissionDenied, denied(p, acl.Describe, acl.Group, group))

	// Read on the group, not on the topic: bob joins, and his commit of
	// the topic's offset is refused partition by partition.
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Allow: "read", Group: group})
	var resp *coordinatorv1.OffsetCommitResponse
	waitAllowed(t, "the coordinator to let bob commit for "+group, func(context.Context) error {
		var err error
		resp, err = commit()
		return err
	})
	if len(resp.GetPartitions()) != 1 {
		t.Fatalf("commit: %d partitions in answer", len(resp.GetPartitions()))
	}
	wantDetail(t, "commit of "+topic+" with read on the group only", resp.GetPartitions()[0].GetError(), denied(p, acl.Read, acl.Topic, topic))
	if _, err := co.ConsumerGroupHeartbeat(ctx, connect.NewRequest(&coordinatorv1.ConsumerGroupHeartbeatRequest{
		GroupId: group, MemberId: "bob-1", MemberEpoch: 0, RebalanceTimeoutMs: 5000, SubscribedTopicNames: []string{topic}})); err != nil {
		t.Errorf("join with read on the group: %v", err)
	}
	// The Go group consumer joins and is assigned the topic's partition,
	// whose records it may not read.
	wantRefused(t, "Go group consumer with read on the group", goJoin(), connect.CodePermissionDenied, denied(p, acl.Read, acl.Topic, topic))
	// Nothing bob was refused happened.
	if d, err := s.c.Describe(ctx, topic); err != nil || len(d.GetPartitions()) != 1 {
		t.Errorf("%s after bob's refused calls: %v, err %v; want it with its 1 partition", topic, d, err)
	}
	if recs := readPartition(ctx, t, s.c, topic, 0); len(recs) != 1 || string(recs[0].Value) != "classified" {
		t.Errorf("%s holds %d records after bob's refused produces, want the admin's one", topic, len(recs))
	}
}

func asProducerOpts(opts []client.Opt) []client.ProducerOpt {
	out := make([]client.ProducerOpt, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func asConsumerOpts(opts []client.Opt) []client.ConsumerOpt {
	out := make([]client.ConsumerOpt, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// testDenyAndPrefixes: an allow on a prefix covers every topic starting
// with it and no other; a deny on one of them wins over the allow.
func (s *secureCluster) testDenyAndPrefixes(t *testing.T) {
	ctx := harness.Deadline(t, 2*time.Minute)
	for _, topic := range []string{"erin-a", "erin-b", "other-a"} {
		s.c.CreateTopic(ctx, topic, 1, 1, nil)
		s.c.WaitFullISR(ctx, topic, 1)
	}
	erin := s.c.UserCert("erin")
	const p = "User:erin"
	produceTo := func(topic string) func(context.Context) error {
		st := s.storage(erin, s.leaderOf(ctx, topic, 0))
		return func(ctx context.Context) error {
			_, err := produceDirect(ctx, t, st, topic, 0, "from erin")
			return err
		}
	}
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Allow: "write", Topic: "erin-", Prefixed: true})
	waitAllowed(t, "erin's prefixed write to reach erin-a's leader", produceTo("erin-a"))
	waitAllowed(t, "erin's prefixed write to reach erin-b's leader", produceTo("erin-b"))
	wantRefused(t, "write to other-a (outside the prefix)", produceTo("other-a")(ctx), connect.CodePermissionDenied, denied(p, acl.Write, acl.Topic, "other-a"))

	// Through the Go client too: the prefix's write lets erin see the
	// topic and produce.
	pr, err := client.NewProducer(s.gw.URL, asProducerOpts(erin.ClientOpts())...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ProduceSync(ctx, &client.Record{Topic: "erin-a", Value: []byte("via the client")}); err != nil {
		t.Errorf("Go producer to erin-a: %v", err)
	}

	// A deny on erin-b wins over the prefix's allow; erin-a stays allowed.
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Deny: "write", Topic: "erin-b"})
	err = waitRefused(t, "the deny on erin-b to reach its leader", produceTo("erin-b"))
	wantRefused(t, "write to erin-b with a deny", err, connect.CodePermissionDenied, denied(p, acl.Write, acl.Topic, "erin-b"))
	if err := produceTo("erin-a")(ctx); err != nil {
		t.Errorf("write to erin-a beside the deny on erin-b: %v", err)
	}
	// A prefixed deny beats a literal allow as well.
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Allow: "write", Topic: "other-a"})
	waitAllowed(t, "erin's literal write to reach other-a's leader", produceTo("other-a"))
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Deny: "write", Topic: "other-", Prefixed: true})
	err = waitRefused(t, "the prefixed deny on other- to reach other-a's leader", produceTo("other-a"))
	wantRefused(t, "write to other-a with a prefixed deny", err, connect.CodePermissionDenied, denied(p, acl.Write, acl.Topic, "other-a"))
}

// outcome is what a probe of the grant-and-revoke test saw: allowed,
// refused (PERMISSION_DENIED), or neither (err).
type outcome struct {
	allowed bool
	err     error // nil when allowed or refused
}

func outcomeOf(err error) outcome {
	switch code, _ := refusal(err); {
	case err == nil:
		return outcome{allowed: true}
	case code == connect.CodePermissionDenied:
		return outcome{}
	default:
		return outcome{err: err}
	}
}

// grantRevokeBound is how long a grant or revoke may take to be seen on a
// service before TestSecurity/GrantAndRevokeDelay fails. The contract
// (issue 22) is "within a second": the controller's metadata stream
// carries every change as it is committed. But a test's clock measures
// the machine as well as the mechanism: on the CI machine's 2 loaded
// cores, under the race detector, a process can be descheduled for
// seconds (docs/design/testing.md), and timing never decides whether a
// test passes. So the test reports the delays it measures (t.Logf; the
// figures go in docs/design/security.md) and fails only past this bound,
// ten times the contract: a delay that long is no scheduling hiccup but a
// change that does not travel by the stream (a poll, a lost delta, a
// service that applies state only on reconnect).
const grantRevokeBound = 10 * time.Second

// testGrantRevokeDelay measures, from the CreateAcls and DeleteAcls
// answers, how long until a produce at the storage node, a Metadata call
// at the gateway and a commit at the coordinator change outcome.
func (s *secureCluster) testGrantRevokeDelay(t *testing.T) {
	ctx := harness.Deadline(t, 2*time.Minute)
	const topic, group = "timed", "timed-group"
	s.c.CreateTopic(ctx, topic, 1, 1, nil)
	s.c.WaitFullISR(ctx, topic, 1)
	dora := s.c.UserCert("dora")
	const p = "User:dora"
	st, gw, co := s.storage(dora, s.leaderOf(ctx, topic, 0)), s.gateway(dora), s.coordinator(dora)
	batch := textBatch(t, "", []string{"timed"}, -1, 0)
	probes := []struct {
		service string
		call    func(ctx context.Context) error
	}{
		{"storage (produce)", func(ctx context.Context) error {
			_, err := produce(ctx, st, topic, 0, -1, commonv1.Acks_ACKS_LEADER, 5*time.Second, batch)
			return err
		}},
		{"gateway (metadata)", func(ctx context.Context) error {
			_, err := gw.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{topic}}))
			return err
		}},
		{"coordinator (commit)", func(ctx context.Context) error {
			resp, err := co.OffsetCommit(ctx, connect.NewRequest(&coordinatorv1.OffsetCommitRequest{GroupId: group, MemberEpoch: -1,
				Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: topic, Partition: 0, CommittedOffset: 0, CommittedLeaderEpoch: -1}}}))
			if err == nil && len(resp.Msg.GetPartitions()) == 1 && resp.Msg.GetPartitions()[0].GetError() != nil {
				err = apierr.Error(resp.Msg.GetPartitions()[0].GetError())
			}
			return err
		}},
	}
	// measure polls every probe, concurrently, until each sees allowed
	// (or, with !allowed, refused), and returns how long after start each
	// took. Polls are 20ms apart: the measure is at most that coarse.
	measure := func(start time.Time, allowed bool) []time.Duration {
		t.Helper()
		mctx, cancel := context.WithTimeout(ctx, 4*grantRevokeBound)
		defer cancel()
		took := make([]time.Duration, len(probes))
		errs := make([]error, len(probes))
		var wg sync.WaitGroup
		for i, pr := range probes {
			wg.Go(func() {
				var last outcome
				for {
					cctx, ccancel := context.WithTimeout(mctx, 10*time.Second)
					last = outcomeOf(pr.call(cctx))
					ccancel()
					if last.err == nil && last.allowed == allowed {
						took[i] = time.Since(start)
						return
					}
					select {
					case <-mctx.Done():
						errs[i] = fmt.Errorf("%s: not seen within %v; last outcome: allowed %v, error %v", pr.service, 4*grantRevokeBound, last.allowed, last.err)
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return took
	}
	report := func(what string, took []time.Duration) {
		t.Helper()
		var parts []string
		for i, d := range took {
			parts = append(parts, fmt.Sprintf("%s %v", probes[i].service, d.Round(time.Millisecond)))
			if d > grantRevokeBound {
				t.Errorf("%s took %v on %s; the bound is %v (see grantRevokeBound)", what, d, probes[i].service, grantRevokeBound)
			}
		}
		t.Logf("%s seen after: %s", what, strings.Join(parts, ", "))
	}

	for _, pr := range probes {
		if o := outcomeOf(pr.call(ctx)); o.err != nil || o.allowed {
			t.Fatalf("%s before the grant: allowed %v, error %v; want refused", pr.service, o.allowed, o.err)
		}
	}
	// Each clock starts when the controller has answered.
	createACLs(ctx, t, s.c, acl.Spec{Principal: p, Allow: "read,write", Topic: topic}, acl.Spec{Principal: p, Allow: "read", Group: group})
	report("the grant", measure(time.Now(), true))
	deleteACLs(ctx, t, s.c, p)
	report("the revoke", measure(time.Now(), false))
}

// The quota test's parameters. The quota is the rate the mechanism
// enforces, not a speed the machine must reach: 100 KB/s is far below
// what a loaded 2-core machine produces, so the throttled principal's
// rate is the quota's doing and nothing else's. Batches of at most 16 KiB
// (a sixth of a second of quota) keep each acknowledgement a small part
// of the measure.
const (
	quotaRate     = 100_000 // bytes per second, User:slow's produce quota
	quotaRecord   = 1000    // value bytes per record
	quotaWarmUp   = 2 * time.Second
	quotaMeasured = 10 * time.Second
	// fastRate is what User:fast offers: 5 times the quota, paced so that
	// the test does not fill the disk of a shared machine.
	fastRate = 5 * quotaRate
)

// testQuota: a principal with a produce quota is held within 10% of it,
// measured from its acknowledged bytes over 10 s with the Go client
// (which waits the throttle time each answer asks for), while another
// principal producing at the same time, to the same partition, is not
// held to it.
//
// The quota's token bucket is one second deep (lib/quota): a principal
// that was quiet gets one second of its rate at once. The first
// quotaWarmUp of acknowledgements is therefore left out of the measure,
// which is of the steady rate the quota sets. Value bytes are counted;
// the batch framing the node also counts (about 1.5% at 1000-byte
// records) makes the measured rate slightly lower than the quota.
func (s *secureCluster) testQuota(t *testing.T) {
	ctx := harness.Deadline(t, 3*time.Minute)
	const topic = "quota"
	s.c.CreateTopic(ctx, topic, 1, 1, nil)
	s.c.WaitFullISR(ctx, topic, 1)
	slow, fast := s.c.UserCert("slow"), s.c.UserCert("fast")
	createACLs(ctx, t, s.c, acl.Spec{Principal: slow.Principal, Allow: "write", Topic: topic}, acl.Spec{Principal: fast.Principal, Allow: "write", Topic: topic})
	if _, err := s.c.Ctl().SetQuota(ctx, connect.NewRequest(&controllerv1.SetQuotaRequest{Quota: &commonv1.Quota{
		Principal: slow.Principal, ProduceBytesPerSecond: quotaRate}})); err != nil {
		t.Fatal(err)
	}
	// Wait until the leader holds the grants and the quota: a batch of
	// 1.5 seconds' quota is throttled once it does.
	leader := s.leaderOf(ctx, topic, 0)
	big := strings.Repeat("q", quotaRate*3/2)
	waitAllowed(t, leader.Name()+" to apply User:slow's quota", func(ctx context.Context) error {
		resp, err := produceDirect(ctx, t, s.storage(slow, leader), topic, 0, big)
		if err == nil && resp.GetThrottleTimeMs() == 0 {
			err = errors.New("answered without a throttle time")
		}
		return err
	})
	waitAllowed(t, leader.Name()+" to let User:fast write", func(ctx context.Context) error {
		_, err := produceDirect(ctx, t, s.storage(fast, leader), topic, 0, "x")
		return err
	})

	run := func(cr harness.Credentials, start, from, end time.Time, rate int) (int64, []error) {
		return produceForQuota(ctx, s.gw.URL, cr, topic, start, from, end, rate)
	}

	start := time.Now()
	from, end := start.Add(quotaWarmUp), start.Add(quotaWarmUp+quotaMeasured)
	var slowBytes, fastBytes int64
	var slowErrs, fastErrs []error
	var wg sync.WaitGroup
	wg.Go(func() { slowBytes, slowErrs = run(slow, start, from, end, 0) })
	wg.Go(func() { fastBytes, fastErrs = run(fast, start, from, end, fastRate) })
	wg.Wait()
	for _, err := range slices.Concat(slowErrs, fastErrs) {
		t.Errorf("produce: %v", err)
	}
	secs := quotaMeasured.Seconds()
	slowRate, fastGot := float64(slowBytes)/secs, float64(fastBytes)/secs
	t.Logf("over %v after a %v warm-up: User:slow (quota %d B/s) %.0f B/s (%.1f%% of its quota); User:fast (no quota, offering %d B/s) %.0f B/s",
		quotaMeasured, quotaWarmUp, quotaRate, slowRate, 100*slowRate/quotaRate, fastRate, fastGot)
	if slowRate < 0.9*quotaRate || slowRate > 1.1*quotaRate {
		t.Errorf("User:slow produced %.0f B/s; want within 10%% of its quota %d B/s", slowRate, quotaRate)
	}
	if fastGot < 3*quotaRate {
		t.Errorf("User:fast produced %.0f B/s beside the throttled User:slow; want at least 3 times the other's quota (%d B/s): it has none", fastGot, 3*quotaRate)
	}
}

// produceForQuota produces records of quotaRecord bytes to topic as cr,
// bootstrapping from the gateway at gateway, from start until end,
// offering rate bytes per second (0: as fast as the producer takes them),
// and returns the acknowledged value bytes in [from, end) and the errors.
//
// The throttled producer (rate 0) sends batches of at most 16 KiB with 64
// records buffered, so each acknowledgement is a small part of the
// measure. The paced one buffers a second of its rate in batches of up
// to 256 KiB: the producer has one call in flight per node, so a smaller
// window would bound its rate by the round trip, which on a busy
// machine is long enough (a quarter of a second) to hold it near 3
// times the quota without any quota at all.
func produceForQuota(ctx context.Context, gateway string, cr harness.Credentials, topic string, start, from, end time.Time, rate int) (acked int64, failed []error) {
	value := bytes.Repeat([]byte("v"), quotaRecord)
	window := []client.ProducerOpt{client.MaxBatchBytes(16 << 10), client.MaxBufferedRecords(64)}
	if rate > 0 {
		window = []client.ProducerOpt{client.MaxBatchBytes(256 << 10), client.MaxBufferedRecords(max(64, rate/quotaRecord))}
	}
	opts := append(asProducerOpts(cr.ClientOpts()), client.WithCompression(client.NoCompression))
	opts = append(opts, window...)
	pr, err := client.NewProducer(gateway, opts...)
	if err != nil {
		return 0, []error{err}
	}
	var mu sync.Mutex
	cb := func(_ *client.Record, err error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			failed = append(failed, err)
		case !now.Before(from) && now.Before(end):
			acked += quotaRecord
		}
	}
	pctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	for sent := 0; pctx.Err() == nil; {
		if rate == 0 {
			pr.Produce(pctx, &client.Record{Topic: topic, Value: value}, cb)
			continue
		}
		// Pacing, not an assertion: catch up to the offered rate,
		// then pause, so a late wake-up does not lower the rate.
		for due := int(time.Since(start).Seconds() * float64(rate) / quotaRecord); sent < due && pctx.Err() == nil; sent++ {
			pr.Produce(pctx, &client.Record{Topic: topic, Value: value}, cb)
		}
		select {
		case <-pctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	pr.Close()
	mu.Lock()
	defer mu.Unlock()
	// A record waiting for buffer space when end comes fails with the
	// loop's context: not a produce error.
	var errs []error
	for _, err := range failed {
		if !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, err)
		}
	}
	return acked, errs
}
