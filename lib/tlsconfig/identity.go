package tlsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Role is the kind of Strata service a certificate belongs to.
type Role string

// The roles of Strata's services, as spelled in an identity URI.
const (
	RoleController  Role = "controller"
	RoleStorage     Role = "storage"
	RoleGateway     Role = "gateway"
	RoleCoordinator Role = "coordinator"
	RoleTiering     Role = "tiering"
)

// Known reports whether r is one of the roles above.
func (r Role) Known() bool {
	switch r {
	case RoleController, RoleStorage, RoleGateway, RoleCoordinator, RoleTiering:
		return true
	}
	return false
}

// IdentityScheme and IdentityDomain make up the prefix of every service
// identity: spiffe://strata/. Part of the contract, do not change.
const (
	IdentityScheme = "spiffe"
	IdentityDomain = "strata"
)

// Identity is a Strata service's identity, carried by its certificate as
// one URI SAN of the form
//
//	spiffe://strata/<role>            (a role whose instances share one identity)
//	spiffe://strata/<role>/<id>       (one instance)
//
// The form is part of the contract (certificates issued outside Strata,
// for example by cert-manager, carry it): do not change it.
//
//   - role is controller, storage, gateway, coordinator or tiering (the
//     Role constants), in lower case.
//   - A storage identity always has an id, the node's --node-id in
//     canonical decimal (0, 1, 42; no sign, no leading zero, at most
//     2147483647), so that a node can be held to registering as itself.
//   - Other roles may leave the id out (a gateway Deployment whose pods
//     share one certificate), or give one of 1 to 64 letters, digits, '.',
//     '_' or '-', starting with a letter or digit (a controller's --id, a
//     pod name). Authorization decides by role for them; the id is for
//     logs and audit.
//
// The zero Identity is not valid.
type Identity struct {
	// Role is the service's role.
	Role Role
	// ID names the instance; see the type's doc for its syntax per role.
	ID string
}

var idSyntax = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Validate returns an error unless id is a valid identity (see [Identity]).
func (id Identity) Validate() error {
	if !id.Role.Known() {
		return fmt.Errorf("tlsconfig: unknown role %q", id.Role)
	}
	if id.Role == RoleStorage {
		if _, ok := parseNodeID(id.ID); !ok {
			return fmt.Errorf("tlsconfig: storage id %q is not a node id (decimal, 0 to 2147483647, no leading zero)", id.ID)
		}
		return nil
	}
	if id.ID != "" && !idSyntax.MatchString(id.ID) {
		return fmt.Errorf("tlsconfig: %s id %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", id.Role, id.ID)
	}
	return nil
}

// String returns the identity's URI, such as "spiffe://strata/storage/3"
// or "spiffe://strata/gateway". It does not validate id.
func (id Identity) String() string {
	s := IdentityScheme + "://" + IdentityDomain + "/" + string(id.Role)
	if id.ID != "" {
		s += "/" + id.ID
	}
	return s
}

// URL returns the identity's URI as a *url.URL, for a certificate
// template's URIs.
func (id Identity) URL() *url.URL {
	u := &url.URL{Scheme: IdentityScheme, Host: IdentityDomain, Path: "/" + string(id.Role)}
	if id.ID != "" {
		u.Path += "/" + id.ID
	}
	return u
}

// NodeID returns the storage node id of a storage identity, and false for
// any other identity.
func (id Identity) NodeID() (int32, bool) {
	if id.Role != RoleStorage {
		return 0, false
	}
	return parseNodeID(id.ID)
}

func parseNodeID(s string) (int32, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// ParseIdentity parses an identity URI exactly as [Identity.String]
// writes it: scheme "spiffe" and host "strata" in lower case, no user,
// port, query, fragment, escapes or trailing slash, a known role and a
// valid id.
func ParseIdentity(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Identity{}, fmt.Errorf("tlsconfig: identity %q: not a URI", s)
	}
	id, err := identityFromURL(u)
	if err == nil && id.String() != s {
		return Identity{}, fmt.Errorf("tlsconfig: identity %q: not in canonical form %q", s, id.String())
	}
	return id, err
}

func identityFromURL(u *url.URL) (Identity, error) {
	raw := u.String()
	bad := func(why string) (Identity, error) {
		return Identity{}, fmt.Errorf("tlsconfig: identity %q: %s", raw, why)
	}
	switch {
	case u.Scheme != IdentityScheme || u.Host != IdentityDomain:
		return bad("want spiffe://strata/<role>[/<id>]")
	case u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.RawFragment != "" || u.RawPath != "":
		return bad("want spiffe://strata/<role>[/<id>] with nothing else")
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if !strings.HasPrefix(u.Path, "/") || len(parts) > 2 {
		return bad("want spiffe://strata/<role>[/<id>]")
	}
	id := Identity{Role: Role(parts[0])}
	if len(parts) == 2 {
		if parts[1] == "" {
			return bad("empty id (trailing slash)")
		}
		id.ID = parts[1]
	}
	if err := id.Validate(); err != nil {
		return bad(strings.TrimPrefix(err.Error(), "tlsconfig: "))
	}
	if id.String() != raw {
		return bad("not in canonical form")
	}
	return id, nil
}

// isStrataURI reports whether u claims to be a Strata identity, however
// well or badly formed: such a URI SAN is either a valid identity or makes
// the certificate refused, never ignored.
func isStrataURI(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, IdentityScheme) && strings.EqualFold(u.Hostname(), IdentityDomain)
}

// IdentityOf returns the service identity cert names, and false when it
// names none or does not name exactly one valid one: a certificate with
// two spiffe://strata URI SANs, or one whose URI is malformed or has an
// unknown role, has no identity. URI SANs of other schemes or trust
// domains are ignored.
//
// IdentityOf reads the certificate only: call it on a certificate whose
// chain was verified (a server's r.TLS.VerifiedChains[0][0]; see
// [PeerPrincipal]).
func IdentityOf(cert *x509.Certificate) (Identity, bool) {
	id, err := identityOf(cert)
	return id, err == nil && id.Role != ""
}

// errNoIdentity is identityOf's answer for a certificate with no strata
// URI SAN at all.
var errNoIdentity = errors.New("tlsconfig: certificate names no strata identity")

func identityOf(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, errNoIdentity
	}
	var found []*url.URL
	for _, u := range cert.URIs {
		if isStrataURI(u) {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Identity{}, errNoIdentity
	case 1:
		return identityFromURL(found[0])
	default:
		return Identity{}, fmt.Errorf("tlsconfig: certificate names %d strata identities; want one", len(found))
	}
}
