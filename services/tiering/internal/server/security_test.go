package server

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// Only Strata services call TieringService: over mutual TLS, with the
// authentication middleware lib/serve puts in front of every API, a
// user's certificate is refused on a unary call and on the upload stream,
// a storage node's is served, and an instance without --require-auth
// serves everyone.
func TestOnlyServicesCallTiering(t *testing.T) {
	ca, err := devca.New("strata test")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(c *devca.Cert, err error) tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c.TLS()
	}
	server := issue(ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleTiering, ID: "1"}))
	certs := map[string]tls.Certificate{
		"User:alice":        issue(ca.IssueClient("alice")),
		"Service:storage/1": issue(ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "1"})),
	}
	for _, tc := range []struct {
		name        string
		requireAuth bool
		who         string
		refused     bool
	}{
		{"user", true, "User:alice", true},
		{"storage node", true, "Service:storage/1", false},
		{"user, not enforcing", false, "User:alice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := guard.New(context.Background(), guard.Config{RequireAuth: tc.requireAuth, Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			cfg := &Config{S3Bucket: "strata", S3Prefix: "strata", S3Region: "us-east-1",
				EmbeddedS3Listen: freeAddr(t), EmbeddedS3Dir: t.TempDir(), SpoolDir: t.TempDir(), CacheBytes: 1 << 20}
			tr, err := Start(context.Background(), cfg, Options{HTTPClient: http.DefaultClient, Logger: discardLogger(), Guard: g})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			mux := http.NewServeMux()
			mux.Handle(tr.Handler())
			srv := httptest.NewUnstartedServer(g.Wrap(mux))
			srv.EnableHTTP2 = true
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
			srv.StartTLS()
			defer srv.Close()
			hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
				TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{certs[tc.who]}}}}
			client := tieringv1connect.NewTieringServiceClient(hc, srv.URL)
			ctx := context.Background()

			_, err = client.GetTieredState(ctx, connect.NewRequest(&tieringv1.GetTieredStateRequest{}))
			checkRefusal(t, "GetTieredState", err, tc.refused, tc.who)
			up := client.UploadSegment(ctx)
			_ = up.Send(&tieringv1.UploadSegmentRequest{Part: &tieringv1.UploadSegmentRequest_Header{Header: &tieringv1.SegmentHeader{Topic: "orders"}}})
			_, err = up.CloseAndReceive()
			if tc.refused {
				checkRefusal(t, "UploadSegment", err, true, tc.who)
			} else if connect.CodeOf(err) == connect.CodePermissionDenied {
				t.Fatalf("UploadSegment by %s refused: %v", tc.who, err)
			}
		})
	}
}

// checkRefusal fails unless err is a one-line PERMISSION_DENIED naming
// who (refused) or nil (served).
func checkRefusal(t *testing.T, what string, err error, refused bool, who string) {
	t.Helper()
	if !refused {
		if err != nil {
			t.Fatalf("%s by %s: %v", what, who, err)
		}
		return
	}
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("%s by %s: %v, want PERMISSION_DENIED", what, who, err)
	}
	msg := err.(*connect.Error).Message()
	if !strings.Contains(msg, "permission denied") || !strings.Contains(msg, who) || strings.Contains(msg, "\n") {
		t.Fatalf("%s by %s: refusal %q, want one line naming %s", what, who, msg, who)
	}
}
