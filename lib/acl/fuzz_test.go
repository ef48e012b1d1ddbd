package acl

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParsePrincipal checks that ParsePrincipal never panics, that what it
// accepts prints back to the same text and parses to the same principal,
// and that an accepted name is made of the documented characters. make
// test runs the seed corpus; make test-long fuzzes.
func FuzzParsePrincipal(f *testing.F) {
	for _, s := range []string{"User:alice", "Service:storage/3", "User:*", "User:", ":", "User:a:b", "user:x", "User:\xff", "User:a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrincipal(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("ParsePrincipal(%q).String() = %q", s, p.String())
		}
		if q, err := ParsePrincipal(p.String()); err != nil || q != p {
			t.Fatalf("round trip of %q: %v, %v", s, q, err)
		}
		if !p.IsWildcard() && CheckName(p.Name) != nil {
			t.Fatalf("accepted name %q fails CheckName", p.Name)
		}
	})
}

// FuzzParseSpec checks that parsing a command line and its operations
// never panics, and that a command line that names bindings prints back
// (Args) to one that names the same bindings, each binding's own Spec
// naming it alone.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"--principal User:alice --allow read,write --topic orders",
		"--principal User:* --deny all --group g --prefixed",
		"--principal User:bob --allow create --cluster",
		"--principal User:bob --allow read --topic * --prefixed",
		"--principal=User:x --deny=Describe,READ --topic=a\x00b",
		"--cluster --prefixed",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		s, err := ParseSpec(strings.Split(line, " "))
		if err != nil {
			return
		}
		got, err := s.Bindings()
		if err != nil {
			return
		}
		s2, err := ParseSpec(s.Args())
		if err != nil {
			t.Fatalf("Args %q of %q do not parse: %v", s.Args(), line, err)
		}
		again, err := s2.Bindings()
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %q: %v, %v; want %v", line, again, err, got)
		}
		for _, b := range got {
			if err := b.Validate(); err != nil {
				t.Fatalf("Bindings returned invalid %v: %v", b, err)
			}
			one, err := b.Spec().Bindings()
			if err != nil || len(one) != 1 || one[0] != b {
				t.Fatalf("%v.Spec() names %v, %v", b, one, err)
			}
		}
		if _, err := NewSnapshot(got); err != nil {
			t.Fatalf("NewSnapshot refused %v: %v", got, err)
		}
	})
}
