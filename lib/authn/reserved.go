package authn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/strata-mq/strata/lib/acl"
)

// Certificate users, token users and OIDC users are all User:<name>: a
// binding, a quota or --super-users names a principal without saying
// where it came from. So that one source cannot take a name another
// owns, the names only a certificate may carry are reserved, and OIDC
// names are kept out of the token users' space:
//
//   - a reserved name (a super user's, a service role's, ANONYMOUS; in
//     any case, so that Admin cannot pass for admin in a log) is refused
//     to a token user, at creation (CheckTokenUserName, by the
//     controller) and at authentication (a user stored before the name
//     was reserved), and to an OIDC principal unless OIDC names carry a
//     prefix;
//   - with OIDCConfig.PrincipalPrefix, every OIDC principal is
//     User:<prefix><claim> and no token user's name may start with the
//     prefix, so neither source can produce the other's names (and a
//     super user named with the prefix is one only the issuer can mint);
//   - without a prefix, an OIDC token whose name is a token user's is
//     refused: the two sources never merge into one principal.
//
// Certificate users other than the super users are not known to the
// cluster (the CA issues them), so a token user may share the name of
// one; docs/security.md says how to keep them apart.

// reservedNames maps each reserved name, in lower case, to what owns it.
type reservedNames map[string]string

func newReservedNames(names map[string]string) reservedNames {
	r := reservedNames{strings.ToLower(acl.Anonymous.Name): "the principal of requests without credentials"}
	for n, why := range names {
		r[strings.ToLower(n)] = why
	}
	return r
}

// owner returns what reserves name, in any case, and false when nothing
// does.
func (r reservedNames) owner(name string) (string, bool) {
	why, ok := r[strings.ToLower(name)]
	return why, ok
}

// ErrReservedName is matched by CheckTokenUserName's refusals.
var ErrReservedName = errors.New("authn: reserved user name")

type reservedError struct{ msg string }

func (e *reservedError) Error() string        { return e.msg }
func (e *reservedError) Is(target error) bool { return target == ErrReservedName }

// CheckTokenUserName returns nil when name may be a token user's, and an
// error matching ErrReservedName when a certificate principal or OIDC
// owns it. Its text is the one line a caller of CreateUser sees, so it
// carries no package prefix.
func (a *Authenticator) CheckTokenUserName(name string) error {
	if why, ok := a.reserved.owner(name); ok {
		return &reservedError{fmt.Sprintf("user name %s is reserved: %s", name, why)}
	}
	if p := a.oidcPrefix(); p != "" && strings.HasPrefix(strings.ToLower(name), strings.ToLower(p)) {
		return &reservedError{fmt.Sprintf("user name %s starts with %s, the prefix of OIDC principals (--oidc-principal-prefix)", name, p)}
	}
	return nil
}

func (a *Authenticator) oidcPrefix() string {
	if a.oidc == nil {
		return ""
	}
	return a.oidc.prefix
}

// checkOIDCName refuses an OIDC principal's name that a certificate or a
// token user owns; with a prefix, the name is the issuer's alone.
func (a *Authenticator) checkOIDCName(name string) error {
	if a.oidc.prefix != "" {
		return nil
	}
	if why, ok := a.reserved.owner(name); ok {
		return &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token names User:%s, which is reserved: %s", name, why)}
	}
	if _, ok := a.users.Load().Hashed(name); ok {
		return &Error{Message: fmt.Sprintf("unauthenticated: the OIDC token names User:%s, a token user of this cluster (set --oidc-principal-prefix to keep OIDC names apart)", name)}
	}
	return nil
}
