package sasl

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/xdg-go/scram"

	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/token"
)

// scramUsers returns an authenticator knowing alice (a token with SCRAM
// credentials) and old (a token issued before SCRAM: its hash only),
// and their tokens.
func scramUsers(t testing.TB) (*authn.Authenticator, token.Token, token.Token) {
	t.Helper()
	alice, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	old, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	users, err := token.NewUsers(map[string]token.Hashed{"alice": token.Hash(alice), "old": token.Hash(old)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []token.SCRAMKeys
	for _, m := range token.SCRAMMechanisms {
		k, err := token.DeriveSCRAM(alice, m)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if users, err = users.WithSCRAM(map[string][]token.SCRAMKeys{"alice": keys}); err != nil {
		t.Fatal(err)
	}
	a, err := authn.New(context.Background(), authn.Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	return a, alice, old
}

// runSCRAM runs a SCRAM client (xdg-go/scram's) against the mechanism's
// exchange and returns the server's context, or the step's error and
// whether it failed at the first message.
func runSCRAM(t *testing.T, a *authn.Authenticator, m token.SCRAMMechanism, user, pass, authz string) (ctx context.Context, first bool, err error) {
	t.Helper()
	hash := scram.SHA256
	if m == token.SCRAMSHA512 {
		hash = scram.SHA512
	}
	cl, err := hash.NewClient(user, pass, authz)
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	ex := scramMechanism(a, m).Start(context.Background())
	c1, err := conv.Step("")
	if err != nil {
		t.Fatal(err)
	}
	challenge, done, err := ex.Step(context.Background(), []byte(c1))
	if err != nil {
		return nil, true, err
	}
	if done != nil {
		t.Fatal("authenticated after the first message")
	}
	final, err := conv.Step(string(challenge))
	if err != nil {
		t.Fatalf("client refused the server's first message %q: %v", challenge, err)
	}
	verifier, done, err := ex.Step(context.Background(), []byte(final))
	if err != nil {
		return nil, false, err
	}
	if done == nil {
		t.Fatal("no context after the last message")
	}
	// The client checks the server's signature: the server holds the
	// ServerKey of the token the client used.
	if _, err := conv.Step(string(verifier)); err != nil || !conv.Valid() {
		t.Fatalf("client refused the server's signature %q: %v", verifier, err)
	}
	return done, false, nil
}

// TestSCRAM: SCRAM-SHA-256 and SCRAM-SHA-512 authenticate a user by name
// and token; a wrong token, an unknown user and another authorization id
// are refused without quoting the token, at the final message with one
// reason, as is a user whose token predates SCRAM (whose refusal says to
// re-issue it, without saying the user exists).
func TestSCRAM(t *testing.T) {
	a, alice, old := scramUsers(t)
	other, _ := token.New()
	for _, m := range token.SCRAMMechanisms {
		t.Run(m.String(), func(t *testing.T) {
			if mech := scramMechanism(a, m); mech.Name != m.String() || (m == token.SCRAMSHA256) != (mech.Name == MechanismSCRAMSHA256) {
				t.Fatalf("mechanism named %q", mech.Name)
			}
			ctx, _, err := runSCRAM(t, a, m, "alice", alice.Reveal(), "")
			if err != nil {
				t.Fatalf("alice with her token: %v", err)
			}
			if info, _ := authn.FromContext(ctx); info.Principal.String() != "User:alice" || info.Method != authn.MethodToken {
				t.Fatalf("authenticated as %+v", info)
			}
			if _, _, err := runSCRAM(t, a, m, "alice", alice.Reveal(), "alice"); err != nil {
				t.Fatalf("alice with her own authorization id: %v", err)
			}
			for _, tc := range []struct {
				name, user, pass, authz string
				first                   bool
				want                    string
			}{
				{"wrong token", "alice", other.Reveal(), "", false, errSCRAMRefused.Error()},
				{"another user's token", "old", alice.Reveal(), "", false, errSCRAMRefused.Error()},
				{"unknown user", "bob", alice.Reveal(), "", false, errSCRAMRefused.Error()},
				{"principal form", "User:alice", alice.Reveal(), "", false, errSCRAMRefused.Error()},
				{"token predates SCRAM", "old", old.Reveal(), "", false, errSCRAMRefused.Error()},
				{"another authorization id", "alice", alice.Reveal(), "bob", true, "acting as another user is not offered"},
			} {
				_, first, err := runSCRAM(t, a, m, tc.user, tc.pass, tc.authz)
				switch {
				case err == nil:
					t.Errorf("%s: accepted", tc.name)
				case !strings.Contains(err.Error(), tc.want) || first != tc.first:
					t.Errorf("%s: refused at the first message %v with %q, want %v with %q", tc.name, first, err, tc.first, tc.want)
				case strings.Contains(err.Error(), tc.pass):
					t.Errorf("%s: the error quotes the token", tc.name)
				}
			}
		})
	}
	for msg, want := range map[string]string{
		"p=tls-unique,,n=alice,r=abc": "channel binding (SCRAM-...-PLUS) is not offered",
		"n,,m=ext,n=alice,r=abc":      "mandatory SCRAM extensions are not supported",
		"n,,n=al=ice,r=abc":           "malformed first message",
		"n,,n=alice,r=":               "malformed first message",
	} {
		ex := scramMechanism(a, token.SCRAMSHA256).Start(context.Background())
		if _, _, err := ex.Step(context.Background(), []byte(msg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", msg, err, want)
		}
	}
	// A client message that is no SCRAM message.
	ex := scramMechanism(a, token.SCRAMSHA256).Start(context.Background())
	if _, _, err := ex.Step(context.Background(), []byte("\x00alice,\x00"+alice.Reveal())); err == nil || !strings.Contains(err.Error(), "malformed first message") || strings.Contains(err.Error(), alice.Reveal()) {
		t.Errorf("a PLAIN message as SCRAM's first: %v", err)
	}
}

// TestSCRAMNonceEndsWithServers: as Kafka's server does, the final
// message's nonce may be longer than the server's as long as it ends with
// it; librdkafka sends its own nonce before the server's whole nonce. A
// nonce without the server's part, or a replayed final message on a new
// exchange, is refused.
func TestSCRAMNonceEndsWithServers(t *testing.T) {
	a, alice, _ := scramUsers(t)
	keys, _ := a.Users().SCRAM("alice", token.SCRAMSHA256)
	// final builds a client-final message for serverFirst with nonce,
	// proving knowledge of the token as a client does.
	final := func(clientFirstBare, serverFirst, nonce string) string {
		salted, err := pbkdf2.Key(sha256.New, alice.Reveal(), keys.Salt, keys.Iterations, sha256.Size)
		if err != nil {
			t.Fatal(err)
		}
		mac := hmac.New(sha256.New, salted)
		mac.Write([]byte("Client Key"))
		clientKey := mac.Sum(nil)
		stored := sha256.Sum256(clientKey)
		withoutProof := "c=biws,r=" + nonce
		mac = hmac.New(sha256.New, stored[:])
		mac.Write([]byte(clientFirstBare + "," + serverFirst + "," + withoutProof))
		proof := mac.Sum(nil)
		for i := range proof {
			proof[i] ^= clientKey[i]
		}
		return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)
	}
	start := func() (kafkawire.Exchange, string, string) {
		ex := scramMechanism(a, token.SCRAMSHA256).Start(context.Background())
		s1, done, err := ex.Step(context.Background(), []byte("n,,n=alice,r=cn=nce"))
		if err != nil || done != nil {
			t.Fatalf("first step: %v", err)
		}
		full, _, _ := strings.Cut(strings.TrimPrefix(string(s1), "r="), ",")
		if !strings.HasPrefix(full, "cn=nce") || len(full) <= len("cn=nce") {
			t.Fatalf("server-first %q does not extend the client nonce", s1)
		}
		return ex, string(s1), full
	}
	for name, tc := range map[string]struct {
		nonce func(full string) string
		ok    bool
	}{
		"the server's nonce":                  {func(full string) string { return full }, true},
		"librdkafka: client nonce + server's": {func(full string) string { return "cn=nce" + full }, true},
		"the client nonce only":               {func(string) string { return "cn=nce" }, false},
		"the server's nonce truncated":        {func(full string) string { return full[:len(full)-1] }, false},
	} {
		ex, s1, full := start()
		_, done, err := ex.Step(context.Background(), []byte(final("n=alice,r=cn=nce", s1, tc.nonce(full))))
		if tc.ok && (err != nil || done == nil) {
			t.Errorf("%s: refused: %v", name, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A final message that succeeded once does not work on a new exchange
	// (its server nonce differs).
	ex, s1, full := start()
	msg := final("n=alice,r=cn=nce", s1, full)
	if _, _, err := ex.Step(context.Background(), []byte(msg)); err != nil {
		t.Fatal(err)
	}
	ex2, _, _ := start()
	if _, _, err := ex2.Step(context.Background(), []byte(msg)); err == nil {
		t.Error("a replayed final message authenticated")
	}
}

func TestDecodeSASLName(t *testing.T) {
	for in, want := range map[string]string{"alice": "alice", "a=2Cb=3Dc": "a,b=c", "": ""} {
		if got, ok := decodeSASLName(in, true); !ok || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"a=b", "a=2", "a=", "=3d"} {
		if _, ok := decodeSASLName(bad, true); ok {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzSCRAMMessages: the exchange never panics on any pair of client
// messages, and never authenticates without the token.
func FuzzSCRAMMessages(f *testing.F) {
	a, _, _ := scramUsers(f)
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("y,a=alice,n=alice,r=x,ext=1"), []byte("c=eSxhPWFsaWNlLA==,r=x,p="))
	f.Add([]byte(""), []byte(","))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		ex := scramMechanism(a, token.SCRAMSHA512).Start(context.Background())
		if _, done, err := ex.Step(context.Background(), first); err != nil || done != nil {
			return
		}
		if _, done, err := ex.Step(context.Background(), final); err == nil || done != nil {
			t.Fatalf("authenticated with %q, %q", first, final)
		}
	})
}
