package acl

import (
	"fmt"
	"testing"
)

// BenchmarkAllowed measures one decision against 10,000 bindings: 1,000
// users with ten bindings each (literal and prefixed topics, a group)
// plus wildcard bindings every user's check also scans. go test -bench
// prints ns/op; nothing here asserts a time.
func BenchmarkAllowed(b *testing.B) {
	var bindings []Binding
	for u := range 1000 {
		p := User(fmt.Sprintf("user%d", u))
		for i := range 6 {
			bindings = append(bindings, Binding{p, Allow, Read, Topic, fmt.Sprintf("topic-%d-%d", u, i), Literal})
		}
		bindings = append(bindings,
			Binding{p, Allow, Write, Topic, fmt.Sprintf("team%d.", u), Prefixed},
			Binding{p, Allow, All, Topic, fmt.Sprintf("scratch%d.", u), Prefixed},
			Binding{p, Deny, Delete, Topic, fmt.Sprintf("team%d.audit", u), Literal},
			Binding{p, Allow, Read, Group, fmt.Sprintf("group%d", u), Literal},
		)
	}
	for i := range 10 {
		bindings[i] = Binding{AnyUser, Allow, Describe, Topic, fmt.Sprintf("public%d.", i), Prefixed}
	}
	a, err := NewAuthorizer([]Principal{User("admin")})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Set(bindings); err != nil {
		b.Fatal(err)
	}
	if n := a.Snapshot().Len(); n != 10000 {
		b.Fatalf("%d bindings, want 10000", n)
	}
	p := User("user500")
	for _, c := range []struct {
		name string
		op   Operation
		res  string
		want bool
	}{
		{"literal", Read, "topic-500-3", true},
		{"prefixed", Write, "team500.orders", true},
		{"denied", Delete, "team500.audit", false},
		{"no-match", Read, "other", false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if d := a.Allowed(p, c.op, Topic, c.res); d.Allowed != c.want {
				b.Fatalf("Allowed = %v (%s), want %v", d.Allowed, d.Reason, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				a.Allowed(p, c.op, Topic, c.res)
			}
		})
	}
}
