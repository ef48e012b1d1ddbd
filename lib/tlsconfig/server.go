package tlsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
)

// nextProtos is the ALPN list of every config: HTTP/2 first (Connect's
// streams need it), HTTP/1.1 for curl and browsers without it.
func nextProtos() []string { return []string{"h2", "http/1.1"} }

// ClientAuth is what a server asks of its clients' certificates.
type ClientAuth int

const (
	// VerifyClientCertIfGiven asks clients for a certificate and verifies
	// the one presented against the CA bundle, but lets a client present
	// none: it then authenticates otherwise (a token). For listeners that
	// serve users. Without a CA bundle no certificate is asked for.
	VerifyClientCertIfGiven ClientAuth = iota + 1
	// RequireClientCert refuses a client that presents no certificate the
	// CA bundle verifies. For listeners only services call. It needs a CA
	// bundle.
	RequireClientCert
)

// String returns "verify-if-given" or "require".
func (a ClientAuth) String() string {
	switch a {
	case VerifyClientCertIfGiven:
		return "verify-if-given"
	case RequireClientCert:
		return "require"
	}
	return fmt.Sprintf("ClientAuth(%d)", int(a))
}

// ServerConfig returns the config of a TLS listener serving s's
// certificate, for http.Server.TLSConfig or tls.NewListener. Each
// handshake gets the certificate and CA bundle current at that moment
// (through GetConfigForClient), so a reload applies to new connections.
// The config speaks TLS 1.3 (or 1.2 with [WithMinVersion]) and offers h2
// and http/1.1 by ALPN. Client certificates are asked for and verified as
// auth says, for client authentication (ExtKeyUsageClientAuth); a
// handler reads the client's principal with [PeerPrincipal](r.TLS).
//
// A resumed session (TLS session tickets) is accepted only when the
// client's chain still ends at a CA of the current bundle: crypto/tls
// checks a resumption against the config of that handshake, so a CA
// removed from the bundle locks its certificates out of new connections,
// resumed or not.
//
// Every handshake offers h2 and http/1.1, whatever NextProtos the caller
// sets on the returned config: serve it with HTTP/2 on (lib/serve always
// does).
//
// It fails when s has no certificate, or auth is RequireClientCert and s
// has no CA bundle. Each call returns a new config.
func (s *Source) ServerConfig(auth ClientAuth) (*tls.Config, error) {
	m := s.cur.Load()
	switch {
	case auth != VerifyClientCertIfGiven && auth != RequireClientCert:
		return nil, fmt.Errorf("tlsconfig: unknown client auth mode %v", auth)
	case m.cert == nil:
		return nil, errors.New("tlsconfig: a server needs a certificate and key")
	case auth == RequireClientCert && m.pool == nil:
		return nil, errors.New("tlsconfig: requiring client certificates needs a CA bundle to verify them")
	}
	// The per-handshake config is built once per loaded material and
	// reused until the next reload.
	type built struct {
		m   *material
		cfg *tls.Config
	}
	var cache atomic.Pointer[built]
	forHandshake := func() *tls.Config {
		m := s.cur.Load()
		if b := cache.Load(); b != nil && b.m == m {
			return b.cfg
		}
		b := &built{m: m, cfg: s.handshakeServerConfig(m, auth)}
		cache.Store(b)
		return b.cfg
	}
	return &tls.Config{
		MinVersion: s.opts.minVersion,
		NextProtos: nextProtos(),
		// GetCertificate serves the current certificate should a caller
		// replace GetConfigForClient; normally the config below is used.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return forHandshake(), nil
		},
	}, nil
}

// handshakeServerConfig is the config of the handshakes served while m is
// current. Session ticket keys are left unset, so crypto/tls uses (and
// rotates) those of the listener's config.
func (s *Source) handshakeServerConfig(m *material, auth ClientAuth) *tls.Config {
	c := &tls.Config{
		MinVersion:   s.opts.minVersion,
		NextProtos:   nextProtos(),
		Certificates: []tls.Certificate{*m.cert},
	}
	if m.pool != nil {
		c.ClientCAs = m.pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if auth == RequireClientCert {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c
}
