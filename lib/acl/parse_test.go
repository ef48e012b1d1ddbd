package acl

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParsePrincipal(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Principal
		wantErr string
	}{
		{in: "User:alice", want: User("alice")},
		{in: "User:alice@example.com", want: User("alice@example.com")},
		{in: "User:auth0|5f3c.x_y-z+w=", want: User("auth0|5f3c.x_y-z+w=")},
		{in: "Service:storage/3", want: Principal{TypeService, "storage/3"}},
		{in: "User:*", want: AnyUser},
		{in: "User:ANONYMOUS", want: Anonymous},
		{in: "alice", wantErr: "not Type:name"},
		{in: "", wantErr: "not Type:name"},
		{in: "user:alice", wantErr: "want User or Service"},
		{in: "Group:x", wantErr: "want User or Service"},
		{in: "User:", wantErr: "empty name"},
		{in: "User:a:b", wantErr: "characters outside"},
		{in: "User: alice", wantErr: "characters outside"},
		{in: "User:alice\n", wantErr: "characters outside"},
		{in: "User:élise", wantErr: "characters outside"},
		{in: "User:a*", wantErr: "characters outside"},
		{in: "Service:*", wantErr: "characters outside"},
		{in: "User:" + strings.Repeat("a", MaxNameLen+1), wantErr: "longer than"},
	} {
		got, err := ParsePrincipal(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePrincipal(%q) = %v, %v; want error with %q", tc.in, got, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("ParsePrincipal(%q): error is not one line: %q", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePrincipal(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

func TestPrincipalJSON(t *testing.T) {
	in := map[string]Principal{"p": User("alice")}
	raw, err := json.Marshal(in)
	if err != nil || string(raw) != `{"p":"User:alice"}` {
		t.Fatalf("Marshal = %s, %v", raw, err)
	}
	var out map[string]Principal
	if err := json.Unmarshal(raw, &out); err != nil || out["p"] != User("alice") {
		t.Fatalf("Unmarshal = %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"p":"alice"}`), &out); err == nil {
		t.Fatal("Unmarshal accepted a principal without a type")
	}
	raw, err = json.Marshal(map[string]Principal{"p": {}})
	if err != nil || string(raw) != `{"p":""}` {
		t.Fatalf("Marshal of the zero principal = %s, %v", raw, err)
	}
	out = nil
	if err := json.Unmarshal(raw, &out); err != nil || !out["p"].IsZero() {
		t.Fatalf("Unmarshal of \"\" = %v, %v", out, err)
	}
}

func TestParsePrincipals(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Principal
		ok   bool
	}{
		{"", nil, true},
		{"User:admin", []Principal{User("admin")}, true},
		{"User:admin;User:ops", []Principal{User("admin"), User("ops")}, true},
		{"User:admin,User:ops", []Principal{User("admin"), User("ops")}, true},
		{"User:admin;", nil, false},
		{";User:admin", nil, false},
		{"User:a;;User:b", nil, false},
		{";", nil, false},
		{"User:*", nil, false},
		{"User:a; User:b", nil, false},
	} {
		got, err := ParsePrincipals(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParsePrincipals(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseOperations(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Operation
		ok   bool
	}{
		{"read", []Operation{Read}, true},
		{"read,write", []Operation{Read, Write}, true},
		{"write,read,write", []Operation{Read, Write}, true},
		{"Read,WRITE", []Operation{Read, Write}, true},
		{"all", []Operation{All}, true},
		{"describe,alter,delete,create", []Operation{Create, Delete, Alter, Describe}, true},
		{"", nil, false},
		{"read,", nil, false},
		{",read", nil, false},
		{"read, write", nil, false},
		{"reed", nil, false},
		{"idempotentwrite", nil, false},
	} {
		got, err := ParseOperations(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParseOperations(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err == nil {
			if again, err := ParseOperations(FormatOperations(got)); err != nil || !slices.Equal(again, got) {
				t.Errorf("round trip of %q: %v, %v", tc.in, again, err)
			}
		}
	}
}

func TestEnumNamesRoundTrip(t *testing.T) {
	for _, o := range Operations {
		if got, err := ParseOperation(o.String()); err != nil || got != o {
			t.Errorf("operation %v: %v, %v", o, got, err)
		}
	}
	for _, p := range []Permission{Allow, Deny} {
		if got, err := ParsePermission(strings.ToUpper(p.String())); err != nil || got != p {
			t.Errorf("permission %v: %v, %v", p, got, err)
		}
	}
	for _, r := range []ResourceType{Topic, Group, Cluster, TransactionalID} {
		if got, err := ParseResourceType(r.String()); err != nil || got != r {
			t.Errorf("resource type %v: %v, %v", r, got, err)
		}
	}
	for _, p := range []PatternType{Literal, Prefixed} {
		if got, err := ParsePatternType(p.String()); err != nil || got != p {
			t.Errorf("pattern type %v: %v, %v", p, got, err)
		}
	}
	for _, bad := range []string{"", "x", "all "} {
		if _, err := ParseOperation(bad); err == nil {
			t.Errorf("ParseOperation(%q) succeeded", bad)
		}
		if _, err := ParsePermission(bad); err == nil {
			t.Errorf("ParsePermission(%q) succeeded", bad)
		}
		if _, err := ParseResourceType(bad); err == nil {
			t.Errorf("ParseResourceType(%q) succeeded", bad)
		}
		if _, err := ParsePatternType(bad); err == nil {
			t.Errorf("ParsePatternType(%q) succeeded", bad)
		}
	}
	if Operation(0).Valid() || Operation(0).String() != "Operation(0)" || Permission(7).Valid() {
		t.Error("zero or out-of-range enums are valid")
	}
}

func TestSpecBindings(t *testing.T) {
	alice := User("alice")
	for _, tc := range []struct {
		name    string
		args    string
		want    []Binding
		wantErr string
	}{
		{"allow ops on a topic", "--principal User:alice --allow read,write --topic orders", []Binding{
			{alice, Allow, Read, Topic, "orders", Literal},
			{alice, Allow, Write, Topic, "orders", Literal},
		}, ""},
		{"deny all on prefixed group", "--principal User:alice --deny all --group team. --prefixed", []Binding{
			{alice, Deny, All, Group, "team.", Prefixed},
		}, ""},
		{"cluster", "--principal User:alice --allow create --cluster", []Binding{
			{alice, Allow, Create, Cluster, ClusterName, Literal},
		}, ""},
		{"transactional id", "--principal User:alice --allow write --transactional-id etl-1", []Binding{
			{alice, Allow, Write, TransactionalID, "etl-1", Literal},
		}, ""},
		{"prefixed transactional id", "--principal User:alice --allow describe --transactional-id etl- --prefixed", []Binding{
			{alice, Allow, Describe, TransactionalID, "etl-", Prefixed},
		}, ""},
		{"transactional id and topic", "--principal User:alice --allow write --topic t --transactional-id x", nil, "exactly one of"},
		{"wildcard principal and resource", "--principal=User:* --allow=describe --topic=*", []Binding{
			{AnyUser, Allow, Describe, Topic, "*", Literal},
		}, ""},
		{"no principal", "--allow read --topic t", nil, "--principal is required"},
		{"service principal", "--principal Service:storage/1 --allow read --topic t", nil, "service identities"},
		{"both allow and deny", "--principal User:alice --allow read --deny write --topic t", nil, "not both"},
		{"neither allow nor deny", "--principal User:alice --topic t", nil, "--allow OPS or --deny OPS"},
		{"bad ops", "--principal User:alice --allow read,fly --topic t", nil, "unknown operation"},
		{"no resource", "--principal User:alice --allow read", nil, "exactly one of"},
		{"two resources", "--principal User:alice --allow read --topic t --group g", nil, "exactly one of"},
		{"prefixed cluster", "--principal User:alice --allow alter --cluster --prefixed", nil, "not --cluster"},
		{"prefixed star", "--principal User:alice --allow read --topic * --prefixed", nil, "taken literally"},
		{"empty topic", "--principal User:alice --allow read --topic=", nil, "--topic is empty"},
		{"unknown flag", "--principal User:alice --allow read --topic t --host h", nil, "not defined"},
		{"positional", "--principal User:alice --allow read --topic t extra", nil, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec(strings.Fields(tc.args))
			var got []Binding
			if err == nil {
				got, err = s.Bindings()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			again, err := ParseSpec(s.Args())
			if err != nil || again != s {
				t.Fatalf("Args round trip: %+v, %v; want %+v", again, err, s)
			}
			for _, bd := range got {
				one, err := bd.Spec().Bindings()
				if err != nil || len(one) != 1 || one[0] != bd {
					t.Fatalf("%v.Spec() names %v, %v", bd, one, err)
				}
			}
		})
	}
}

func TestBindingValidate(t *testing.T) {
	ok := Binding{User("alice"), Allow, Read, Topic, "t", Literal}
	for _, tc := range []struct {
		name   string
		change func(*Binding)
		want   string
	}{
		{"valid", func(*Binding) {}, ""},
		{"zero principal", func(b *Binding) { b.Principal = Principal{} }, "not a user"},
		{"service", func(b *Binding) { b.Principal = Principal{TypeService, "gateway"} }, "service identities"},
		{"bad name", func(b *Binding) { b.Principal.Name = "a b" }, "characters outside"},
		{"no permission", func(b *Binding) { b.Permission = 0 }, "invalid Permission(0)"},
		{"no operation", func(b *Binding) { b.Operation = 0 }, "invalid Operation(0)"},
		{"no pattern", func(b *Binding) { b.PatternType = 0 }, "invalid PatternType(0)"},
		{"no resource type", func(b *Binding) { b.ResourceType = 0 }, "invalid ResourceType(0)"},
		{"empty name", func(b *Binding) { b.ResourceName = "" }, "empty resource name"},
		{"control char", func(b *Binding) { b.ResourceName = "a\x00" }, "control characters"},
		{"not utf8", func(b *Binding) { b.ResourceName = "\xff" }, "not UTF-8"},
		{"too long", func(b *Binding) { b.ResourceName = strings.Repeat("x", MaxResourceNameLen+1) }, "longer than"},
		{"cluster other name", func(b *Binding) { b.ResourceType, b.ResourceName = Cluster, "c" }, "is named kafka-cluster"},
		{"cluster prefixed", func(b *Binding) { b.ResourceType, b.ResourceName, b.PatternType = Cluster, ClusterName, Prefixed }, "cannot be prefixed"},
	} {
		bd := ok
		tc.change(&bd)
		err := bd.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestBindingString(t *testing.T) {
	for _, tc := range []struct {
		b    Binding
		want string
	}{
		{Binding{User("alice"), Allow, Write, Topic, "orders", Literal}, "User:alice allow write topic orders"},
		{Binding{AnyUser, Deny, All, Group, "team.", Prefixed}, "User:* deny all group team. (prefixed)"},
		{Binding{User("bob"), Allow, Alter, Cluster, ClusterName, Literal}, "User:bob allow alter cluster kafka-cluster"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
