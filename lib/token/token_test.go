package token

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func newToken(t *testing.T) Token {
	t.Helper()
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestNewTokensAreWellFormedAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := newToken(t)
		s := tok.Reveal()
		if len(s) != Len || Len != 50 || !strings.HasPrefix(s, Prefix) {
			t.Fatalf("token %q: length %d (Len %d)", s, len(s), Len)
		}
		p, err := Parse(s)
		if err != nil || p.Reveal() != s {
			t.Fatalf("Parse of a new token: %v", err)
		}
		if !LooksLike(s) {
			t.Fatal("LooksLike is false for a token")
		}
		if seen[s] {
			t.Fatalf("token %q issued twice", s)
		}
		seen[s] = true
	}
}

func TestParseRefusesWithoutRepeatingInput(t *testing.T) {
	good := newToken(t).Reveal()
	for _, s := range []string{
		"",
		"strata_",
		good[:Len-1],
		good + "A",
		"strato_" + good[len(Prefix):],
		good[:Len-1] + "*",
		good[:Len-1] + "=",
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln",
	} {
		_, err := Parse(s)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", s, err)
		}
		if len(s) > len(Prefix) && err != nil && strings.Contains(err.Error(), s) {
			t.Errorf("error %q repeats the input", err)
		}
	}
	// 43 characters carry 258 bits: the last one's two low bits must be
	// zero, so that no two texts are the same token.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := strings.IndexByte(alphabet, good[Len-1])
	if v < 0 || v&3 != 0 {
		t.Fatalf("new token ends in %q", good[Len-1])
	}
	if _, err := Parse(good[:Len-1] + string(alphabet[v|1])); err == nil {
		t.Error("Parse accepts a non-canonical last character")
	}
}

func TestHashAndVerify(t *testing.T) {
	a, b := newToken(t), newToken(t)
	ha := Hash(a)
	if !Verify(a, ha) || Verify(b, ha) {
		t.Fatal("Verify does not tell tokens apart")
	}
	if Verify(Token{}, Hashed{}) || Verify(a, Hashed{}) || Verify(Token{}, ha) {
		t.Fatal("Verify accepts a zero token or hash")
	}
	if Hash(Token{}) != (Hashed{}) {
		t.Fatal("zero token hashes to something")
	}
	text, err := ha.MarshalText()
	if err != nil || !strings.HasPrefix(string(text), "sha256:") || len(text) != 7+64 {
		t.Fatalf("MarshalText = %s, %v", text, err)
	}
	var back Hashed
	if err := back.UnmarshalText(text); err != nil || back != ha {
		t.Fatalf("UnmarshalText = %v, %v", back, err)
	}
	if strings.Contains(ha.String(), a.Reveal()) {
		t.Fatal("hash text contains the token")
	}
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("G", 64),
		"sha256:" + strings.ToUpper(hexOf(ha)), "md5:" + hexOf(ha), "sha256:" + hexOf(ha) + "00"} {
		if _, err := ParseHashed(bad); err == nil {
			t.Errorf("ParseHashed(%q) succeeded", bad)
		}
	}
}

func hexOf(h Hashed) string { return strings.TrimPrefix(h.String(), "sha256:") }

type config struct {
	Name  string
	Token Token
}

type private struct {
	name string
	tok  Token
}

