package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/lib/token"
)

// secureGateway is a gateway of a cluster run with TLS and --require-auth,
// for the CLI's security commands: the real authentication and ACLs
// (lib/guard, with User:admin a super user) in front of users, ACLs and
// quotas kept in memory, as the controller keeps them.
type secureGateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	g   *guard.Guard
	url string
	dir string // ca.pem, admin.pem, admin-key.pem, other-ca.pem

	mu    sync.Mutex
	auth  []string // Authorization headers received
	state *commonv1.SecurityState
}

func startSecureGateway(t *testing.T) *secureGateway {
	t.Helper()
	g, err := guard.New(context.Background(), guard.Config{RequireAuth: true, SuperUsers: []acl.Principal{acl.User("admin")}})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	sg := &secureGateway{g: g, dir: t.TempDir(), state: &commonv1.SecurityState{}}
	gw, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.IssueClient("admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.WriteFiles(sg.file("admin.pem"), sg.file("admin-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sg.file("ca.pem"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := devca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sg.file("other-ca.pem"), other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(sg))
	inner := g.Wrap(mux)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sg.mu.Lock()
		sg.auth = append(sg.auth, r.Header.Get("Authorization"))
		sg.mu.Unlock()
		inner.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the tests' own
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{gw.TLS()}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	sg.url = srv.URL
	return sg
}

func (sg *secureGateway) file(name string) string { return filepath.Join(sg.dir, name) }

// adminEnv is what `source DIR/admin.env` sets, for sg.
func (sg *secureGateway) adminEnv() map[string]string {
	return map[string]string{"STRATA_GATEWAY": sg.url, "STRATA_TLS_CA": sg.file("ca.pem"),
		"STRATA_TLS_CERT": sg.file("admin.pem"), "STRATA_TLS_KEY": sg.file("admin-key.pem")}
}

func (sg *secureGateway) headers() []string {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	return append([]string(nil), sg.auth...)
}

// update changes the security state and applies it, as the metadata
// stream would.
func (sg *secureGateway) update(fn func(st *commonv1.SecurityState)) {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	fn(sg.state)
	sg.g.Apply(sg.state)
}

func (sg *secureGateway) authorize(ctx context.Context, op acl.Operation, rt acl.ResourceType, name string) error {
	return sg.g.Authorize(ctx, op, rt, name)
}

func (sg *secureGateway) cluster(ctx context.Context, op acl.Operation) error {
	return sg.authorize(ctx, op, acl.Cluster, acl.ClusterName)
}

func (sg *secureGateway) WhoAmI(ctx context.Context, _ *connect.Request[gatewayv1.WhoAmIRequest]) (*connect.Response[gatewayv1.WhoAmIResponse], error) {
	info, _ := guard.Info(ctx)
	return connect.NewResponse(&gatewayv1.WhoAmIResponse{Principal: info.Principal.String(), Method: info.Method.String()}), nil
}

func (sg *secureGateway) CreateUser(ctx context.Context, req *connect.Request[gatewayv1.CreateUserRequest]) (*connect.Response[gatewayv1.CreateUserResponse], error) {
	if err := sg.cluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	tok, err := token.New()
	if err != nil {
		return nil, err
	}
	h := token.Hash(tok)
	u := &commonv1.UserCredential{Name: req.Msg.GetName(), TokenSha256: h[:], CreatedMs: 1700000000000}
	sg.update(func(st *commonv1.SecurityState) { st.Users = append(st.Users, u) })
	return connect.NewResponse(&gatewayv1.CreateUserResponse{User: &commonv1.UserCredential{Name: u.Name, CreatedMs: u.CreatedMs}, Token: tok.Reveal()}), nil
}

func (sg *secureGateway) ListUsers(ctx context.Context, _ *connect.Request[gatewayv1.ListUsersRequest]) (*connect.Response[gatewayv1.ListUsersResponse], error) {
	if err := sg.cluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	out := &gatewayv1.ListUsersResponse{}
	sg.update(func(st *commonv1.SecurityState) {
		for _, u := range st.Users {
			out.Users = append(out.Users, &commonv1.UserCredential{Name: u.GetName(), CreatedMs: u.GetCreatedMs()})
		}
	})
	return connect.NewResponse(out), nil
}

func (sg *secureGateway) CreateAcls(ctx context.Context, req *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error) {
	if err := sg.cluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	sg.update(func(st *commonv1.SecurityState) { st.Acls = append(st.Acls, req.Msg.GetAcls()...) })
	return connect.NewResponse(&gatewayv1.CreateAclsResponse{}), nil
}

func (sg *secureGateway) DescribeAcls(ctx context.Context, req *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error) {
	if err := sg.cluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	out := &gatewayv1.DescribeAclsResponse{}
	sg.update(func(st *commonv1.SecurityState) {
		for _, b := range st.Acls {
			if p := req.Msg.GetFilter().GetPrincipal(); p == "" || p == b.GetPrincipal() {
				out.Acls = append(out.Acls, b)
			}
		}
	})
	return connect.NewResponse(out), nil
}

func (sg *secureGateway) DeleteAcls(ctx context.Context, req *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error) {
	if err := sg.cluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	f := req.Msg.GetFilter()
	out := &gatewayv1.DeleteAclsResponse{}
	sg.update(func(st *commonv1.SecurityState) {
		var keep []*commonv1.AclBinding
		for _, b := range st.Acls {
			if b.GetPrincipal() == f.GetPrincipal() && b.GetPermission() == f.GetPermission() && b.GetOperation() == f.GetOperation() &&
				b.GetResourceType() == f.GetResourceType() && b.GetResourceName() == f.GetResourceName() && b.GetPatternType() == f.GetPatternType() {
				out.Deleted = append(out.Deleted, b)
				continue
			}
			keep = append(keep, b)
		}
		st.Acls = keep
	})
	return connect.NewResponse(out), nil
}

func (sg *secureGateway) SetQuota(ctx context.Context, req *connect.Request[gatewayv1.SetQuotaRequest]) (*connect.Response[gatewayv1.SetQuotaResponse], error) {
	if err := sg.cluster(ctx, acl.Alter); err != nil {
		return nil, err
	}
	q := req.Msg.GetQuota()
	sg.update(func(st *commonv1.SecurityState) {
		var keep []*commonv1.Quota
		for _, have := range st.Quotas {
			if have.GetPrincipal() != q.GetPrincipal() {
				keep = append(keep, have)
			}
		}
		if q.GetProduceBytesPerSecond() != 0 || q.GetFetchBytesPerSecond() != 0 || q.GetRequestPercentage() != 0 {
			keep = append(keep, q)
		}
		st.Quotas = keep
	})
	return connect.NewResponse(&gatewayv1.SetQuotaResponse{}), nil
}

func (sg *secureGateway) ListQuotas(ctx context.Context, _ *connect.Request[gatewayv1.ListQuotasRequest]) (*connect.Response[gatewayv1.ListQuotasResponse], error) {
	if err := sg.cluster(ctx, acl.Describe); err != nil {
		return nil, err
	}
	out := &gatewayv1.ListQuotasResponse{}
	sg.update(func(st *commonv1.SecurityState) { out.Quotas = append(out.Quotas, st.Quotas...) })
	return connect.NewResponse(out), nil
}

func (sg *secureGateway) CreateTopic(ctx context.Context, req *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	if err := sg.authorize(ctx, acl.Create, acl.Topic, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (sg *secureGateway) Metadata(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	for _, name := range req.Msg.GetTopics() {
		if err := sg.authorize(ctx, acl.Describe, acl.Topic, name); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&gatewayv1.MetadataResponse{UnknownTopics: req.Msg.GetTopics()}), nil
}

// runEnv runs the CLI with the environment env.
func runEnv(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Main(ctx, args, strings.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	return result{code, out.String(), errb.String()}
}

// with returns env with more variables set (or, with "", removed).
func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestCredentialsFromEnvAndFlags: after `source admin.env` (the STRATA_*
// variables) the CLI reaches an https gateway as the admin's certificate
// says; the same from flags, which override the environment.
func TestCredentialsFromEnvAndFlags(t *testing.T) {
	sg := startSecureGateway(t)
	r := runEnv(t, sg.adminEnv(), "", "whoami")
	if r.code != 0 || r.stdout != "User:admin\n" || r.stderr != "" {
		t.Fatalf("whoami from admin.env: %+v", r)
	}
	r = runEnv(t, map[string]string{"STRATA_TLS_CERT": "/nonexistent.pem"}, "",
		"--gateway", sg.url, "--tls-ca", sg.file("ca.pem"), "whoami", "--output", "json",
		"--tls-cert", sg.file("admin.pem"), "--tls-key="+sg.file("admin-key.pem"))
	if r.code != 0 || r.stdout != `{"method":"certificate","principal":"User:admin"}`+"\n" {
		t.Fatalf("whoami from flags: %+v", r)
	}
	// A file that does not load is one line naming the flag.
	missing := filepath.Join(t.TempDir(), "nope.pem")
	wantOneLine(t, runEnv(t, with(sg.adminEnv(), "STRATA_TLS_CA", missing), "", "whoami"),
		`strata: --tls-ca "`+missing+`": no such file`)
	// An http:// URL to a TLS server says to use https.
	plain := "http://" + strings.TrimPrefix(sg.url, "https://")
	wantOneLine(t, runEnv(t, with(sg.adminEnv(), "STRATA_GATEWAY", plain), "", "topic", "list"),
		"strata: no HTTP/2 cleartext answer from the gateway at "+plain+": if it serves TLS, use an https:// URL (strata dev --secure: source DIR/admin.env)")
	// The wrong CA is refused, in one line saying so.
	r = runEnv(t, with(sg.adminEnv(), "STRATA_TLS_CA", sg.file("other-ca.pem")), "", "topic", "list")
	wantOneLine(t, r, "strata: TLS with "+sg.url+" failed: its certificate is signed by an authority the CLI does not trust (is --tls-ca, STRATA_TLS_CA, the cluster's CA?)")
}

// TestUserTokenAndRefusals: `user create` prints exactly one line with the
// token; with it (STRATA_TOKEN or --token) the CLI sends it as a bearer
// header and is that user; without credentials it is refused with one line
// containing "unauthenticated", and without an ACL with one line naming
// the principal, the operation and the resource. The token appears in no
// help and no error.
func TestUserTokenAndRefusals(t *testing.T) {
	sg := startSecureGateway(t)
	admin := sg.adminEnv()
	r := runEnv(t, admin, "", "user", "create", "alice")
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`^STRATA_TOKEN=strata_[A-Za-z0-9_-]{43}\n$`).MatchString(r.stdout) {
		t.Fatalf("user create: %+v; want exactly one line STRATA_TOKEN=<token>", r)
	}
	tok := strings.TrimSpace(strings.TrimPrefix(r.stdout, "STRATA_TOKEN="))

	userEnv := map[string]string{"STRATA_GATEWAY": sg.url, "STRATA_TLS_CA": sg.file("ca.pem")}
	before := len(sg.headers())
	r = runEnv(t, with(userEnv, "STRATA_TOKEN", tok), "", "whoami")
	if r.code != 0 || r.stdout != "User:alice\n" {
		t.Fatalf("whoami with STRATA_TOKEN: %+v", r)
	}
	if h := sg.headers()[before:]; len(h) != 1 || h[0] != "Bearer "+tok {
		t.Errorf("Authorization headers %q; want the bearer token once", h)
	}
	if r := runEnv(t, userEnv, "", "whoami", "--token", tok); r.stdout != "User:alice\n" {
		t.Errorf("whoami --token: %+v", r)
	}

	r = runEnv(t, userEnv, "", "whoami")
	wantOneLine(t, r, "strata: unauthenticated: no credentials: send a bearer token (STRATA_TOKEN) or a client certificate")
	if r.code != 1 {
		t.Errorf("exit %d without credentials, want 1", r.code)
	}
	r = runEnv(t, with(userEnv, "STRATA_TOKEN", "strata_"+strings.Repeat("x", 43)), "", "topic", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "unauthenticated") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("unknown token: %+v", r)
	}

	alice := with(userEnv, "STRATA_TOKEN", tok)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create", "orders"}, "strata: permission denied: User:alice may not create topic orders"},
		{[]string{"user", "create", "bob"}, "strata: permission denied: User:alice may not alter cluster kafka-cluster"},
		{[]string{"acl", "list"}, "strata: permission denied: User:alice may not describe cluster kafka-cluster"},
		{[]string{"produce", "orders"}, "strata: permission denied: User:alice may not describe topic orders"},
	} {
		r := runEnv(t, alice, "x\n", tc.args...)
		wantOneLine(t, r, tc.want)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1", tc.args, r.code)
		}
	}

	// The token is never printed: not in help, not in errors.
	for _, args := range [][]string{{"--help"}, {"topic", "list", "--help"}, {"--token", tok, "whoami", "--help"}} {
		if r := runEnv(t, alice, "", args...); strings.Contains(r.stdout+r.stderr, tok) || !strings.Contains(r.stdout, "--token TOKEN") {
			t.Errorf("%v: help shows the token or lacks --token:\n%s", args, r.stdout)
		}
	}
	r = runEnv(t, with(alice, "STRATA_TOKEN", tok+"\nX"), "", "whoami")
	if r.code != 2 || strings.Contains(r.stderr, tok) || !strings.Contains(r.stderr, "--token") {
		t.Errorf("a malformed token: %+v", r)
	}

	r = runEnv(t, admin, "", "user", "list", "--output", "json")
	if r.code != 0 || r.stdout != `[{"name":"alice","created_ms":1700000000000}]`+"\n" {
		t.Errorf("user list: %+v", r)
	}
}

func TestACLCommands(t *testing.T) {
	sg := startSecureGateway(t)
	admin := sg.adminEnv()
	r := runEnv(t, admin, "", "acl", "create", "--principal", "User:alice", "--allow", "write,read", "--topic", "orders")
	if r.code != 0 || r.stdout != "created ACL: User:alice allow read topic orders\ncreated ACL: User:alice allow write topic orders\n" {
		t.Fatalf("acl create: %+v", r)
	}
	if r := runEnv(t, admin, "", "acl", "create", "--principal=User:bob", "--deny", "all", "--group", "team-", "--prefixed"); r.code != 0 {
		t.Fatalf("acl create prefixed: %+v", r)
	}

	r = runEnv(t, admin, "", "acl", "list", "--output", "json")
	var got []aclJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("acl list: %+v: %v", r, err)
	}
	want := []aclJSON{
		{"User:alice", "allow", "read", "topic", "orders", "literal"},
		{"User:alice", "allow", "write", "topic", "orders", "literal"},
		{"User:bob", "deny", "all", "group", "team-", "prefixed"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("acl list json:\n got %+v\nwant %+v", got, want)
	}
	r = runEnv(t, admin, "", "acl", "list", "--principal", "User:bob")
	if r.code != 0 || !strings.Contains(r.stdout, "PRINCIPAL") || !strings.Contains(r.stdout, "User:bob") || strings.Contains(r.stdout, "alice") {
		t.Errorf("acl list --principal: %+v", r)
	}

	r = runEnv(t, admin, "", "acl", "delete", "--principal", "User:alice", "--allow", "write", "--topic", "orders")
	if r.code != 0 || r.stdout != "deleted ACL: User:alice allow write topic orders\n" {
		t.Errorf("acl delete: %+v", r)
	}
	r = runEnv(t, admin, "", "acl", "delete", "--principal", "User:alice", "--allow", "write", "--topic", "orders")
	if r.code != 0 || r.stdout != "no ACL matched: nothing deleted\n" {
		t.Errorf("acl delete again: %+v", r)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acl", "create", "--allow", "read", "--topic", "t"}, "strata: --principal is required (User:NAME) (see 'strata acl create --help')"},
		{[]string{"acl", "create", "--principal", "User:a", "--allow", "read", "--topic", "t", "--cluster"}, "strata: give exactly one of --topic, --group and --cluster, or --transactional-id (see 'strata acl create --help')"},
		{[]string{"acl", "create", "--principal", "User:a", "--allow", "fly", "--topic", "t"}, `strata: unknown operation fly (want read, write, create, delete, alter, describe or all) (see 'strata acl create --help')`},
		{[]string{"acl", "delete", "--principal", "User:a", "--allow", "read", "--topic", "t", "extra"}, `strata: unexpected argument "extra" (see 'strata acl delete --help')`},
	} {
		r := runEnv(t, admin, "", tc.args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, r.code)
		}
		wantOneLine(t, r, tc.want)
	}
	if r := runEnv(t, admin, "", "acl", "create", "--help"); r.code != 0 || !strings.Contains(r.stdout, "--prefixed") || !strings.Contains(r.stdout, "--principal User:NAME") {
		t.Errorf("acl create --help: %+v", r)
	}
}

