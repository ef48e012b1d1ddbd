package authn

import (
	"crypto/rand"
	"fmt"

	"github.com/strata-mq/strata/lib/token"
)

// SCRAMCredential returns the SCRAM credential a SASL SCRAM server checks
// user name's proof against, and whether it is a real one. For a name with
// none (unknown, reserved, or a token issued before SCRAM was offered) it
// returns token.MockSCRAM's credential under the mock secret, so that the
// server answers every name the same way and refuses only at the final
// message: a SCRAM exchange does not tell a stranger which users exist.
func (a *Authenticator) SCRAMCredential(name string, m token.SCRAMMechanism) (keys token.SCRAMKeys, real bool) {
	if a.CheckTokenUserName(name) == nil {
		if k, ok := a.users.Load().SCRAM(name, m); ok {
			return k, true
		}
	}
	return token.MockSCRAM(*a.scramSecret.Load(), name, m), false
}

// SetSCRAMMockSecret replaces the secret unknown names' SCRAM salts are
// derived from. Every server a client may reach should hold the same one
// (the controller keeps it with the users), so that a name's fake salt is
// the same everywhere, as a real user's salt is. Until it is set, each
// Authenticator uses a random secret of its own. It must be
// token.MockSCRAMSecretLen bytes; b is not retained.
func (a *Authenticator) SetSCRAMMockSecret(b []byte) error {
	if len(b) != token.MockSCRAMSecretLen {
		return fmt.Errorf("authn: SCRAM mock secret of %d bytes, want %d", len(b), token.MockSCRAMSecretLen)
	}
	s := append([]byte(nil), b...)
	a.scramSecret.Store(&s)
	return nil
}

func randomSCRAMSecret() (*[]byte, error) {
	b := make([]byte, token.MockSCRAMSecretLen)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("authn: reading random bytes: %w", err)
	}
	return &b, nil
}
