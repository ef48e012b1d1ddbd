package serve

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// devFiles writes a CA and a certificate for id into dir.
func devFiles(t *testing.T, dir string, id tlsconfig.Identity) (tlsconfig.Files, *devca.CA) {
	t.Helper()
	ca, err := devca.New("test")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := ca.WriteFiles(caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	c, err := ca.IssueService(id)
	if err != nil {
		t.Fatal(err)
	}
	f := tlsconfig.Files{Cert: filepath.Join(dir, "svc.pem"), Key: filepath.Join(dir, "svc-key.pem"), CA: caFile}
	if err := c.WriteFiles(f.Cert, f.Key); err != nil {
		t.Fatal(err)
	}
	return f, ca
}

// With --tls-cert the API and admin listeners speak TLS, the process's
// own client presents its identity, and --require-auth refuses callers
// without credentials with one line. Run under -race: both listeners
// start together, each with a config of its own.
func TestRunWithTLSAndRequiredAuth(t *testing.T) {
	dir := t.TempDir()
	files, ca := devFiles(t, dir, tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"})
	cfg := &testConfig{}
	echoPath := "/strata.test.v1.EchoService/Echo"
	r := start(t, cfg, []string{"--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-client-ca", files.CA, "--require-auth"},
		func(ctx context.Context, p *Process) (http.Handler, error) {
			mux := http.NewServeMux()
			mux.Handle(echoPath, connect.NewUnaryHandler(echoPath,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					return connect.NewResponse(wrapperspb.String(guard.Principal(ctx).String())), nil
				}))
			p.HandlePublic("/public/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "public "+r.URL.Path)
			}))
			return mux, nil
		})
	p := r.p
	if !strings.HasPrefix(p.URL(), "https://") {
		t.Fatalf("URL %q with TLS", p.URL())
	}
	src, err := tlsconfig.Load(context.Background(), tlsconfig.Files{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	anon := NewTLSHTTPClient(src.ClientConfig())
	defer anon.CloseIdleConnections()
	testwait.Until(t, 30*time.Second, "the admin listener's /readyz over TLS", func() error {
		resp, err := anon.Get("https://" + p.AdminAddr().String() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return testwait.True(false)
		}
		return nil
	})

	// The process's own client presents its service identity.
	echo := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](p.HTTPClient(), p.URL()+echoPath)
	resp, err := echo.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("")))
	if err != nil {
		t.Fatalf("call with the service certificate: %v", err)
	}
	if got := resp.Msg.GetValue(); got != "Service:gateway/1" {
		t.Fatalf("principal %q, want Service:gateway/1", got)
	}
	// A user certificate from the CA is User:<CN>.
	user, err := ca.IssueClient("alice")
	if err != nil {
		t.Fatal(err)
	}
	userFiles := tlsconfig.Files{Cert: filepath.Join(dir, "alice.pem"), Key: filepath.Join(dir, "alice-key.pem"), CA: files.CA}
	if err := user.WriteFiles(userFiles.Cert, userFiles.Key); err != nil {
		t.Fatal(err)
	}
	usrc, err := tlsconfig.Load(context.Background(), userFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer usrc.Close()
	uc := NewTLSHTTPClient(usrc.ClientConfig())
	defer uc.CloseIdleConnections()
	resp, err = connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](uc, p.URL()+echoPath).
		CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("")))
	if err != nil || resp.Msg.GetValue() != "User:alice" {
		t.Fatalf("user certificate: %v %v", resp, err)
	}
	// No credentials: refused, one line.
	_, err = connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](anon, p.URL()+echoPath).
		CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("")))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || strings.Contains(err.Error(), "\n") {
		t.Fatalf("call without credentials: %v", err)
	}
	// HandlePublic's paths answer without credentials; every other path
	// still needs them.
	for path, want := range map[string]int{"/public/page": http.StatusOK, "/elsewhere": http.StatusUnauthorized} {
		resp, err := anon.Get(p.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusOK && string(body) != "public /public/page") {
			t.Errorf("GET %s without credentials: %d %q; want %d", path, resp.StatusCode, body, want)
		}
	}
}

func TestSecurityFlagsValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--require-auth"}, "require-auth"},
		{[]string{"--tls-cert", "/nonexistent.pem"}, "tls-key"},
		{[]string{"--tls-client-ca", "/nonexistent.pem"}, "tls-client-ca"},
		{[]string{"--super-users", "alice"}, "super-users"},
		{[]string{"--oidc-issuer", "https://issuer.example"}, "oidc-audience"},
	} {
		var logs syncBuffer
		code := Command{Name: "strata-test", Config: &testConfig{},
			Setup: func(context.Context, *Process) (http.Handler, error) { return nil, nil },
			Args:  tc.args, Stderr: &logs}.Run(context.Background())
		out := logs.String()
		if code != ExitConfig || !strings.Contains(out, tc.want) || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want a one-line config error naming %s", tc.args, code, out, tc.want)
		}
	}
}
