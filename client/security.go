package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Transport security and credentials (docs/design/security.md): a cluster
// run with TLS serves https:// URLs, and one run with --require-auth wants
// every call to say who makes it, by a client certificate or a bearer
// token. The options below configure the client's default transport and
// add the token to every call; none of them changes anything for a plain
// cluster's http:// URLs.

// TLSCA sets the PEM CA bundle that verifies the servers the client calls
// over https:// (the gateway, storage nodes, the group coordinator),
// instead of the system's roots. The file is read when NewProducer or
// NewConsumer is called and read again when it changes, so a rotated CA
// applies to new connections without a restart.
//
// A server reached by a DNS name must hold a certificate for that name; one
// reached by an IP address (strata dev's https://127.0.0.1:9092) must hold
// a certificate naming a Strata service identity (spiffe://strata/<role>),
// since only a Strata service answers on an IP address. Default: none (the
// system's roots); "" keeps the default. It configures the default
// transport, so it cannot be combined with HTTPClient or TLSConfig.
func TLSCA(pemFile string) Opt {
	return commonOpt(func(c *config) { c.tlsFiles.CA = pemFile })
}

// ClientCertificate presents the PEM certificate (chain) in certFile, with
// its private key in keyFile, to servers that ask for one: the cluster
// then knows the caller as User:<the certificate's CN>. Both files are
// read when NewProducer or NewConsumer is called and again when they
// change (a renewed certificate applies to new connections). Default:
// none. It configures the default transport, so it cannot be combined with
// HTTPClient or TLSConfig.
func ClientCertificate(certFile, keyFile string) Opt {
	return commonOpt(func(c *config) { c.tlsFiles.Cert, c.tlsFiles.Key, c.clientCertSet = certFile, keyFile, true })
}

// TLSConfig sets the TLS configuration of the default transport for
// https:// URLs, for what TLSCA and ClientCertificate do not cover (an
// in-memory certificate, a custom verification). The client uses a clone;
// HTTP/2 is negotiated by ALPN. Default: Go's defaults (the system's
// roots, no client certificate); nil keeps the default. It cannot be
// combined with TLSCA, ClientCertificate or HTTPClient.
func TLSConfig(cfg *tls.Config) Opt {
	return commonOpt(func(c *config) {
		c.tlsConfig = nil
		if cfg != nil {
			c.tlsConfig = cfg.Clone()
		}
	})
}

// Token sets the bearer token sent on every call, as the header
// "Authorization: Bearer <token>": a token the cluster issued (strata user
// create prints it) or an OIDC JWT the cluster accepts. It is sent on
// http:// URLs too, where anyone on the path can read it: use it with
// https://. The client never logs it, and its errors never contain it.
// Default: none; "" keeps none.
func Token(token string) Opt {
	return commonOpt(func(c *config) { c.token = newSecret(token) })
}

// secret holds a credential behind a pointer, so that a config printed by
// fmt (which cannot call methods on unexported fields) shows an address,
// not the credential; String redacts it for everything else.
type secret struct{ text *string }

func newSecret(s string) secret {
	if s == "" {
		return secret{}
	}
	return secret{&s}
}

func (s secret) set() bool { return s.text != nil }

// String returns "[redacted]" for a set secret and "" for none.
func (s secret) String() string {
	if s.text == nil {
		return ""
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (s secret) GoString() string { return s.String() }

// validateSecurity adds the security options' problems to errs. No problem
// quotes the token.
func (c *config) validateSecurity() []error {
	var errs []error
	files := c.tlsFiles.Enabled()
	if c.httpClient != nil && (files || c.tlsConfig != nil) {
		errs = append(errs, errors.New("client: option HTTPClient cannot be combined with TLSCA, ClientCertificate or TLSConfig: set TLS on the HTTP client given"))
	}
	if c.tlsConfig != nil && files {
		errs = append(errs, errors.New("client: option TLSConfig cannot be combined with TLSCA or ClientCertificate: put the CA and certificate in the config"))
	}
	if c.clientCertSet && (c.tlsFiles.Cert == "" || c.tlsFiles.Key == "") {
		errs = append(errs, errors.New("client: option ClientCertificate needs both a certificate file and a key file"))
	}
	if c.token.set() {
		if t := *c.token.text; strings.TrimSpace(t) != t || strings.ContainsFunc(t, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			errs = append(errs, errors.New("client: option Token: the token has spaces or characters an HTTP header cannot carry (the token itself is not shown)"))
		}
	}
	return errs
}

// openTransport builds the HTTP client every call uses: the one given with
// HTTPClient, else the default transport with the TLS options, whose files
// it loads and starts watching (closeTransport stops that). It is called
// once, after validate.
func (c *config) openTransport() error {
	switch {
	case c.httpClient != nil:
		c.httpc = c.httpClient
	case c.tlsConfig != nil:
		c.httpc = newHTTPClient(c.tlsConfig.Clone())
	case c.tlsFiles.Enabled():
		// The client logs nothing: a file that stops loading keeps the
		// last good one in use, and a handshake that fails says why.
		src, err := tlsconfig.Load(context.Background(), c.tlsFiles, tlsconfig.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return fmt.Errorf("client: TLS files: %s", strings.TrimPrefix(err.Error(), "tlsconfig: "))
		}
		c.tlsSource = src
		c.httpc = newHTTPClient(src.ClientConfig())
	default:
		c.httpc = newHTTPClient(nil)
	}
	return nil
}

// closeTransport stops watching the TLS files. Safe to call twice.
func (c *config) closeTransport() {
	if c.tlsSource != nil {
		_ = c.tlsSource.Close()
	}
}

// bearerInterceptor adds "Authorization: Bearer <token>" to every call.
type bearerInterceptor struct{ header secret }

func newBearerInterceptor(token secret) bearerInterceptor {
	return bearerInterceptor{header: newSecret("Bearer " + *token.text)}
}

func (i bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			req.Header().Set("Authorization", *i.header.text)
		}
		return next(ctx, req)
	}
}

func (i bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", *i.header.text)
		return conn
	}
}

func (i bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
