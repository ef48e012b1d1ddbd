package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/token"
)

// auditedGuard is an enforcing guard writing its audit lines to buf.
func auditedGuard(t *testing.T, buf *bytes.Buffer) *Guard {
	t.Helper()
	g, err := New(context.Background(), Config{RequireAuth: true, Audit: audit.New(slog.NewJSONHandler(buf, nil), audit.SamplerConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		{Principal: "User:alice", Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW, Operation: commonv1.AclOperation_ACL_OPERATION_WRITE,
			ResourceType: commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC, ResourceName: "orders"},
	}})
	return g
}

func decodeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// Each refusal the guard decides writes one audit line; what it allows
// writes none.
func TestGuardAudit(t *testing.T) {
	cases := []struct {
		name string
		call func(g *Guard)
		want map[string]any // nil: no line
	}{
		{"allowed", func(g *Guard) { _ = g.Authorize(as("User:alice"), acl.Write, acl.Topic, "orders") }, nil},
		{"filtered lists write nothing", func(g *Guard) { g.Allowed(as("User:bob"), acl.Describe, acl.Topic, "orders") }, nil},
		{"denied by no ACL", func(g *Guard) {
			_ = g.Authorize(audit.WithSource(as("User:bob"), "10.1.2.3:4"), acl.Write, acl.Topic, "orders")
		}, map[string]any{"event": "denied", "principal": "User:bob", "source": "10.1.2.3:4", "operation": "write",
			"resource": "topic orders", "outcome": "denied", "reason": "no ACL allows it"}},
		{"a user calling a service-only RPC", func(g *Guard) { _, _ = g.RequireService(as("User:bob"), tlsconfig.RoleStorage) },
			map[string]any{"event": "denied", "principal": "User:bob", "operation": "call", "outcome": "denied",
				"reason": "User:bob is not the storage service"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			g := auditedGuard(t, &buf)
			tc.call(g)
			got := decodeLines(t, &buf)
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("lines %v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d lines, want 1: %v", len(got), got)
			}
			for k, v := range tc.want {
				if got[0][k] != v {
					t.Errorf("%s = %#v, want %#v", k, got[0][k], v)
				}
			}
		})
	}
}

// A request whose credentials are refused writes an authentication
// failure with the client's address and never the credential.
func TestGuardAuditRefusedCredentials(t *testing.T) {
	var buf bytes.Buffer
	g := auditedGuard(t, &buf)
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("a refused request reached the handler") }))
	req := httptest.NewRequest(http.MethodPost, "/strata.gateway.v1.GatewayService/ListTopics", nil)
	req.RemoteAddr = "192.0.2.9:5555"
	req.Header.Set("Authorization", "Bearer strata_not-a-real-token")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", rec.Code)
	}
	got := decodeLines(t, &buf)
	if len(got) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(got), got)
	}
	l := got[0]
	if l["event"] != "authentication_failure" || l["source"] != "192.0.2.9:5555" || l["principal"] != "" ||
		l["resource"] != "/strata.gateway.v1.GatewayService/ListTopics" || l["outcome"] != "failure" {
		t.Errorf("line %v", l)
	}
	if strings.Contains(buf.String(), "not-a-real-token") {
		t.Errorf("the audit line quotes the credential: %s", buf.String())
	}
}

// A request an ACL refuses inside a Connect handler behind Wrap writes
// its line with the client's address and the RPC's procedure.
func TestGuardAuditDeniedConnectSource(t *testing.T) {
	var buf bytes.Buffer
	g := auditedGuard(t, &buf)
	tok, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	h := token.Hash(tok)
	g.Apply(&commonv1.SecurityState{Users: []*commonv1.UserCredential{{Name: "bob", TokenSha256: h[:]}}})
	const procedure = "/strata.test.v1.TestService/Call"
	handler := connect.NewUnaryHandler(procedure, func(ctx context.Context, _ *connect.Request[commonv1.TopicPartitions]) (*connect.Response[commonv1.TopicPartitions], error) {
		_, _ = g.RequireService(ctx, tlsconfig.RoleStorage)
		return nil, g.Authorize(ctx, acl.Write, acl.Topic, "orders")
	})
	req := httptest.NewRequest(http.MethodPost, procedure, strings.NewReader(""))
	req.RemoteAddr = "192.0.2.9:5555"
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Authorization", "Bearer "+tok.Reveal())
	rec := httptest.NewRecorder()
	g.Wrap(handler).ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("status %d, want 403: %s", rec.Code, rec.Body)
	}
	got := decodeLines(t, &buf)
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2: %v", len(got), got)
	}
	for _, l := range got {
		if l["event"] != "denied" || l["principal"] != "User:bob" || l["source"] != "192.0.2.9:5555" {
			t.Errorf("line %v, want a denied line of User:bob from 192.0.2.9:5555", l)
		}
	}
	if got[0]["resource"] != procedure || got[1]["resource"] != "topic orders" {
		t.Errorf("resources %v, %v; want %s, topic orders", got[0]["resource"], got[1]["resource"], procedure)
	}
}

// Creating a topic needs create on the topic or on the cluster; a request
// the cluster grant allows writes no denied line, and a refusal names the
// topic.
func TestAuthorizeCreateTopic(t *testing.T) {
	create := func(who string, rt commonv1.AclResourceType, name string) *commonv1.AclBinding {
		return &commonv1.AclBinding{Principal: who, Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW,
			Operation: commonv1.AclOperation_ACL_OPERATION_CREATE, ResourceType: rt, ResourceName: name}
	}
	for _, tc := range []struct {
		who     string
		allowed bool
	}{{"User:carol", true}, {"User:dave", true}, {"User:bob", false}} {
		t.Run(tc.who, func(t *testing.T) {
			var buf bytes.Buffer
			g := auditedGuard(t, &buf)
			g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
				create("User:carol", commonv1.AclResourceType_ACL_RESOURCE_TYPE_CLUSTER, acl.ClusterName),
				create("User:dave", commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC, "orders"),
			}})
			err := g.AuthorizeCreateTopic(as(tc.who), "orders")
			got := decodeLines(t, &buf)
			if tc.allowed {
				if err != nil || len(got) != 0 {
					t.Fatalf("err %v, lines %v; want allowed without a line", err, got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "orders") {
				t.Fatalf("err %v; want a refusal naming topic orders", err)
			}
			if len(got) != 1 || got[0]["resource"] != "topic orders" {
				t.Fatalf("lines %v; want one denied line about topic orders", got)
			}
		})
	}
}
