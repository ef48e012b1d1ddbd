package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/token"
)

func as(p string) context.Context {
	pr, err := acl.ParsePrincipal(p)
	if err != nil {
		panic(err)
	}
	return authn.NewContext(context.Background(), authn.Info{Principal: pr, Method: authn.MethodToken})
}

func newGuard(t *testing.T, require bool, supers ...string) *Guard {
	t.Helper()
	var ps []acl.Principal
	for _, s := range supers {
		p, err := acl.ParsePrincipal(s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	g, err := New(context.Background(), Config{RequireAuth: require, SuperUsers: ps})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestAuthorize(t *testing.T) {
	g := newGuard(t, true, "User:admin")
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		{Principal: "User:alice", Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW, Operation: commonv1.AclOperation_ACL_OPERATION_WRITE,
			ResourceType: commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC, ResourceName: "orders", PatternType: commonv1.AclPatternType_ACL_PATTERN_TYPE_PREFIXED},
		{Principal: "User:alice", Permission: commonv1.AclPermission_ACL_PERMISSION_DENY, Operation: commonv1.AclOperation_ACL_OPERATION_WRITE,
			ResourceType: commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC, ResourceName: "orders-secret"},
		{Principal: "not a principal", Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW, Operation: commonv1.AclOperation_ACL_OPERATION_ALL,
			ResourceType: commonv1.AclResourceType_ACL_RESOURCE_TYPE_CLUSTER, ResourceName: acl.ClusterName},
	}})
	for _, tc := range []struct {
		who   string
		op    acl.Operation
		topic string
		ok    bool
	}{
		{"User:alice", acl.Write, "orders", true},
		{"User:alice", acl.Write, "orders-eu", true},
		{"User:alice", acl.Write, "orders-secret", false}, // deny wins
		{"User:alice", acl.Read, "orders", false},
		{"User:alice", acl.Describe, "orders", true}, // implied by write
		{"User:bob", acl.Write, "orders", false},
		{"User:admin", acl.Delete, "anything", true},
		{"Service:storage/3", acl.Write, "orders", true},
	} {
		err := g.Authorize(as(tc.who), tc.op, acl.Topic, tc.topic)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s topic %s: %v, want allowed=%v", tc.who, tc.op, tc.topic, err, tc.ok)
		}
		if err != nil {
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("refusal code %v", connect.CodeOf(err))
			}
			msg := err.(*connect.Error).Message()
			for _, want := range []string{"permission denied", tc.who, tc.op.String(), tc.topic} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q lacks %q", msg, want)
				}
			}
		}
	}
	// Not enforcing: everything passes.
	open := newGuard(t, false)
	if err := open.Authorize(as("User:bob"), acl.Delete, acl.Topic, "orders"); err != nil {
		t.Fatalf("guard without --require-auth refused: %v", err)
	}
	// A grant takes effect with the next Apply.
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		{Principal: "User:bob", Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW, Operation: commonv1.AclOperation_ACL_OPERATION_READ,
			ResourceType: commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC, ResourceName: "orders"},
	}})
	if err := g.Authorize(as("User:bob"), acl.Read, acl.Topic, "orders"); err != nil {
		t.Fatalf("after the grant: %v", err)
	}
	if err := g.Authorize(as("User:alice"), acl.Write, acl.Topic, "orders"); err == nil {
		t.Fatal("alice's ACL survived a state without it")
	}
}

func TestRequireService(t *testing.T) {
	g := newGuard(t, true, "User:admin")
	if _, err := g.RequireService(as("Service:storage/3"), tlsconfig.RoleStorage); err != nil {
		t.Fatalf("storage identity: %v", err)
	}
	for _, who := range []string{"User:admin", "Service:gateway"} {
		if _, err := g.RequireService(as(who), tlsconfig.RoleStorage); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s as a storage node: %v", who, err)
		}
	}
	if err := g.RequireStorageNode(as("Service:storage/3"), 3); err != nil {
		t.Fatalf("node 3 as itself: %v", err)
	}
	if err := g.RequireStorageNode(as("Service:storage/3"), 4); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("node 3 as node 4: %v", err)
	}
	if err := newGuard(t, false).RequireStorageNode(as("User:bob"), 4); err != nil {
		t.Fatalf("not enforcing: %v", err)
	}
}

