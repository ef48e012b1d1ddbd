package token

import (
	"fmt"
	"maps"
	"slices"

	"github.com/strata-mq/strata/lib/acl"
)

// Users is the set of users the cluster issued tokens to: each name
// (User:<name> as a principal) with the hash of its one token and, for
// tokens issued since SCRAM was offered, its SCRAM credentials. It is
// immutable: build a new one with NewUsers when users change. Safe for
// concurrent use. A nil *Users has no users.
//
// Authenticate hashes the presented token once and looks the hash up in a
// map. That leaks no more through timing than comparing against every
// entry with crypto/subtle would: the map's work depends only on the hash
// of what the caller sent, which the caller cannot steer toward a stored
// hash (SHA-256 is preimage resistant), so how fast a lookup fails tells
// the caller nothing about any stored token, which user exists, or how
// many bytes of a hash matched anything useful. A linear constant-time
// scan would cost O(users) on every request for no gain.
type Users struct {
	byHash map[Hashed]string
	byName map[string]Hashed
	// scram holds the users' SCRAM credentials by name and mechanism;
	// a user whose token predates SCRAM has none.
	scram map[scramKey]SCRAMKeys
}

type scramKey struct {
	name string
	mech SCRAMMechanism
}

// NewUsers returns the users of byName (name to hashed token). Each name
// must be a valid principal name (acl.CheckName) other than ANONYMOUS,
// each hash non-zero and no two users may share a hash. byName is not
// retained.
func NewUsers(byName map[string]Hashed) (*Users, error) {
	u := &Users{byHash: make(map[Hashed]string, len(byName)), byName: maps.Clone(byName)}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		h := byName[name]
		if err := acl.CheckName(name); err != nil {
			return nil, fmt.Errorf("token: user %q: %w", name, err)
		}
		if name == acl.Anonymous.Name {
			return nil, fmt.Errorf("token: user %s is the principal of requests without credentials", name)
		}
		if h.IsZero() {
			return nil, fmt.Errorf("token: user %s has no token hash", name)
		}
		if other, dup := u.byHash[h]; dup {
			return nil, fmt.Errorf("token: users %s and %s have the same token", other, name)
		}
		u.byHash[h] = name
	}
	return u, nil
}

// Authenticate returns the name of the user whose token t is, and false
// for the zero Token or a token the cluster did not issue or has revoked.
func (u *Users) Authenticate(t Token) (user string, ok bool) {
	if u == nil || t.IsZero() {
		return "", false
	}
	user, ok = u.byHash[Hash(t)]
	return user, ok
}

// WithSCRAM returns the users of u with the SCRAM credentials of keys (by
// user name) added. Each name must be one of u's users, each credential
// valid (SCRAMKeys.Validate) and at most one per mechanism. u is not
// changed; the map keys is not retained, the credentials' bytes are and
// must not change afterwards.
func (u *Users) WithSCRAM(keys map[string][]SCRAMKeys) (*Users, error) {
	if u == nil {
		u = &Users{}
	}
	out := &Users{byHash: u.byHash, byName: u.byName, scram: maps.Clone(u.scram)}
	if out.scram == nil {
		out.scram = map[scramKey]SCRAMKeys{}
	}
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		if _, ok := u.byName[name]; !ok {
			return nil, fmt.Errorf("token: SCRAM credentials for %s, who is not a user", name)
		}
		for _, k := range keys[name] {
			if err := k.Validate(); err != nil {
				return nil, fmt.Errorf("token: user %s: %w", name, err)
			}
			key := scramKey{name, k.Mechanism}
			if _, dup := out.scram[key]; dup {
				return nil, fmt.Errorf("token: user %s has two %s credentials", name, k.Mechanism)
			}
			out.scram[key] = k
		}
	}
	return out, nil
}

// SCRAM returns user name's credential for mechanism m, and false when
// the user is unknown or has none (its token was issued before SCRAM was
// offered: check with Hashed).
func (u *Users) SCRAM(name string, m SCRAMMechanism) (SCRAMKeys, bool) {
	if u == nil {
		return SCRAMKeys{}, false
	}
	k, ok := u.scram[scramKey{name, m}]
	return k, ok
}

// Hashed returns the stored hash of a user's token.
func (u *Users) Hashed(name string) (Hashed, bool) {
	if u == nil {
		return Hashed{}, false
	}
	h, ok := u.byName[name]
	return h, ok
}

// Names returns the user names, sorted.
func (u *Users) Names() []string {
	if u == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(u.byName))
}

// Len returns the number of users.
func (u *Users) Len() int {
	if u == nil {
		return 0
	}
	return len(u.byName)
}
