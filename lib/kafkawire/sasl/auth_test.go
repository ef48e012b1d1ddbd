package sasl

import (
	"context"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/token"
)

func TestParsePlain(t *testing.T) {
	z, u, p, err := ParsePlain([]byte("\x00alice\x00strata_secret"))
	if err != nil || z != "" || u != "alice" || p != "strata_secret" {
		t.Fatalf("got %q %q %q %v", z, u, p, err)
	}
	for _, bad := range []string{"", "alice", "alice\x00pw", "a\x00b\x00c\x00d"} {
		if _, _, _, err := ParsePlain([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
}

func TestParseOAuthBearer(t *testing.T) {
	for in, want := range map[string]string{
		"n,,\x01auth=Bearer abc.def.ghi\x01\x01":          "abc.def.ghi",
		"n,a=alice,\x01host=x\x01auth=bearer tok\x01\x01": "tok",
	} {
		got, err := ParseOAuthBearer([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "auth=Bearer x", "n,,\x01\x01", "n,,\x01auth=Basic x\x01\x01", "n,,\x01auth=Bearer \x01\x01"} {
		if _, err := ParseOAuthBearer([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzSASLMessages: the PLAIN and OAUTHBEARER parsers never panic, and
// what PLAIN parses joins back to the message.
func FuzzSASLMessages(f *testing.F) {
	for _, s := range []string{"\x00alice\x00strata_x", "n,,\x01auth=Bearer t\x01\x01", "", "\x00\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if z, u, p, err := ParsePlain(msg); err == nil && z+"\x00"+u+"\x00"+p != string(msg) {
			t.Fatalf("PLAIN %q parsed as %q %q %q", msg, z, u, p)
		}
		_, _ = ParseOAuthBearer(msg)
	})
}

// TestPlainUsername: PLAIN's password is the token, and its username
// must be the token's user; an authorization id, when sent, the same.
func TestPlainUsername(t *testing.T) {
	tok, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	users, err := token.NewUsers(map[string]token.Hashed{"alice": token.Hash(tok)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := authn.New(context.Background(), authn.Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	pw := tok.Reveal()
	ctx, err := authenticatePlain(context.Background(), a, []byte("\x00alice\x00"+pw))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := authn.PrincipalFrom(ctx); p.String() != "User:alice" {
		t.Fatalf("principal %v", p)
	}
	for name, msg := range map[string]string{
		"another username":      "\x00bob\x00" + pw,
		"principal form":        "\x00User:alice\x00" + pw,
		"another authorization": "bob\x00alice\x00" + pw,
		"unknown token":         "\x00alice\x00strata_" + strings.Repeat("A", 43),
		"empty password":        "\x00alice\x00",
	} {
		_, err := authenticatePlain(context.Background(), a, []byte(msg))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), pw) {
			t.Errorf("%s: the error quotes the token", name)
		}
	}
	ctx, err = authenticateOAuthBearer(context.Background(), a, []byte("n,,\x01auth=Bearer "+pw+"\x01\x01"))
	if err != nil {
		t.Fatalf("OAUTHBEARER with a token: %v", err)
	}
	if p, _ := authn.PrincipalFrom(ctx); p.String() != "User:alice" {
		t.Fatalf("OAUTHBEARER with a token: %v", p)
	}
}