func TestTokenNeverPrints(t *testing.T) {
	tok := newToken(t)
	secret := tok.Reveal()
	body := secret[len(Prefix):]
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T %v"} {
		out = append(out,
			fmt.Sprintf(verb, tok),
			fmt.Sprintf(verb, &tok),
			fmt.Sprintf(verb, config{"c", tok}),
			fmt.Sprintf(verb, &config{"c", tok}),
			fmt.Sprintf(verb, private{"p", tok}),
			fmt.Sprintf(verb, []Token{tok}),
			fmt.Sprintf(verb, map[string]Token{"k": tok}),
		)
	}
	out = append(out, fmt.Sprint(tok), fmt.Sprintln(tok), tok.String(), tok.GoString())
	out = append(out, fmt.Errorf("auth failed for %v: %w", tok, errors.New("x")).Error())
	for _, o := range out {
		if strings.Contains(o, body) {
			t.Fatalf("token printed: %q", o)
		}
	}
	if got := fmt.Sprintf("%v", tok); got != Redacted {
		t.Fatalf("%%v = %q, want %q", got, Redacted)
	}
	if got := fmt.Sprintf("%v", Token{}); got != "" {
		t.Fatalf("zero token prints %q", got)
	}

	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		l := slog.New(h)
		l.Info("login", "token", tok, "cfg", config{"c", tok}, "priv", private{"p", tok}, "ptr", &tok)
		l.Info("group", slog.Group("auth", slog.Any("token", tok)))
		l.With("token", tok).Info("with")
	}
	if strings.Contains(buf.String(), body) {
		t.Fatalf("slog output contains the token:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), Redacted) {
		t.Fatalf("slog output does not show the redaction:\n%s", buf.String())
	}

	raw, err := json.Marshal(config{"c", tok})
	if err != nil || strings.Contains(string(raw), body) || !strings.Contains(string(raw), Redacted) {
		t.Fatalf("json = %s, %v", raw, err)
	}
}

func TestUsers(t *testing.T) {
	alice, bob, eve := newToken(t), newToken(t), newToken(t)
	u, err := NewUsers(map[string]Hashed{"alice": Hash(alice), "bob": Hash(bob)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok  Token
		want string
		ok   bool
	}{
		{alice, "alice", true},
		{bob, "bob", true},
		{eve, "", false},
		{Token{}, "", false},
	} {
		if got, ok := u.Authenticate(tc.tok); got != tc.want || ok != tc.ok {
			t.Errorf("Authenticate = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
		}
	}
	if names := u.Names(); len(names) != 2 || names[0] != "alice" || names[1] != "bob" || u.Len() != 2 {
		t.Fatalf("Names = %v, Len = %d", names, u.Len())
	}
	if h, ok := u.Hashed("alice"); !ok || h != Hash(alice) {
		t.Fatal("Hashed(alice) wrong")
	}
	var none *Users
	if _, ok := none.Authenticate(alice); ok || none.Len() != 0 || none.Names() != nil {
		t.Fatal("nil Users is not empty")
	}
	if _, ok := none.Hashed("alice"); ok {
		t.Fatal("nil Users has a hash")
	}
}

func TestNewUsersRefuses(t *testing.T) {
	h := Hash(newToken(t))
	for _, tc := range []struct {
		name  string
		users map[string]Hashed
		want  string
	}{
		{"bad name", map[string]Hashed{"a b": h}, "characters outside"},
		{"empty name", map[string]Hashed{"": h}, "empty name"},
		{"anonymous", map[string]Hashed{"ANONYMOUS": h}, "without credentials"},
		{"zero hash", map[string]Hashed{"a": {}}, "no token hash"},
		{"shared hash", map[string]Hashed{"a": h, "b": h}, "same token"},
	} {
		if _, err := NewUsers(tc.users); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewUsers = %v, want error with %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts is
// exactly Len characters starting with Prefix and round-trips, and that
// its error never contains the input.
func FuzzParse(f *testing.F) {
	tok, err := New()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{tok.Reveal(), "", "strata_", "strata_" + strings.Repeat("A", 43), "strata_" + strings.Repeat("_", 43), "x.y.z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		if err != nil {
			if err != ErrMalformed {
				t.Fatalf("error %v is not ErrMalformed, which cannot hold the input", err)
			}
			return
		}
		if got.Reveal() != s || len(s) != Len || !LooksLike(s) {
			t.Fatalf("Parse(%q) accepted %q", s, got.Reveal())
		}
		if !Verify(got, Hash(got)) {
			t.Fatal("a parsed token does not verify against its hash")
		}
	})
}
