package token

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
)

// SCRAMMechanism is a SCRAM hash function. The zero value is none.
type SCRAMMechanism uint8

const (
	SCRAMSHA256 SCRAMMechanism = iota + 1 // SCRAM-SHA-256 (RFC 7677)
	SCRAMSHA512                           // SCRAM-SHA-512
)

// SCRAMMechanisms are the mechanisms a token's credentials are derived
// for, in the order a server lists them.
var SCRAMMechanisms = []SCRAMMechanism{SCRAMSHA256, SCRAMSHA512}

// String returns the SASL mechanism name ("SCRAM-SHA-256"), "" for an
// unknown value.
func (m SCRAMMechanism) String() string {
	switch m {
	case SCRAMSHA256:
		return "SCRAM-SHA-256"
	case SCRAMSHA512:
		return "SCRAM-SHA-512"
	}
	return ""
}

// Hash returns the mechanism's hash function, nil for an unknown value.
func (m SCRAMMechanism) Hash() func() hash.Hash {
	switch m {
	case SCRAMSHA256:
		return sha256.New
	case SCRAMSHA512:
		return sha512.New
	}
	return nil
}

// size is the length of the mechanism's hash output, and so of StoredKey
// and ServerKey.
func (m SCRAMMechanism) size() int {
	switch m {
	case SCRAMSHA256:
		return sha256.Size
	case SCRAMSHA512:
		return sha512.Size
	}
	return 0
}

// SCRAMIterations is the PBKDF2 iteration count of derived credentials:
// 4096, the minimum RFC 7677 asks for and Kafka's default. The iterations
// slow down guessing a password from a stolen StoredKey; a token has 256
// random bits, which no guessing finds, so more would only slow every
// client's first connection (it runs PBKDF2 on each SCRAM login).
const SCRAMIterations = 4096

// scramSaltBytes is the length of a fresh random salt (128 bits).
const scramSaltBytes = 16

// SCRAMKeys is what a SCRAM server keeps for one user and mechanism.
// The zero value is no credential. Not a secret in the sense a token is
// (no token can be found from it), but it authenticates by SCRAM whoever
// also holds a captured exchange, so it travels and is stored only where
// the token's hash does.
type SCRAMKeys struct {
	// Mechanism is the hash function the keys were derived with.
	Mechanism SCRAMMechanism
	// Salt is the PBKDF2 salt, sent to the client in the server's first
	// message.
	Salt []byte
	// Iterations is the PBKDF2 iteration count.
	Iterations int
	// StoredKey is H(ClientKey); ServerKey signs the server's final
	// message. Each is Mechanism's hash size long.
	StoredKey, ServerKey []byte
}

// DeriveSCRAM returns the SCRAM credential of t for mechanism m with a
// fresh random salt and SCRAMIterations.
func DeriveSCRAM(t Token, m SCRAMMechanism) (SCRAMKeys, error) {
	if t.IsZero() {
		return SCRAMKeys{}, errors.New("token: no token to derive SCRAM keys from")
	}
	if m.Hash() == nil {
		return SCRAMKeys{}, fmt.Errorf("token: unknown SCRAM mechanism %d", m)
	}
	salt := make([]byte, scramSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return SCRAMKeys{}, fmt.Errorf("token: reading random bytes: %w", err)
	}
	return deriveSCRAM(m, *t.secret, salt, SCRAMIterations)
}

// deriveSCRAM applies RFC 5802's derivation to password.
func deriveSCRAM(m SCRAMMechanism, password string, salt []byte, iterations int) (SCRAMKeys, error) {
	h := m.Hash()
	salted, err := pbkdf2.Key(h, password, salt, iterations, m.size())
	if err != nil {
		return SCRAMKeys{}, fmt.Errorf("token: deriving SCRAM keys: %w", err)
	}
	clientKey := scramHMAC(h, salted, "Client Key")
	stored := h()
	stored.Write(clientKey)
	return SCRAMKeys{
		Mechanism:  m,
		Salt:       salt,
		Iterations: iterations,
		StoredKey:  stored.Sum(nil),
		ServerKey:  scramHMAC(h, salted, "Server Key"),
	}, nil
}

