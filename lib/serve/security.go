package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Security is the part of Base every service shares for transport
// security and authentication (docs/design/security.md). All of it is off
// by default: the plain cluster of make run, h2c on loopback, anonymous.
//
//   - With --tls-cert and --tls-key, the API and admin listeners speak TLS
//     (1.3), and the process presents that certificate when it calls other
//     services. --tls-client-ca verifies peers both ways: the client
//     certificates presented to this process, and the services it calls.
//     The files reload when they change.
//   - --require-auth makes every API request authenticate (a client
//     certificate, a bearer token the cluster issued, or an OIDC JWT) and
//     turns ACLs on. It needs TLS: credentials never travel in clear.
type Security struct {
	// TLS names the certificate, key and CA files (--tls-cert,
	// --tls-key, --tls-client-ca). Default empty: no TLS.
	TLS tlsconfig.Files
	// RequireAuth is --require-auth. Default false.
	RequireAuth bool
	// SuperUsers is --super-users: comma-separated principals allowed
	// everything, like Kafka's super.users. Default none.
	SuperUsers string
	// OIDCIssuer, OIDCJWKSURL, OIDCAudience and OIDCClaim accept bearer
	// JWTs from one OpenID Connect issuer (--oidc-issuer, --oidc-jwks-url,
	// --oidc-audience, --oidc-principal-claim). Default: no OIDC.
	OIDCIssuer, OIDCJWKSURL, OIDCAudience, OIDCClaim string
	// OIDCPrefix is --oidc-principal-prefix: OIDC principals are
	// User:<prefix><claim>, and token user names may not start with it.
	// Default "": the claim is the name (docs/security.md).
	OIDCPrefix string
	// AuditLog is --audit-log: a file the audit lines (lib/audit) are
	// appended to, created 0600. Default empty: they go to the process
	// log, marked "logger":"audit".
	AuditLog string
}

func (s *Security) registerFlags(f *Flags) {
	f.StringVar(&s.TLS.Cert, "tls-cert", s.TLS.Cert,
		"PEM certificate (chain) the listeners serve and the process presents to other services; with --tls-key, turns TLS on; reloaded when the file changes")
	f.StringVar(&s.TLS.Key, "tls-key", s.TLS.Key, "PEM private key of --tls-cert")
	f.StringVar(&s.TLS.CA, "tls-client-ca", s.TLS.CA,
		"PEM CA bundle that verifies client certificates and the services this process calls; empty: no client certificates, system roots")
	f.BoolVar(&s.RequireAuth, "require-auth", s.RequireAuth,
		"every request must authenticate (client certificate, token or OIDC JWT) and ACLs apply; needs --tls-cert")
	f.StringVar(&s.SuperUsers, "super-users", s.SuperUsers,
		"comma-separated principals allowed everything, e.g. User:admin")
	f.StringVar(&s.OIDCIssuer, "oidc-issuer", s.OIDCIssuer, "accept bearer JWTs from this OpenID Connect issuer (its iss)")
	f.StringVar(&s.OIDCJWKSURL, "oidc-jwks-url", s.OIDCJWKSURL, "the issuer's JWKS URL; empty: found by OIDC discovery")
	f.StringVar(&s.OIDCAudience, "oidc-audience", s.OIDCAudience, "the audience (aud) JWTs must carry; required with --oidc-issuer")
	f.StringVar(&s.OIDCClaim, "oidc-principal-claim", s.OIDCClaim, "JWT claim naming the user (principal User:<value>); default sub")
	f.StringVar(&s.OIDCPrefix, "oidc-principal-prefix", s.OIDCPrefix,
		"prefix of every OIDC principal's name (User:<prefix><claim>, e.g. oidc.); token user names may not start with it; default none")
	f.StringVar(&s.AuditLog, "audit-log", s.AuditLog,
		`append the audit log (authentication failures, denied requests, user, ACL and quota changes; one JSON line each) to this file; empty: the process log, marked "logger":"audit"`)
}

