package kafkabridge

import (
	"context"
	"strings"
	"testing"

	"github.com/xdg-go/scram"

	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/token"
)

// scramUsers returns an authenticator knowing alice (a token with SCRAM
// credentials) and old (a token issued before SCRAM: its hash only),
// and their tokens.
func scramUsers(t *testing.T) (*authn.Authenticator, token.Token, token.Token) {
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
// are refused without quoting the token; a user whose token predates
// SCRAM is told to re-issue it.
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
				{"wrong token", "alice", other.Reveal(), "", false, "unknown user or wrong token"},
				{"another user's token", "old", alice.Reveal(), "", true, "predates SCRAM"},
				{"unknown user", "bob", alice.Reveal(), "", true, "unknown user or wrong token"},
				{"principal form", "User:alice", alice.Reveal(), "", true, "unknown user or wrong token"},
				{"token predates SCRAM", "old", old.Reveal(), "", true,
					"the token of user old predates SCRAM: re-issue it (strata user delete old, then strata user create old; ACLs and quotas stay) or use PLAIN"},
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
	// A client message that is no SCRAM message.
	ex := scramMechanism(a, token.SCRAMSHA256).Start(context.Background())
	if _, _, err := ex.Step(context.Background(), []byte("\x00alice,\x00"+alice.Reveal())); err == nil || !strings.Contains(err.Error(), "malformed first message") || strings.Contains(err.Error(), alice.Reveal()) {
		t.Errorf("a PLAIN message as SCRAM's first: %v", err)
	}
}
