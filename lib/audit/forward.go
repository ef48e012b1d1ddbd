package audit

import "net/http"

// A door (the gateway, the Kafka listener behind it) calls the owner of a
// change (the controller) under its own service identity, so the owner
// alone would write the door as the principal of every change made
// through it. The door therefore names its caller in this header, and
// the owner writes that name, and the door it came through, when (and
// only when) the request came from a Strata service identity: a user
// cannot set it for itself. It is used for the audit line only, never to
// authorize.
const ForwardedPrincipalHeader = "Strata-Audit-Principal"

// ForwardPrincipal names principal (the door's caller, "User:alice") on
// an outgoing request's header h. An empty principal sets nothing.
func ForwardPrincipal(h http.Header, principal string) {
	if principal != "" {
		h.Set(ForwardedPrincipalHeader, principal)
	}
}

// Attribute returns the principal an audit line names for a request made
// by caller with header h, and via, the service it came through (empty
// when the caller acted itself). callerIsService must be true only for a
// caller authenticated as a Strata service identity.
func Attribute(caller string, callerIsService bool, h http.Header) (principal, via string) {
	if !callerIsService || h == nil {
		return caller, ""
	}
	if fwd := h.Get(ForwardedPrincipalHeader); fwd != "" {
		return fwd, caller
	}
	return caller, ""
}
