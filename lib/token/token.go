// Package token is the bearer tokens a Strata cluster issues to its users
// (`strata user create NAME`), and how a service checks one.
//
// # Format (part of the contract, do not change)
//
// A token is the text "strata_" followed by 32 bytes from crypto/rand in
// unpadded base64url (43 characters): 50 ASCII characters in all, 256 bits
// of entropy, recognisable in a leaked file or a secret scanner by its
// prefix. The cluster stores only its [Hashed] form, the SHA-256 of those
// 50 bytes, written "sha256:" and 64 lower-case hex digits.
//
// # Why SHA-256 and not bcrypt or argon2
//
// Password hashes are slow on purpose: a person's password has perhaps 40
// bits of entropy, and slowness is what keeps a stolen hash from being
// brute-forced. A token has 256 random bits: no number of guesses at any
// speed finds one from its hash, so slowness buys nothing, while every
// request is checked and a slow hash (tens of milliseconds of CPU each)
// would cap a node's request rate and hand anyone who can send requests a
// way to burn its CPU. A keyed hash (HMAC with a cluster secret) would add
// a secret every service must hold, for no gain against 256-bit inputs.
//
// # SCRAM credentials (RFC 5802, RFC 7677)
//
// A SASL SCRAM server does not see the password: it keeps, per user, a
// random salt, an iteration count and two keys derived from the
// password, and checks the client's proof against them. Strata derives
// them from a token once, when the token is issued (the only moment the
// cluster holds the token), as Kafka derives them when a SCRAM user is
// created, and stores them next to the token's SHA-256:
//
//	SaltedPassword = PBKDF2(HMAC-H, token, salt, iterations, len(H))
//	StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
//	ServerKey      = HMAC(SaltedPassword, "Server Key")
//
// The password is the token's text, which is ASCII and so unchanged by
// SASLprep. Neither the token nor SaltedPassword is kept. StoredKey cannot
// be turned back into the token (256 random bits behind PBKDF2 and a
// hash); whoever reads it together with a captured exchange of the same
// user could, as with any SCRAM store, compute ClientKey and authenticate
// by SCRAM as that user (docs/design/security.md).
//
// # Keeping tokens secret
//
// A [Token] prints, logs and marshals as [Redacted] whatever the verb,
// handler or encoder (fmt, slog, encoding/json); [Token.Reveal] is the one
// way to its text, for the line `strata user create` prints and for the
// Authorization header. Errors never contain a token.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Prefix starts every token.
const Prefix = "strata_"

// entropyBytes is how many random bytes a token carries.
const entropyBytes = 32

// Len is the length of a token's text: the prefix and entropyBytes in
// unpadded base64 (6 bits a character, rounded up).
const Len = len(Prefix) + (entropyBytes*8+5)/6

// Redacted is what a Token prints as.
const Redacted = "[REDACTED]"

// Token is a bearer token. Its text is held behind a pointer so that even
// a struct holding a Token in an unexported field, printed by fmt through
// reflection, shows an address rather than the secret. The zero value is
// no token. Tokens are immutable and safe to share between goroutines.
type Token struct {
	secret *string
}

// New returns a fresh token from crypto/rand.
func New() (Token, error) {
	var b [entropyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Token{}, fmt.Errorf("token: reading random bytes: %w", err)
	}
	s := Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return Token{secret: &s}, nil
}

// ErrMalformed is returned by Parse for text that is not a token.
var ErrMalformed = errors.New("token: not a Strata token (strata_ and 43 base64url characters)")

// Parse returns s as a Token when it has the token format, else
// ErrMalformed (which does not repeat s). Parse does not say whether the
// cluster knows the token: [Users.Authenticate] does.
func Parse(s string) (Token, error) {
	if len(s) != Len || !strings.HasPrefix(s, Prefix) {
		return Token{}, ErrMalformed
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s[len(Prefix):])
	if err != nil || len(b) != entropyBytes {
		return Token{}, ErrMalformed
	}
	return Token{secret: &s}, nil
}

// LooksLike reports whether s starts with Prefix: a token, well formed or
// not, rather than some other kind of bearer credential (a JWT).
func LooksLike(s string) bool { return strings.HasPrefix(s, Prefix) }

// IsZero reports whether t is no token.
func (t Token) IsZero() bool { return t.secret == nil }

// Reveal returns the token's text, "" for the zero Token. Call it only to
// hand the token to its owner or to send it to the cluster.
func (t Token) Reveal() string {
	if t.secret == nil {
		return ""
	}
	return *t.secret
}

func (t Token) redacted() string {
	if t.secret == nil {
		return ""
	}
	return Redacted
}

// String returns Redacted ("" for the zero Token).
func (t Token) String() string { return t.redacted() }

// GoString returns Redacted, for %#v.
func (t Token) GoString() string { return "token.Token(" + Redacted + ")" }

// Format prints Redacted for every verb, so that %x, %d or %q print no
// more than %v does.
func (t Token) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, t.GoString())
		return
	}
	fmt.Fprint(f, t.redacted())
}

// LogValue makes slog log Redacted.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.redacted()) }

// MarshalText returns Redacted, so that a Token in a struct written as
// JSON (a config dump, cluster.json) does not leak. There is no
// UnmarshalText: tokens are read with Parse.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.redacted()), nil }

// Hashed is what the cluster stores for a token: its SHA-256. Not a
// secret (no token can be found from it), but there is no reason to show
// it either. The zero value matches no token.
type Hashed [sha256.Size]byte

// hashedPrefix starts a Hashed's text.
const hashedPrefix = "sha256:"

// Hash returns the stored form of t. The zero Token hashes to the zero
// Hashed, which Verify and Users never accept.
func Hash(t Token) Hashed {
	if t.secret == nil {
		return Hashed{}
	}
	return sha256.Sum256([]byte(*t.secret))
}

// Verify reports whether t is the token h was made from, in time that
// does not depend on where the hashes differ.
func Verify(t Token, h Hashed) bool {
	if t.IsZero() || h.IsZero() {
		return false
	}
	th := Hash(t)
	return subtle.ConstantTimeCompare(th[:], h[:]) == 1
}

// IsZero reports whether h is the zero Hashed.
func (h Hashed) IsZero() bool { return h == Hashed{} }

// String returns "sha256:" and the hash in hex.
func (h Hashed) String() string { return hashedPrefix + hex.EncodeToString(h[:]) }

// MarshalText returns h.String(), for storage.
func (h Hashed) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (h *Hashed) UnmarshalText(text []byte) error {
	p, err := ParseHashed(string(text))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHashed reads "sha256:" and 64 lower-case hex digits.
func ParseHashed(s string) (Hashed, error) {
	hexPart, ok := strings.CutPrefix(s, hashedPrefix)
	var h Hashed
	if !ok || len(hexPart) != hex.EncodedLen(len(h)) || strings.ToLower(hexPart) != hexPart {
		return Hashed{}, errors.New("token: stored hash is not sha256: and 64 lower-case hex digits")
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return Hashed{}, errors.New("token: stored hash is not sha256: and 64 lower-case hex digits")
	}
	if h.IsZero() {
		return Hashed{}, errors.New("token: stored hash is all zeros")
	}
	return h, nil
}
