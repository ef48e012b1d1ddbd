package acl

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func b(p string, perm Permission, op Operation, rt ResourceType, name string, pt PatternType) Binding {
	pr, err := ParsePrincipal(p)
	if err != nil {
		panic(err)
	}
	return Binding{Principal: pr, Permission: perm, Operation: op, ResourceType: rt, ResourceName: name, PatternType: pt}
}

func TestAllowed(t *testing.T) {
	alice, bob, carol := User("alice"), User("bob"), User("carol")
	admin := User("admin")
	storage := Principal{Type: TypeService, Name: "storage/3"}
	bindings := []Binding{
		b("User:alice", Allow, Write, Topic, "orders", Literal),
		b("User:alice", Allow, Read, Topic, "orders", Literal),
		b("User:alice", Deny, Read, Topic, "orders", Literal), // deny beats the allow above
		b("User:alice", Allow, All, Topic, "logs.", Prefixed),
		b("User:alice", Deny, Delete, Topic, "logs.audit", Literal),
		b("User:alice", Allow, Read, Group, "billing", Literal),
		b("User:bob", Allow, Read, Topic, "*", Literal),
		b("User:bob", Allow, Create, Cluster, ClusterName, Literal),
		b("User:bob", Allow, Describe, Group, "g", Prefixed),
		b("User:*", Allow, Describe, Topic, "public.", Prefixed),
		b("User:*", Deny, All, Topic, "secret", Literal),
		b("User:bob", Allow, All, Topic, "secret", Literal), // the wildcard's deny still wins
		b("User:carol", Allow, Alter, Topic, "orders", Literal),
		b("User:erin", Allow, Read, Topic, "x", Literal),
		b("User:erin", Deny, Read, Topic, "x", Literal),
		b("User:erin", Allow, Write, TransactionalID, "etl-", Prefixed),
	}
	a, err := NewAuthorizer([]Principal{admin})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Set(bindings); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		p      Principal
		op     Operation
		rt     ResourceType
		res    string
		want   bool
		reason string
	}{
		{"literal allow", alice, Write, Topic, "orders", true, "allowed by ACL"},
		{"deny beats allow", alice, Read, Topic, "orders", false, "denied by ACL"},
		{"literal does not match another name", alice, Write, Topic, "orders2", false, "no ACL allows it"},
		{"literal does not match a longer name", alice, Write, Topic, "ordersX", false, "no ACL allows it"},
		{"other operation not allowed", alice, Create, Topic, "orders", false, "no ACL allows it"},
		{"describe implied by write", alice, Describe, Topic, "orders", true, "allowed by ACL"},
		{"deny of read does not deny describe", User("erin"), Describe, Topic, "x", true, "allowed by ACL"},
		{"deny of read still denies read", User("erin"), Read, Topic, "x", false, "denied by ACL"},
		{"describe implied by alter", carol, Describe, Topic, "orders", true, "allowed by ACL"},
		{"alter does not imply read", carol, Read, Topic, "orders", false, "no ACL allows it"},
		{"prefix matches", alice, Write, Topic, "logs.app", true, "allowed by ACL"},
		{"prefix matches itself", alice, Write, Topic, "logs.", true, "allowed by ACL"},
		{"prefix does not match shorter", alice, Write, Topic, "logs", false, "no ACL allows it"},
		{"all covers create", alice, Create, Topic, "logs.x", true, "allowed by ACL"},
		{"literal deny inside prefix allow", alice, Delete, Topic, "logs.audit", false, "denied by ACL"},
		{"prefix allow beside the literal deny", alice, Delete, Topic, "logs.audit2", true, "allowed by ACL"},
		{"resource type matters", alice, Read, Topic, "billing", false, "no ACL allows it"},
		{"group literal", alice, Read, Group, "billing", true, "allowed by ACL"},
		{"group describe implied", alice, Describe, Group, "billing", true, "allowed by ACL"},
		{"star resource matches every topic", bob, Read, Topic, "anything", true, "allowed by ACL"},
		{"star resource is per type", bob, Read, Group, "anything", false, "no ACL allows it"},
		{"cluster", bob, Create, Cluster, ClusterName, true, "allowed by ACL"},
		{"cluster other op", bob, Alter, Cluster, ClusterName, false, "no ACL allows it"},
		{"group prefix describe", bob, Describe, Group, "games", true, "allowed by ACL"},
		{"describe does not imply read", bob, Read, Group, "games", false, "no ACL allows it"},
		{"wildcard principal allow", carol, Describe, Topic, "public.news", true, "allowed by ACL"},
		{"wildcard principal for a user without bindings", User("dave"), Describe, Topic, "public.x", true, "allowed by ACL"},
		{"wildcard principal deny beats own allow", bob, Read, Topic, "secret", false, "denied by ACL"},
		{"wildcard all deny covers describe", bob, Describe, Topic, "secret", false, "denied by ACL"},
		{"nothing without an allow", User("dave"), Read, Topic, "orders", false, "no ACL allows it"},
		{"anonymous is a user like others", Anonymous, Describe, Topic, "public.a", true, "allowed by ACL"},
		{"anonymous without allow", Anonymous, Write, Topic, "public.a", false, "no ACL allows it"},
		{"super user", admin, Delete, Topic, "secret", true, "super user"},
		{"super user on the cluster", admin, Alter, Cluster, ClusterName, true, "super user"},
		{"service identity", storage, Write, Topic, "secret", true, "service identity"},
		{"service identity on the cluster", storage, Create, Cluster, ClusterName, true, "service identity"},
		{"transactional id by prefix", User("erin"), Write, TransactionalID, "etl-7", true, "allowed by ACL"},
		{"describe implied by write on a transactional id", User("erin"), Describe, TransactionalID, "etl-7", true, "allowed by ACL"},
		{"a topic's name is not a transactional id", User("erin"), Write, TransactionalID, "x", false, "no ACL allows it"},
		{"a transactional id is not a topic", User("erin"), Write, Topic, "etl-7", false, "no ACL allows it"},
		{"all is not a request", alice, All, Topic, "logs.x", false, "not a concrete operation"},
		{"invalid resource type", alice, Write, ResourceType(9), "orders", false, "invalid resource type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := a.Allowed(tc.p, tc.op, tc.rt, tc.res)
			if d.Allowed != tc.want || d.Reason != tc.reason {
				t.Fatalf("Allowed(%v, %v, %v %q) = %v (%s), want %v (%s)", tc.p, tc.op, tc.rt, tc.res, d.Allowed, d.Reason, tc.want, tc.reason)
			}
			if (d.Reason == "allowed by ACL" || d.Reason == "denied by ACL") != (d.Binding != nil) {
				t.Fatalf("binding %v with reason %q", d.Binding, d.Reason)
			}
			if d.Binding != nil && (d.Binding.Permission == Allow) != tc.want {
				t.Fatalf("decided by %v but allowed=%v", d.Binding, tc.want)
			}
			if tc.want != (d.Err() == nil) || tc.want != (d.Message() == "") {
				t.Fatalf("Err %v, Message %q for allowed=%v", d.Err(), d.Message(), tc.want)
			}
		})
	}
}

