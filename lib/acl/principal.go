package acl

import (
	"errors"
	"fmt"
	"strings"
)

// Principal types. A principal's type says where the identity comes from.
const (
	// TypeUser is a person or an application: from a client certificate,
	// a token the cluster issued or an OIDC token.
	TypeUser = "User"
	// TypeService is one of Strata's own services (Service:storage/3),
	// known only from a service certificate. Service identities may do
	// everything; no binding names one.
	TypeService = "Service"
)

// MaxNameLen is the longest principal name, in bytes.
const MaxNameLen = 255

// Wildcard is the principal name that, in a binding, stands for every
// user: User:*.
const Wildcard = "*"

// Well-known principals.
var (
	// Anonymous is the principal of a request without credentials on a
	// cluster that lets them through (Kafka's User:ANONYMOUS).
	Anonymous = Principal{Type: TypeUser, Name: "ANONYMOUS"}
	// AnyUser is the wildcard principal User:*: a binding for it applies
	// to every user.
	AnyUser = Principal{Type: TypeUser, Name: Wildcard}
)

// Principal is an authenticated identity: a type and a name, written
// "Type:name" (User:alice, Service:storage/3). The zero value is no
// principal. Principals are comparable and may be map keys.
type Principal struct {
	// Type is TypeUser or TypeService.
	Type string
	// Name is the identity within its type: see [CheckName] for the
	// characters allowed, or Wildcard in User:*.
	Name string
}

// User returns the principal User:name. It does not check name; use
// [CheckName] for names that come from outside.
func User(name string) Principal { return Principal{Type: TypeUser, Name: name} }

// String returns "Type:name", the form ParsePrincipal reads.
func (p Principal) String() string { return p.Type + ":" + p.Name }

// IsZero reports whether p is the zero Principal.
func (p Principal) IsZero() bool { return p == Principal{} }

// IsWildcard reports whether p is User:*.
func (p Principal) IsWildcard() bool { return p == AnyUser }

// IsService reports whether p is a service identity.
func (p Principal) IsService() bool { return p.Type == TypeService }

// MarshalText returns p.String(), so a Principal is a string in JSON;
// the zero Principal is "".
func (p Principal) MarshalText() ([]byte, error) {
	if p.IsZero() {
		return []byte{}, nil
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses text with ParsePrincipal; "" is the zero
// Principal.
func (p *Principal) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*p = Principal{}
		return nil
	}
	q, err := ParsePrincipal(string(text))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// ParsePrincipal reads "Type:name" strictly: the type is User or Service
// (case matters, as in Kafka), the name follows [CheckName], and User:*
// is the wildcard principal. Nothing is trimmed.
func ParsePrincipal(s string) (Principal, error) {
	typ, name, ok := strings.Cut(s, ":")
	if !ok {
		return Principal{}, fmt.Errorf("acl: principal %s is not Type:name (User:alice)", quoteIfOdd(s))
	}
	if typ != TypeUser && typ != TypeService {
		return Principal{}, fmt.Errorf("acl: principal %s has type %s, want User or Service", quoteIfOdd(s), quoteIfOdd(typ))
	}
	if typ == TypeUser && name == Wildcard {
		return AnyUser, nil
	}
	if err := CheckName(name); err != nil {
		return Principal{}, fmt.Errorf("acl: principal %s: %w", quoteIfOdd(s), err)
	}
	return Principal{Type: typ, Name: name}, nil
}

// ParsePrincipals reads a list of principals separated by commas or
// semicolons (Kafka's super.users uses semicolons), such as
// "User:admin;User:ops". Empty elements are refused; an empty string is
// an empty list. The wildcard User:* is refused: a list of principals
// names people, and a list containing everyone is almost always a
// mistake.
func ParsePrincipals(s string) ([]Principal, error) {
	if s == "" {
		return nil, nil
	}
	var out []Principal
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		p, err := ParsePrincipal(f)
		if err != nil {
			return nil, err
		}
		if p.IsWildcard() {
			return nil, errors.New("acl: User:* is not allowed in a list of principals")
		}
		out = append(out, p)
	}
	if len(out) == 0 || strings.Count(s, ",")+strings.Count(s, ";") != len(out)-1 {
		return nil, fmt.Errorf("acl: principal list %s has an empty element", quoteIfOdd(s))
	}
	return out, nil
}

// CheckName returns nil when name may be a principal name: 1 to
// MaxNameLen bytes of ASCII letters, digits and . _ - @ + / | =, enough
// for user names, e-mail addresses, certificate common names without
// spaces, service names (storage/3) and the subjects OIDC providers issue
// (auth0|5f3c…, UUIDs, numbers). Spaces, colons, quotes, control
// characters and non-ASCII are refused so that a principal is one word
// in a log line, a CLI argument and an error message.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("name longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("name has characters outside A-Z a-z 0-9 . _ - @ + / | =")
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._-@+/|=", c) >= 0
}

// quoteIfOdd returns s as is when it is made of name characters and
// colons, and Go-quoted otherwise, so that an error about a malformed
// input stays one readable line whatever the input holds.
func quoteIfOdd(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) && s[i] != ':' && s[i] != '*' {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}
