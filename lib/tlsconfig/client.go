package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
)

// ClientConfig returns the config of a TLS client, for
// http.Transport.TLSClientConfig or tls.Dial. It presents s's current
// certificate when a server asks for one (none when s has no
// certificate), speaks TLS 1.3 (or 1.2 with [WithMinVersion]) and offers
// h2 and http/1.1 by ALPN.
//
// It verifies the server at every handshake, resumed or not, against the
// CA bundle current at that moment (the system's roots when s has none),
// for server authentication (ExtKeyUsageServerAuth):
//
//   - When the connection names its server (TLS's server name indication:
//     the URL's host when it is a DNS name), the certificate must be valid
//     for that name.
//   - A connection to an IP address carries no server name, so the
//     certificate must instead name a Strata service identity
//     ([IdentityOf]): only a Strata service answers on an IP address.
//   - When roles are given, the certificate must name a service identity
//     of one of them, whatever the address: a storage node calling the
//     controller passes RoleController, and a gateway or a user's
//     certificate from the same CA is refused.
//
// Verification runs in VerifyConnection (InsecureSkipVerify only turns
// off crypto/tls's own check, which would pin the CA bundle of the time
// the config was made), so the connection state's VerifiedChains is
// empty; its PeerCertificates were verified as above.
//
// Each call returns a new config the caller may modify (http.Transport
// adjusts NextProtos). A client that speaks HTTP/1.1 only sets NextProtos
// to "http/1.1" itself: http.Transport leaves ALPN alone when HTTP/2 is
// off, and the server would pick h2.
func (s *Source) ClientConfig(roles ...Role) *tls.Config {
	roles = slices.Clone(roles)
	return &tls.Config{
		MinVersion: s.opts.minVersion,
		NextProtos: nextProtos(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := s.cur.Load().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		InsecureSkipVerify: true, // verified by VerifyConnection, see above
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, s.cur.Load().pool, roles)
		},
	}
}

// verifyServer is ClientConfig's check of the server's certificate.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool, roles []Role) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconfig: the server presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots:         pool,
		DNSName:       cs.ServerName,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("tlsconfig: server certificate: %w", err)
	}
	if cs.ServerName != "" && len(roles) == 0 {
		return nil
	}
	id, err := identityOf(leaf)
	if err != nil {
		if cs.ServerName == "" {
			return fmt.Errorf("tlsconfig: server reached by IP address: its certificate must name a strata service identity: %s", bare(err))
		}
		return fmt.Errorf("tlsconfig: server certificate: %s", bare(err))
	}
	if len(roles) > 0 && !slices.Contains(roles, id.Role) {
		return fmt.Errorf("tlsconfig: server is %s; want a %s", id, joinRoles(roles))
	}
	return nil
}

func joinRoles(roles []Role) string {
	s := string(roles[0])
	for i, r := range roles[1:] {
		if i == len(roles)-2 {
			s += " or "
		} else {
			s += ", "
		}
		s += string(r)
	}
	return s
}
