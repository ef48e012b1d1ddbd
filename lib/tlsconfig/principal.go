package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// UserPrefix starts the string form of a user principal, as in Kafka:
// "User:alice". Part of the contract (ACLs name principals this way).
const UserPrefix = "User:"

// Principal is who a verified certificate speaks for: either a Strata
// service (Service set) or a user (User set, from the certificate's
// Subject CN). The zero Principal is "no certificate": the request
// authenticates some other way (a token), or not at all.
type Principal struct {
	// Service is the service identity; zero for a user.
	Service Identity
	// User is the user name; empty for a service.
	User string
}

// IsZero reports whether p is the zero Principal (no certificate).
func (p Principal) IsZero() bool { return p == Principal{} }

// IsService reports whether p is a Strata service.
func (p Principal) IsService() bool { return p.Service.Role != "" }

// String returns "User:<name>" for a user, the identity URI
// ("spiffe://strata/storage/3") for a service, and "" for the zero
// Principal.
func (p Principal) String() string {
	switch {
	case p.IsService():
		return p.Service.String()
	case p.User != "":
		return UserPrefix + p.User
	}
	return ""
}

// MaxUserLen is the longest user name taken from a certificate, in
// characters: X.509's upper bound for a common name.
const MaxUserLen = 64

// CheckUserName returns an error unless name is usable as a user
// principal's name: 1 to [MaxUserLen] printable characters (letters of any
// script, digits, punctuation, inner spaces), valid UTF-8, with no leading
// or trailing space.
func CheckUserName(name string) error {
	switch {
	case name == "":
		return errors.New("tlsconfig: empty user name")
	case !utf8.ValidString(name):
		return errors.New("tlsconfig: user name is not valid UTF-8")
	case utf8.RuneCountInString(name) > MaxUserLen:
		return fmt.Errorf("tlsconfig: user name longer than %d characters", MaxUserLen)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("tlsconfig: user name %q has leading or trailing space", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("tlsconfig: user name %q has a non-printable character", name)
		}
	}
	return nil
}

// PrincipalOf returns the principal a certificate speaks for:
//
//   - a service, when it carries a spiffe://strata URI SAN; that URI must
//     then be the only one and a valid identity (see [IdentityOf]), or the
//     certificate is refused, never read as a user's;
//   - otherwise a user named by its Subject CN (see [CheckUserName]);
//   - otherwise an error: a certificate naming neither is refused.
//
// PrincipalOf reads the certificate only: call it on a leaf whose chain
// was verified, or use [PeerPrincipal].
func PrincipalOf(cert *x509.Certificate) (Principal, error) {
	if cert == nil {
		return Principal{}, errors.New("tlsconfig: no certificate")
	}
	id, err := identityOf(cert)
	switch {
	case err == nil:
		return Principal{Service: id}, nil
	case !errors.Is(err, errNoIdentity):
		return Principal{}, err
	}
	cn := cert.Subject.CommonName
	if cn == "" {
		return Principal{}, errors.New("tlsconfig: certificate names neither a strata identity (URI SAN) nor a user (Subject CN)")
	}
	if err := CheckUserName(cn); err != nil {
		return Principal{}, fmt.Errorf("tlsconfig: certificate's Subject CN: %s", bare(err))
	}
	return Principal{User: cn}, nil
}

// PeerPrincipal returns the principal of the peer of a connection served
// with [Source.ServerConfig] (r.TLS in an HTTP handler): the zero
// Principal and nil when the peer presented no certificate, as a client
// that authenticates with a token does under [VerifyClientCertIfGiven];
// otherwise [PrincipalOf] the leaf of its first verified chain. Only
// verified chains are read, so a certificate the handshake did not verify
// (a server config that only requested one) never yields a principal. A
// nil cs (plain HTTP) gives the zero Principal.
func PeerPrincipal(cs *tls.ConnectionState) (Principal, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Principal{}, nil
	}
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Principal{}, errors.New("tlsconfig: peer certificate was not verified")
	}
	return PrincipalOf(cs.VerifiedChains[0][0])
}

// bare is err's message without the package prefix, to wrap in another.
func bare(err error) string { return strings.TrimPrefix(err.Error(), "tlsconfig: ") }