func TestQuotaCommands(t *testing.T) {
	sg := startSecureGateway(t)
	admin := sg.adminEnv()
	r := runEnv(t, admin, "", "quota", "set", "--principal", "User:alice", "--produce-bytes-per-sec", "1MiB")
	if r.code != 0 || r.stdout != "quota of User:alice: produce 1.0 MB/s, fetch unlimited\n" {
		t.Fatalf("quota set: %+v", r)
	}
	// A rate not given keeps its value.
	if r := runEnv(t, admin, "", "quota", "set", "--principal", "User:alice", "--fetch-bytes-per-sec", "2000"); r.code != 0 {
		t.Fatalf("quota set fetch: %+v", r)
	}
	r = runEnv(t, admin, "", "quota", "list", "--output", "json")
	if r.code != 0 || r.stdout != `[{"principal":"User:alice","produce_bytes_per_second":1048576,"fetch_bytes_per_second":2000,"request_percentage":0}]`+"\n" {
		t.Errorf("quota list: %+v", r)
	}
	r = runEnv(t, admin, "", "quota", "set", "--principal", "User:alice", "--produce-bytes-per-sec", "0", "--fetch-bytes-per-sec", "0")
	if r.code != 0 || r.stdout != "removed the quota of User:alice\n" {
		t.Errorf("quota removal: %+v", r)
	}
	if r := runEnv(t, admin, "", "quota", "list", "--output", "json"); r.stdout != "[]\n" {
		t.Errorf("quota list after removal: %+v", r)
	}
	wantOneLine(t, runEnv(t, admin, "", "quota", "set", "--principal", "User:alice", "--produce-bytes-per-sec", "fast"),
		`strata: --produce-bytes-per-sec "fast": want bytes per second, like 10MB, 512KiB or 1048576 (0: unlimited)`)
	wantOneLine(t, runEnv(t, admin, "", "quota", "set", "--principal", "alice", "--produce-bytes-per-sec", "1"),
		`strata: --principal "alice": want User:NAME`)
}