func TestApplyUsersAndQuotas(t *testing.T) {
	g := newGuard(t, true)
	tok, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	h := token.Hash(tok)
	g.Apply(&commonv1.SecurityState{
		Users:  []*commonv1.UserCredential{{Name: "alice", TokenSha256: h[:]}, {Name: "broken", TokenSha256: []byte{1}}},
		Quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: 1000}},
	})
	if u, ok := g.authn.Users().Authenticate(tok); !ok || u != "alice" {
		t.Fatalf("token of alice: %q %v", u, ok)
	}
	if _, ok := g.authn.Users().Hashed("broken"); ok {
		t.Fatal("a user with a malformed hash was applied")
	}
	// Alice's bucket holds 1000 bytes: 5000 at once leave 4000 of debt.
	r, err := g.Reserve(as("User:alice"), quota.Produce, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if wait := g.Settle(r, 5000); wait < 3*time.Second {
		t.Fatalf("alice at 5x her quota is throttled %v, want about 4s", wait)
	}
	short, cancel := context.WithTimeout(as("User:alice"), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Reserve(short, quota.Produce, 1); err == nil {
		t.Fatal("alice admitted while she owes 4s")
	}
	r, err = g.Reserve(as("User:bob"), quota.Produce, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if w := g.Settle(r, 1<<20); w != 0 {
		t.Fatalf("bob without a quota throttled %v", w)
	}
}

// TestApplySCRAM: SCRAM credentials travel with the users in the security
// state; a user's malformed ones are dropped and its token still works,
// a user without any (a token issued before SCRAM) has none.
func TestApplySCRAM(t *testing.T) {
	g := newGuard(t, true)
	var users []*commonv1.UserCredential
	toks := map[string]token.Token{}
	for _, name := range []string{"alice", "broken", "old"} {
		tok, err := token.New()
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
		h := token.Hash(tok)
		u := &commonv1.UserCredential{Name: name, TokenSha256: h[:]}
		if name != "old" {
			var keys []token.SCRAMKeys
			for _, m := range token.SCRAMMechanisms {
				k, err := token.DeriveSCRAM(tok, m)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			SCRAMToProto(u, keys...)
		}
		users = append(users, u)
	}
	users[1].ScramSha512.Iterations = 1
	g.Apply(&commonv1.SecurityState{Users: users})
	us := g.authn.Users()
	for _, m := range token.SCRAMMechanisms {
		k, ok := us.SCRAM("alice", m)
		if !ok || k.Mechanism != m || k.Iterations != token.SCRAMIterations {
			t.Errorf("alice's %s credential: %+v, %v", m, k, ok)
		}
		if _, ok := us.SCRAM("broken", m); ok {
			t.Errorf("broken's malformed %s credentials applied", m)
		}
		if _, ok := us.SCRAM("old", m); ok {
			t.Errorf("old has a %s credential", m)
		}
	}
	for name, tok := range toks {
		if u, ok := us.Authenticate(tok); !ok || u != name {
			t.Errorf("token of %s: %q %v", name, u, ok)
		}
	}
}

func TestBindingWireForm(t *testing.T) {
	b := acl.Binding{Principal: acl.User("alice"), Permission: acl.Deny, Operation: acl.Alter,
		ResourceType: acl.Group, ResourceName: "billing", PatternType: acl.Prefixed}
	back, err := BindingFromProto(BindingToProto(b))
	if err != nil || back != b {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if _, err := BindingFromProto(&commonv1.AclBinding{Principal: "User:alice"}); err == nil {
		t.Fatal("a binding without permission or operation accepted")
	}
}