func TestDenialMessage(t *testing.T) {
	a, err := NewAuthorizer(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    Principal
		op   Operation
		rt   ResourceType
		name string
		want string
	}{
		{User("alice"), Write, Topic, "orders", "permission denied: User:alice may not write topic orders"},
		{User("bob"), Read, Group, "billing", "permission denied: User:bob may not read group billing"},
		{User("bob"), Create, Cluster, ClusterName, "permission denied: User:bob may not create cluster kafka-cluster"},
		{User("bob"), Read, Group, "a b\n", `permission denied: User:bob may not read group "a b\n"`},
	} {
		err := a.Allowed(tc.p, tc.op, tc.rt, tc.name).Err()
		if err == nil || err.Error() != tc.want {
			t.Fatalf("got %v, want %q", err, tc.want)
		}
		if !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("%v does not match ErrPermissionDenied", err)
		}
		var de *DeniedError
		if !errors.As(err, &de) || de.Decision.Principal != tc.p {
			t.Fatalf("%v is not a DeniedError for %v", err, tc.p)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("message is not one line: %q", err)
		}
	}
}

func TestStoreAppliesAtOnceAndKeepsOldSnapshots(t *testing.T) {
	a, err := NewAuthorizer(nil)
	if err != nil {
		t.Fatal(err)
	}
	alice := User("alice")
	if a.Allowed(alice, Read, Topic, "t").Allowed {
		t.Fatal("allowed before any binding")
	}
	grant := []Binding{b("User:alice", Allow, Read, Topic, "t", Literal)}
	if err := a.Set(grant); err != nil {
		t.Fatal(err)
	}
	old := a.Snapshot()
	if !a.Allowed(alice, Read, Topic, "t").Allowed {
		t.Fatal("grant not in force")
	}
	if err := a.Set(nil); err != nil {
		t.Fatal(err)
	}
	if a.Allowed(alice, Read, Topic, "t").Allowed {
		t.Fatal("revoke not in force")
	}
	if old.Len() != 1 {
		t.Fatalf("the earlier snapshot changed: %v", old.Bindings())
	}
	bad := []Binding{b("User:alice", Allow, Read, Cluster, "other", Literal)}
	if err := a.Set(append(grant, bad...)); err == nil {
		t.Fatal("Set accepted an invalid binding")
	}
	if a.Snapshot().Len() != 0 {
		t.Fatal("a failed Set replaced the snapshot")
	}
	a.Store(nil)
	if a.Snapshot().Len() != 0 || a.Allowed(alice, Read, Topic, "t").Allowed {
		t.Fatal("Store(nil) is not an empty set")
	}
}