// VerifySCRAM reports whether k was derived from t: the keys t gives with
// k's salt and iteration count are k's, compared in constant time.
func VerifySCRAM(t Token, k SCRAMKeys) bool {
	if t.IsZero() || k.Validate() != nil {
		return false
	}
	d, err := deriveSCRAM(k.Mechanism, *t.secret, k.Salt, k.Iterations)
	return err == nil && hmac.Equal(d.StoredKey, k.StoredKey) && hmac.Equal(d.ServerKey, k.ServerKey)
}

// VerifyProof reports whether proof is a client's proof over authMessage
// (RFC 5802, section 3) by someone holding the password k was derived
// from: ClientKey = proof XOR HMAC(StoredKey, authMessage), and
// H(ClientKey) must be StoredKey, compared in constant time.
func (k SCRAMKeys) VerifyProof(authMessage string, proof []byte) bool {
	h := k.Mechanism.Hash()
	if h == nil || len(proof) != k.Mechanism.size() || len(k.StoredKey) != k.Mechanism.size() {
		return false
	}
	clientKey := scramHMAC(h, k.StoredKey, authMessage)
	for i := range clientKey {
		clientKey[i] ^= proof[i]
	}
	stored := h()
	stored.Write(clientKey)
	return hmac.Equal(stored.Sum(nil), k.StoredKey)
}

// ServerSignature returns HMAC(ServerKey, authMessage), which the
// server's final message carries so that the client knows the server
// holds its credential.
func (k SCRAMKeys) ServerSignature(authMessage string) []byte {
	return scramHMAC(k.Mechanism.Hash(), k.ServerKey, authMessage)
}

func scramHMAC(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// IsZero reports whether k is no credential.
func (k SCRAMKeys) IsZero() bool { return k.Mechanism == 0 && k.StoredKey == nil }

// Validate reports what makes k unusable: an unknown mechanism, an empty
// salt, fewer than SCRAMIterations iterations, or keys of the wrong
// length.
func (k SCRAMKeys) Validate() error {
	switch {
	case k.Mechanism.Hash() == nil:
		return fmt.Errorf("token: unknown SCRAM mechanism %d", k.Mechanism)
	case len(k.Salt) == 0:
		return fmt.Errorf("token: %s credential without a salt", k.Mechanism)
	case k.Iterations < SCRAMIterations:
		return fmt.Errorf("token: %s credential with %d iterations, fewer than %d", k.Mechanism, k.Iterations, SCRAMIterations)
	case len(k.StoredKey) != k.Mechanism.size() || len(k.ServerKey) != k.Mechanism.size():
		return fmt.Errorf("token: %s credential keys are not %d bytes", k.Mechanism, k.Mechanism.size())
	}
	return nil
}

// MockSCRAMSecretLen is the length of the secret MockSCRAM derives from.
const MockSCRAMSecretLen = 32

// MockSCRAM returns the credential a SCRAM server answers with for a name
// that has none (an unknown user), so that its first message does not say
// whether the user exists: the salt is HMAC-SHA-256(secret, mechanism and
// name) cut to a real salt's length, the same for every exchange and, with
// one secret, on every server, and the iteration count is a real one's
// (PostgreSQL's scram_mock_salt does the same; RFC 5802, section 9, warns
// that a server which refuses an unknown name at once reveals which
// names exist). The keys are derived from the secret too, and no proof
// matches them (finding one means inverting the hash); the server refuses
// the exchange at its final message, as it would a wrong token.
func MockSCRAM(secret []byte, name string, m SCRAMMechanism) SCRAMKeys {
	mac := func(label string) []byte {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(label))
		h.Write([]byte{0, byte(m)})
		h.Write([]byte(name))
		return h.Sum(nil)
	}
	keys := SCRAMKeys{Mechanism: m, Salt: mac("salt")[:scramSaltBytes], Iterations: SCRAMIterations}
	if h := m.Hash(); h != nil {
		keys.StoredKey = scramHMAC(h, mac("stored key"), name)
		keys.ServerKey = scramHMAC(h, mac("server key"), name)
	}
	return keys
}