func (s *Security) validate(p *Problems) {
	if s.TLS.Enabled() {
		if (s.TLS.Cert == "") != (s.TLS.Key == "") {
			p.Flag("tls-key", s.TLS.Key, "give --tls-cert and --tls-key together")
		} else if s.TLS.Cert == "" {
			p.Flag("tls-client-ca", s.TLS.CA, "needs --tls-cert and --tls-key")
		} else {
			p.Add(s.TLS.Validate())
		}
	}
	if s.RequireAuth && !s.TLS.Enabled() {
		p.Flag("require-auth", s.RequireAuth, "needs --tls-cert and --tls-key: credentials must not travel in clear")
	}
	if _, err := acl.ParsePrincipals(s.SuperUsers); s.SuperUsers != "" && err != nil {
		p.Flag("super-users", s.SuperUsers, err.Error())
	}
	if (s.OIDCIssuer == "") != (s.OIDCAudience == "") {
		p.Flag("oidc-audience", s.OIDCAudience, "give --oidc-issuer and --oidc-audience together")
	}
	if s.OIDCJWKSURL != "" && s.OIDCIssuer == "" {
		p.Flag("oidc-jwks-url", s.OIDCJWKSURL, "needs --oidc-issuer")
	}
	if s.OIDCPrefix != "" && s.OIDCIssuer == "" {
		p.Flag("oidc-principal-prefix", s.OIDCPrefix, "needs --oidc-issuer")
	} else if s.OIDCPrefix != "" && acl.CheckName(s.OIDCPrefix) != nil {
		p.Flag("oidc-principal-prefix", s.OIDCPrefix, "use letters, digits and . _ - @ + / | =")
	}
}

// TLSEnabled reports whether the listeners speak TLS.
func (s *Security) TLSEnabled() bool { return s.TLS.Cert != "" }

// guardConfig turns the flags into a Guard's configuration.
func (s *Security) guardConfig() (guard.Config, error) {
	var supers []acl.Principal
	if strings.TrimSpace(s.SuperUsers) != "" {
		var err error
		if supers, err = acl.ParsePrincipals(s.SuperUsers); err != nil {
			return guard.Config{}, err
		}
	}
	cfg := guard.Config{RequireAuth: s.RequireAuth, SuperUsers: supers}
	if s.OIDCIssuer != "" {
		cfg.OIDC = &authn.OIDCConfig{IssuerURL: s.OIDCIssuer, JWKSURL: s.OIDCJWKSURL, Audience: s.OIDCAudience, PrincipalClaim: s.OIDCClaim, PrincipalPrefix: s.OIDCPrefix}
	}
	return cfg, nil
}

// startSecurity loads the TLS files (watching them) and builds the guard,
// before anything listens.
func (p *Process) startSecurity(ctx context.Context, s *Security) error {
	if s.TLSEnabled() {
		src, err := tlsconfig.Load(ctx, s.TLS, tlsconfig.WithLogger(p.logger))
		if err != nil {
			return err
		}
		p.tls = src
		p.client = NewTLSHTTPClient(src.ClientConfig())
		// A door's calls for a user carry the user's principal
		// (lib/guard's forward.go); only a process with a service
		// certificate can have them accepted.
		p.client.Transport = guard.ForwardingTransport(p.client.Transport)
	}
	cfg, err := s.guardConfig()
	if err != nil {
		return err
	}
	cfg.Logger = p.logger
	if cfg.Audit, err = p.startAudit(s.AuditLog); err != nil {
		return err
	}
	if p.guard, err = guard.New(ctx, cfg); err != nil {
		return fmt.Errorf("serve: security: %w", err)
	}
	if !s.RequireAuth {
		p.logger.Warn("no authentication: anyone who can reach the API may do anything (--require-auth turns it on); for local use only")
	}
	return nil
}

// serverTLS is the API and admin listeners' TLS: client certificates
// verified when given (users may authenticate with tokens instead).
func (p *Process) serverTLS() (*tls.Config, error) {
	if p.tls == nil {
		return nil, nil
	}
	return p.tls.ServerConfig(tlsconfig.VerifyClientCertIfGiven)
}

// Guard authenticates, authorizes and throttles the process's requests
// (lib/guard). Setup feeds it the security state (Guard.Apply); handlers
// ask it. Never nil once Setup runs.
func (p *Process) Guard() *guard.Guard { return p.guard }

// TLS is the process's certificate source, nil without TLS.
func (p *Process) TLS() *tlsconfig.Source { return p.tls }

// NewTLSHTTPClient is NewHTTPClient speaking HTTP/2 over TLS with cfg (the
// process's certificate presented, peers verified against its CA).
func NewTLSHTTPClient(cfg *tls.Config) *http.Client {
	c := NewHTTPClient()
	c.Transport.(*http.Transport).TLSClientConfig = cfg
	return c
}
