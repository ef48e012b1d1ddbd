package authn

import (
	"context"

	connectauthn "connectrpc.com/authn"

	"github.com/strata-mq/strata/lib/acl"
)

// Method says how a request's principal was established.
type Method uint8

const (
	MethodAnonymous   Method = iota + 1 // no credentials, AllowAnonymous
	MethodCertificate                   // a verified client certificate
	MethodToken                         // a Strata bearer token
	MethodOIDC                          // an OIDC JWT
	// MethodForwarded: a Strata service that serves users (the gateway,
	// a Kafka listener) sent the request for the principal it names
	// (forward.go); Info.Via is that service.
	MethodForwarded
)

var methodNames = [...]string{
	MethodAnonymous: "anonymous", MethodCertificate: "certificate", MethodToken: "token", MethodOIDC: "oidc",
	MethodForwarded: "forwarded",
}

// String returns "anonymous", "certificate", "token", "oidc" or
// "forwarded" ("" for the zero Method).
func (m Method) String() string {
	if m >= MethodAnonymous && m <= MethodForwarded {
		return methodNames[m]
	}
	return ""
}

// Info is what authentication learned about a request.
type Info struct {
	// Principal is who sent it.
	Principal acl.Principal
	// Method is how that was established.
	Method Method
	// Via is the Strata service that forwarded the request for
	// Principal (MethodForwarded); zero when the caller sent it itself.
	Via acl.Principal
}

// NewContext returns ctx carrying info, as the middleware leaves it for
// handlers; tests of handlers use it to act as a principal.
func NewContext(ctx context.Context, info Info) context.Context {
	return connectauthn.SetInfo(ctx, info)
}

// FromContext returns the Info the middleware attached to a request's
// context, and false when there is none (a handler not behind Wrap).
func FromContext(ctx context.Context) (Info, bool) {
	info, ok := connectauthn.GetInfo(ctx).(Info)
	return info, ok
}

// PrincipalFrom returns the principal of the request ctx belongs to, and
// false when the request was not authenticated. A handler must treat
// false as a refusal, not as anonymous.
func PrincipalFrom(ctx context.Context) (acl.Principal, bool) {
	info, ok := FromContext(ctx)
	if !ok || info.Principal.IsZero() {
		return acl.Principal{}, false
	}
	return info.Principal, true
}
