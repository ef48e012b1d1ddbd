package authn

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTokenUserReservedName: a token user named like a super user, a
// service role or (any case of) either is refused at authentication, so
// a user created before the name was reserved cannot pass for the
// certificate principal; and CheckTokenUserName refuses such names at
// creation.
func TestTokenUserReservedName(t *testing.T) {
	users, toks := newUsers(t, "admin", "Admin", "storage", "alice")
	a, err := New(context.Background(), Config{Users: users, Reserved: map[string]string{
		"admin":   "a super user (--super-users)",
		"storage": "a Strata service role",
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, a)
	for _, name := range []string{"admin", "Admin", "storage"} {
		_, err := call(t, srv.Client(), srv.URL, "Bearer "+toks[name].Reveal())
		wantRefused(t, err, "is reserved", toks[name].Reveal())
		if err := a.CheckTokenUserName(name); !errors.Is(err, ErrReservedName) {
			t.Errorf("CheckTokenUserName(%s) = %v, want ErrReservedName", name, err)
		}
	}
	for _, name := range []string{"ANONYMOUS", "anonymous"} {
		if err := a.CheckTokenUserName(name); !errors.Is(err, ErrReservedName) {
			t.Errorf("CheckTokenUserName(%s) = %v, want ErrReservedName", name, err)
		}
	}
	if got, err := call(t, srv.Client(), srv.URL, "Bearer "+toks["alice"].Reveal()); err != nil || got != "User:alice token" {
		t.Fatalf("alice: %q, %v", got, err)
	}
	if err := a.CheckTokenUserName("alice"); err != nil {
		t.Fatalf("CheckTokenUserName(alice) = %v", err)
	}
}

// TestOIDCNamesKeptApart: without a prefix, an OIDC claim naming a super
// user or a token user is refused; with one, OIDC principals carry it
// and token user names may not start with it.
func TestOIDCNamesKeptApart(t *testing.T) {
	iss := newIssuer(t)
	users, _ := newUsers(t, "bob")
	reserved := map[string]string{"admin": "a super user (--super-users)"}
	jwtFor := func(sub string) string {
		return sign(t, iss.key, iss.kid, map[string]any{"iss": iss.srv.URL, "aud": "strata", "sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	}

	plain, err := New(context.Background(), Config{Users: users, Reserved: reserved,
		OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, plain)
	for sub, want := range map[string]string{"admin": "is reserved", "ADMIN": "is reserved", "bob": "a token user"} {
		_, err := call(t, srv.Client(), srv.URL, "Bearer "+jwtFor(sub))
		wantRefused(t, err, want)
	}
	if got, err := call(t, srv.Client(), srv.URL, "Bearer "+jwtFor("carol")); err != nil || got != "User:carol oidc" {
		t.Fatalf("carol: %q, %v", got, err)
	}

	prefixed, err := New(context.Background(), Config{Users: users, Reserved: reserved,
		OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata", PrincipalPrefix: "oidc."}})
	if err != nil {
		t.Fatal(err)
	}
	srv = serve(t, prefixed)
	for sub, want := range map[string]string{"admin": "User:oidc.admin oidc", "bob": "User:oidc.bob oidc"} {
		if got, err := call(t, srv.Client(), srv.URL, "Bearer "+jwtFor(sub)); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", sub, got, err, want)
		}
	}
	for _, name := range []string{"oidc.alice", "OIDC.alice"} {
		if err := prefixed.CheckTokenUserName(name); !errors.Is(err, ErrReservedName) {
			t.Errorf("CheckTokenUserName(%s) = %v, want ErrReservedName", name, err)
		}
	}
	if _, err := New(context.Background(), Config{OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata", PrincipalPrefix: "oidc:"}}); err == nil {
		t.Fatal("a prefix with a colon was accepted")
	}
}

// TestOIDCEmailVerified: when the email claim names the principal, only
// a token whose email_verified is true is accepted (OpenID Connect Core
// 1.0, section 5.1).
func TestOIDCEmailVerified(t *testing.T) {
	iss := newIssuer(t)
	a, err := New(context.Background(), Config{OIDC: &OIDCConfig{IssuerURL: iss.srv.URL, Audience: "strata", PrincipalClaim: "email"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, a)
	jwtWith := func(verified any) string {
		c := map[string]any{"iss": iss.srv.URL, "aud": "strata", "sub": "x", "email": "admin@example.com", "exp": time.Now().Add(time.Hour).Unix()}
		if verified != nil {
			c["email_verified"] = verified
		}
		return sign(t, iss.key, iss.kid, c)
	}
	for _, v := range []any{nil, false, "false", "yes", 1} {
		_, err := call(t, srv.Client(), srv.URL, "Bearer "+jwtWith(v))
		wantRefused(t, err, "email_verified is not true")
	}
	for _, v := range []any{true, "true"} {
		if got, err := call(t, srv.Client(), srv.URL, "Bearer "+jwtWith(v)); err != nil || got != "User:admin@example.com oidc" {
			t.Errorf("email_verified %v: %q, %v", v, got, err)
		}
	}
}
