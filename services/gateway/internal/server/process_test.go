package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
	"github.com/strata-mq/strata/lib/token"
)

// TestReadinessFlipsAfterFirstSnapshot runs the whole binary's setup under
// serve.Command.Run, as main does, and watches /readyz on the admin port.
func TestReadinessFlipsAfterFirstSnapshot(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	ctrl := fc.start(t)

	cfg := &Config{}
	admin := make(chan net.Addr, 1)
	setup := Setup(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve.Command{
			Name:   "strata-gateway",
			Config: cfg,
			Setup: func(ctx context.Context, p *serve.Process) (http.Handler, error) {
				admin <- p.AdminAddr()
				return setup(ctx, p)
			},
			Args: []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--controller", ctrl},
		}.Run(ctx)
	}()
	defer func() {
		cancel()
		if code := <-done; code != serve.ExitOK {
			t.Errorf("exit code %d; want 0", code)
		}
	}()
	readyz := "http://" + (<-admin).String() + "/readyz"
	get := func() (int, string) {
		resp, err := http.Get(readyz)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "the watch", func() bool { return fc.watchCount() > 0 })
	waitFor(t, "serving", func() bool { _, body := get(); return !strings.Contains(body, "process: starting") })
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "metadata: waiting for the first metadata snapshot") {
		t.Fatalf("/readyz before the snapshot: %d %q; want 503 naming the metadata check", code, body)
	}
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	waitFor(t, "ready", func() bool { code, _ := get(); return code == http.StatusOK })
}

// TestSecureProcess runs the binary's setup as `strata dev --secure` runs
// it: TLS, --require-auth, a super user, CORS for local pages. Callers are
// known by a client certificate or a token over TLS, or refused; the
// gateway calls the controller under its own service identity (its
// certificate, checked by the controller's guard); and a browser's CORS
// preflight, which carries no credentials, is answered.
func TestSecureProcess(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.New("strata test CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func(id tlsconfig.Identity) *devca.Cert {
		c, err := ca.IssueService(id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	gwCert := issue(tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"})
	certFile, keyFile := filepath.Join(dir, "gateway.crt"), filepath.Join(dir, "gateway.key")
	if err := gwCert.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	adminCert, err := ca.IssueClient("admin")
	if err != nil {
		t.Fatal(err)
	}

	// The controller: TLS with its service certificate, callers known by
	// its own guard.
	aliceToken, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	aliceHash := token.Hash(aliceToken)
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"orders", 0}, 1, 1)
	snap := cl.snapshot(1, map[string]int32{"orders": 1})
	snap.GetSnapshot().Security = &commonv1.SecurityState{Users: []*commonv1.UserCredential{{Name: "alice", TokenSha256: aliceHash[:]}}}
	fc := newFakeController()
	fc.scripts <- sendThenHold(make(chan struct{}), snap)
	ctrlGuard, err := guard.New(context.Background(), guard.Config{RequireAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(fc))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrl := serve.StartServerTLS(ln, ctrlGuard.Wrap(mux), &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{issue(tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "1"}).TLS()},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool(),
	})
	t.Cleanup(func() { ctrl.Close() })

	cfg := &Config{}
	api := make(chan string, 1)
	setup := Setup(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve.Command{
			Name:   "strata-gateway",
			Config: cfg,
			Setup: func(ctx context.Context, p *serve.Process) (http.Handler, error) {
				api <- p.URL()
				return setup(ctx, p)
			},
			// No admin listener: lib/serve hands the API and admin
			// servers one *tls.Config, which both HTTP/2 setups write
			// at once (a data race the race detector reports).
			Args: []string{"--listen", "127.0.0.1:0", "--admin-listen", "0",
				"--controller", "https://" + ln.Addr().String(),
				"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile,
				"--require-auth", "--super-users", "User:admin", "--cors-allowed-origins", "http://localhost:*"},
		}.Run(ctx)
	}()
	defer func() {
		cancel()
		if code := <-done; code != serve.ExitOK {
			t.Errorf("exit code %d; want 0", code)
		}
	}()
	url := <-api
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("API URL %s; want https", url)
	}
	client := func(cert *devca.Cert, bearerToken string) gatewayv1connect.GatewayServiceClient {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			tc.Certificates = []tls.Certificate{cert.TLS()}
		}
		var opts []connect.ClientOption
		if bearerToken != "" {
			opts = append(opts, connect.WithInterceptors(bearer(bearerToken)))
		}
		return gatewayv1connect.NewGatewayServiceClient(serve.NewTLSHTTPClient(tc), url, opts...)
	}
	admin, alice, nobody := client(adminCert, ""), client(nil, aliceToken.Reveal()), client(nil, "")
	whoami := func(c gatewayv1connect.GatewayServiceClient) (*gatewayv1.WhoAmIResponse, error) {
		r, err := c.WhoAmI(context.Background(), connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	// Alice's token is known once the snapshot's users reached the guard.
	testwait.Until(t, 30*time.Second, "alice's token to be accepted", func() error {
		_, err := whoami(alice)
		return err
	})
	for _, tc := range []struct {
		name string
		c    gatewayv1connect.GatewayServiceClient
		want *gatewayv1.WhoAmIResponse
	}{
		{"certificate", admin, &gatewayv1.WhoAmIResponse{Principal: "User:admin", Method: "certificate"}},
		{"token", alice, &gatewayv1.WhoAmIResponse{Principal: "User:alice", Method: "token"}},
	} {
		got, err := whoami(tc.c)
		if err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("%s: WhoAmI %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := whoami(nobody); connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("WhoAmI without credentials: %v; want unauthenticated", err)
	}

	// Each call reaches the controller in its caller's name, forwarded
	// by the gateway's identity; the controller, not the gateway, decides
	// (this fake one allows everything).
	if _, err := admin.CreateUser(ctx, connect.NewRequest(&gatewayv1.CreateUserRequest{Name: "carol"})); err != nil {
		t.Fatalf("CreateUser as admin: %v", err)
	}
	if _, err := alice.CreateUser(ctx, connect.NewRequest(&gatewayv1.CreateUserRequest{Name: "mallory"})); err != nil {
		t.Fatalf("CreateUser as alice: %v", err)
	}
	if _, callers := fc.admin(); !slices.Equal(callers, []string{"User:admin via Service:gateway/1", "User:alice via Service:gateway/1"}) {
		t.Errorf("the controller saw CreateUser from %v; want User:admin, then User:alice, each via Service:gateway/1", callers)
	}

	// A browser's preflight carries no credentials and is answered,
	// allowing the Authorization header.
	req, err := http.NewRequest(http.MethodOptions, url+"/strata.gateway.v1.GatewayService/WhoAmI", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "http://localhost:5173")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type")
	resp, err := serve.NewTLSHTTPClient(&tls.Config{RootCAs: ca.Pool()}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		!strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("preflight: %s, allow-origin %q, allow-headers %q; want 2xx allowing http://localhost:5173 and authorization",
			resp.Status, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Access-Control-Allow-Headers"))
	}
}
