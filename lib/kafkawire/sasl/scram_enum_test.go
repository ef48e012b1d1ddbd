package sasl

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/token"
)

// scramFirstAnswer sends a client-first message for user and returns the
// salt and iteration fields of the server's answer, failing the test when
// the server refuses it.
func scramFirstAnswer(t *testing.T, ex interface {
	Step(context.Context, []byte) ([]byte, context.Context, error)
}, user string) (salt, iterations string) {
	t.Helper()
	reply, _, err := ex.Step(context.Background(), []byte("n,,n="+user+",r=clientnonce"))
	if err != nil {
		t.Fatalf("first message for %s refused: %v", user, err)
	}
	fields := strings.Split(string(reply), ",")
	if len(fields) != 3 || !strings.HasPrefix(fields[0], "r=clientnonce") {
		t.Fatalf("server-first for %s is %q", user, reply)
	}
	return strings.TrimPrefix(fields[1], "s="), strings.TrimPrefix(fields[2], "i=")
}

// TestSCRAMDoesNotRevealUsers: the server's first message for a name
// without SCRAM credentials (unknown, or a token that predates SCRAM)
// has the form of a real user's, with a salt of the same length, the
// same iteration count, and the same salt on every exchange and on every
// server sharing the mock secret, as a real user's salt is; the exchange
// fails only at the final message, with the reason a wrong token gets.
func TestSCRAMDoesNotRevealUsers(t *testing.T) {
	a, alice, _ := scramUsers(t)
	b, _, _ := scramUsers(t)
	secret := bytes.Repeat([]byte{7}, token.MockSCRAMSecretLen)
	for _, x := range []interface{ SetSCRAMMockSecret([]byte) error }{a, b} {
		if err := x.SetSCRAMMockSecret(secret); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range token.SCRAMMechanisms {
		realSalt, realIter := scramFirstAnswer(t, scramMechanism(a, m).Start(context.Background()), "alice")
		for _, name := range []string{"bob", "old", "admin"} {
			salt, iter := scramFirstAnswer(t, scramMechanism(a, m).Start(context.Background()), name)
			if len(salt) != len(realSalt) || iter != realIter {
				t.Errorf("%s %s: salt %q, iterations %s; a user's: %q, %s", m, name, salt, iter, realSalt, realIter)
			}
			again, _ := scramFirstAnswer(t, scramMechanism(a, m).Start(context.Background()), name)
			other, _ := scramFirstAnswer(t, scramMechanism(b, m).Start(context.Background()), name)
			if again != salt || other != salt {
				t.Errorf("%s %s: salts %q, %q on a second exchange and %q on another server; want one", m, name, salt, again, other)
			}
		}
		bob, _ := scramFirstAnswer(t, scramMechanism(a, m).Start(context.Background()), "bob")
		carol, _ := scramFirstAnswer(t, scramMechanism(a, m).Start(context.Background()), "carol")
		if bob == carol {
			t.Errorf("%s: bob and carol share the fake salt %q", m, bob)
		}
		// The whole exchange with a real client: refused at the final
		// message, as a wrong token is.
		for _, user := range []string{"bob", "old"} {
			_, first, err := runSCRAM(t, a, m, user, alice.Reveal(), "")
			if err == nil || first || err.Error() != errSCRAMRefused.Error() {
				t.Errorf("%s %s: refused at the first message %v with %v, want at the final one with %q", m, user, first, err, errSCRAMRefused)
			}
		}
	}
	if err := a.SetSCRAMMockSecret([]byte("short")); err == nil {
		t.Error("a 5-byte mock secret was accepted")
	}
}
