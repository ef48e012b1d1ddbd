package authn

import (
	"net/http"

	"github.com/strata-mq/strata/lib/acl"
)

// ForwardHeader carries the principal a door (the gateway, a Kafka
// listener) serves a request for, on the call the door makes to the
// service that owns the data: "Strata-Principal: User:alice". The owner
// then checks and charges that principal, not the door, so each access
// rule is written once, where the data lives. This is how Kafka's
// KIP-590 envelope carries a client's principal from a broker to the
// controller, and how etcd's gRPC proxy passes credentials on.
//
// Only a caller that Config.MayForward accepts (a door's own service
// identity, proven by its client certificate) may send it; anyone else
// who sends it is refused, so no user can act as another by adding a
// header.
const ForwardHeader = "Strata-Principal"

// forwarded applies r's ForwardHeader to info, the authenticated caller:
// ok false when r carries none (info stands); the Info of the principal
// named, with Via the caller, when the caller may forward; a refusal
// otherwise. Without enforcement (AllowAnonymous) the header of a caller
// that may not forward is ignored rather than refused: every caller may
// do everything there, and a header cannot add to that.
func (a *Authenticator) forwarded(info Info, r *http.Request) (Info, bool, error) {
	values := r.Header.Values(ForwardHeader)
	if len(values) == 0 {
		return info, false, nil
	}
	if a.mayForward == nil || !a.mayForward(info.Principal) {
		if a.anonymous {
			return info, false, nil
		}
		out, err := refuse("%s may not send %s: only a Strata service that serves users (the gateway, a Kafka listener) may act for another principal", describe(info.Principal), ForwardHeader)
		return out, true, err
	}
	if len(values) > 1 {
		out, err := refuse("more than one %s header", ForwardHeader)
		return out, true, err
	}
	p, err := acl.ParsePrincipal(values[0])
	if err != nil || p.IsWildcard() || p.IsService() {
		// A door acts for the users it serves; a service acts as itself.
		out, err := refuse("%s names no principal a user can be", ForwardHeader)
		return out, true, err
	}
	return Info{Principal: p, Method: MethodForwarded, Via: info.Principal}, true, nil
}

// describe names a caller in a refusal: its principal, or "a caller
// without credentials".
func describe(p acl.Principal) string {
	if p.IsZero() || p == acl.Anonymous {
		return "a caller without credentials"
	}
	return p.String()
}