// --request-percentage sets Kafka's request_percentage beside the byte
// rates, keeps them (and is kept by them), shows in quota list, and with
// every rate 0 the quota is gone.
func TestQuotaRequestPercentage(t *testing.T) {
	sg := startSecureGateway(t)
	admin := sg.adminEnv()
	r := runEnv(t, admin, "", "quota", "set", "--principal", "User:bob", "--request-percentage", "2.5")
	if r.code != 0 || r.stdout != "quota of User:bob: produce unlimited, fetch unlimited, requests 2.5%\n" {
		t.Fatalf("quota set --request-percentage: %+v", r)
	}
	r = runEnv(t, admin, "", "quota", "set", "--principal", "User:bob", "--fetch-bytes-per-sec", "1000", "--output", "json")
	if r.code != 0 || r.stdout != `{"principal":"User:bob","produce_bytes_per_second":0,"fetch_bytes_per_second":1000,"request_percentage":2.5}`+"\n" {
		t.Fatalf("quota set keeps the request percentage: %+v", r)
	}
	if r := runEnv(t, admin, "", "quota", "set", "--principal", "User:*", "--request-percentage", "150"); r.code != 0 {
		t.Fatalf("default request percentage: %+v", r)
	}
	r = runEnv(t, admin, "", "quota", "list")
	for _, want := range []string{"REQUESTS", "User:bob", "1.0 kB/s", "2.5%", "User:*", "150%"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("quota list lacks %q: %+v", want, r)
		}
	}
	r = runEnv(t, admin, "", "quota", "set", "--principal", "User:bob", "--fetch-bytes-per-sec", "0")
	if r.code != 0 || r.stdout != "quota of User:bob: produce unlimited, fetch unlimited, requests 2.5%\n" {
		t.Fatalf("byte rates removed, request percentage kept: %+v", r)
	}
	r = runEnv(t, admin, "", "quota", "set", "--principal", "User:bob", "--request-percentage", "0")
	if r.code != 0 || r.stdout != "removed the quota of User:bob\n" {
		t.Fatalf("quota removal: %+v", r)
	}
	for _, bad := range []string{"-1", "lots", "NaN"} {
		wantOneLine(t, runEnv(t, admin, "", "quota", "set", "--principal", "User:bob", "--request-percentage", bad),
			`strata: --request-percentage "`+bad+`": want a percentage of one request handler's time, like 5 or 0.5 (0: unlimited)`)
	}
}