func TestNewAuthorizerRefusesOddSuperUsers(t *testing.T) {
	for _, p := range []Principal{AnyUser, {Type: TypeService, Name: "x"}, User(""), User("a b")} {
		if _, err := NewAuthorizer([]Principal{p}); err == nil {
			t.Errorf("super user %v accepted", p)
		}
	}
	a, err := NewAuthorizer([]Principal{User("root")})
	if err != nil || !a.IsSuperUser(User("root")) || a.IsSuperUser(User("alice")) {
		t.Fatalf("IsSuperUser wrong (err %v)", err)
	}
}

func TestSnapshotDeduplicatesAndSorts(t *testing.T) {
	x := b("User:b", Allow, Read, Topic, "t", Literal)
	y := b("User:a", Deny, Write, Group, "g", Prefixed)
	s, err := NewSnapshot([]Binding{x, y, x})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Bindings()
	if len(got) != 2 || got[0] != y || got[1] != x {
		t.Fatalf("Bindings = %v", got)
	}
	got[0].ResourceName = "changed"
	if s.Bindings()[0] != y {
		t.Fatal("Bindings returned the snapshot's own slice")
	}
	var nilSnap *Snapshot
	if nilSnap.Len() != 0 || nilSnap.Bindings() != nil {
		t.Fatal("nil snapshot not empty")
	}
}

func TestAllowedDoesNotAllocate(t *testing.T) {
	a, err := NewAuthorizer(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Set([]Binding{
		b("User:alice", Allow, Read, Topic, "t", Literal),
		b("User:alice", Allow, Read, Topic, "p", Prefixed),
		b("User:*", Deny, Write, Topic, "*", Literal),
	}); err != nil {
		t.Fatal(err)
	}
	alice := User("alice")
	if n := testing.AllocsPerRun(100, func() { a.Allowed(alice, Read, Topic, "px") }); n != 0 {
		t.Fatalf("Allowed allocates %v times", n)
	}
}

func TestConcurrentAllowedAndStore(t *testing.T) {
	a, err := NewAuthorizer(nil)
	if err != nil {
		t.Fatal(err)
	}
	grant, err := NewSnapshot([]Binding{b("User:alice", Allow, Read, Topic, "t", Literal)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 1000 {
			if i%2 == 0 {
				a.Store(grant)
			} else {
				a.Store(nil)
			}
		}
	}()
	for range 1000 {
		d := a.Allowed(User("alice"), Read, Topic, "t")
		if d.Allowed != (d.Binding != nil) {
			t.Fatalf("inconsistent decision %+v", d)
		}
	}
	wg.Wait()
}
