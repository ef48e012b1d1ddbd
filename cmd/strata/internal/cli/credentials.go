package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// credentials are the global flags that reach a secured cluster: the CA
// bundle that verifies its https:// servers, a client certificate, and a
// bearer token. Each has an environment variable, which the flag
// overrides; `source DIR/admin.env` after `strata dev --secure` sets the
// first three. The token is never printed: not in --help, not in errors.
type credentials struct {
	token    string // --token, STRATA_TOKEN
	tlsCA    string // --tls-ca, STRATA_TLS_CA
	tlsCert  string // --tls-cert, STRATA_TLS_CERT
	tlsKey   string // --tls-key, STRATA_TLS_KEY
	changed  bool   // a flag changed them since the transport was built
	prepared bool   // prepare ran
}

// credentialEnv names the environment variable of each credential flag.
var credentialEnv = map[string]string{
	"token":    "STRATA_TOKEN",
	"tls-ca":   "STRATA_TLS_CA",
	"tls-cert": "STRATA_TLS_CERT",
	"tls-key":  "STRATA_TLS_KEY",
}

// isCredentialFlag reports whether name is one of the credential flags.
func isCredentialFlag(name string) bool { _, ok := credentialEnv[name]; return ok }

// fromEnv reads the credentials' environment variables.
func (c *credentials) fromEnv(getenv func(string) string) {
	for name, env := range credentialEnv {
		if v := getenv(env); v != "" {
			c.set(name, v)
		}
	}
	c.changed = false
}

// set sets one credential flag.
func (c *credentials) set(name, val string) {
	switch name {
	case "token":
		c.token = val
	case "tls-ca":
		c.tlsCA = val
	case "tls-cert":
		c.tlsCert = val
	case "tls-key":
		c.tlsKey = val
	}
	c.changed = true
}

func (c *credentials) files() tlsconfig.Files {
	return tlsconfig.Files{Cert: c.tlsCert, Key: c.tlsKey, CA: c.tlsCA}
}

// transport is what every call of one command goes through.
type transport struct {
	http *http.Client
	opts []connect.ClientOption // the bearer token, when there is one
	src  *tlsconfig.Source      // the TLS files, nil without
}

// prepareTransport checks the credential flags and builds the transport,
// once the command's flags are parsed (flagSet.parse calls it). A problem
// with the files is one line naming the flag (--tls-ca "/x": no such file).
func (e *Env) prepareTransport() error {
	c := &e.creds
	if c.prepared && !c.changed {
		return nil
	}
	e.closeTransport()
	c.prepared, c.changed = true, false
	files := c.files()
	if files.Enabled() {
		if err := files.ValidateClient(); err != nil {
			return err
		}
	}
	if c.token != "" && strings.ContainsFunc(c.token, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return usagef("--token (STRATA_TOKEN) has spaces or characters an HTTP header cannot carry")
	}
	t := &transport{http: plainHTTPClient()}
	if files.Enabled() {
		// The CLI logs nothing of its own: a problem is its one error line.
		src, err := tlsconfig.Load(context.Background(), files, tlsconfig.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return err
		}
		t.src = src
		t.http = tlsHTTPClient(src.ClientConfig())
	}
	if c.token != "" {
		t.opts = append(t.opts, connect.WithInterceptors(bearer{header: "Bearer " + c.token}))
	}
	e.tr = t
	return nil
}

// closeTransport stops watching the TLS files. Safe to call twice.
func (e *Env) closeTransport() {
	if e.tr != nil && e.tr.src != nil {
		_ = e.tr.src.Close()
	}
	e.tr = nil
}

// transport returns the command's transport; a plain one for a command
// that parsed no flags.
func (e *Env) transport() *transport {
	if e.tr == nil {
		e.tr = &transport{http: plainHTTPClient()}
	}
	return e.tr
}

// clientOpts are the Go client's options for the credentials.
func (e *Env) clientOpts() []client.Opt {
	var out []client.Opt
	c := e.creds
	if c.tlsCA != "" {
		out = append(out, client.TLSCA(c.tlsCA))
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		out = append(out, client.ClientCertificate(c.tlsCert, c.tlsKey))
	}
	if c.token != "" {
		out = append(out, client.Token(c.token))
	}
	return out
}

// producerOpts and consumerOpts are clientOpts followed by more.
func (e *Env) producerOpts(more ...client.ProducerOpt) []client.ProducerOpt {
	var out []client.ProducerOpt
	for _, o := range e.clientOpts() {
		out = append(out, o)
	}
	return append(out, more...)
}

func (e *Env) consumerOpts(more ...client.ConsumerOpt) []client.ConsumerOpt {
	var out []client.ConsumerOpt
	for _, o := range e.clientOpts() {
		out = append(out, o)
	}
	return append(out, more...)
}

// bearer adds the Authorization header to every call. Its header is
// unexported, so printing a bearer shows nothing of the token.
type bearer struct{ header string }

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", b.header)
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", b.header)
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// String hides the token.
func (b bearer) String() string { return "Bearer [redacted]" }

// tlsFailure recognizes a TLS handshake that failed and says why in a few
// words, with the address it was with.
func tlsFailure(err error) (reason, addr string, ok bool) {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			addr = u.Scheme + "://" + u.Host
		}
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "its certificate is signed by an authority the CLI does not trust (is --tls-ca, STRATA_TLS_CA, the cluster's CA?)", addr, true
	case errors.As(err, &hostname):
		return oneLine(hostname.Error()), addr, true
	case errors.As(err, &invalid):
		return "its certificate is not valid: " + oneLine(invalid.Error()), addr, true
	case errors.As(err, &alert):
		return "the server refused the connection (" + oneLine(alert.Error()) + "): is --tls-cert issued by the cluster's CA?", addr, true
	case errors.As(err, &verify):
		return oneLine(verify.Error()), addr, true
	case errors.As(err, &header):
		return "the server does not speak TLS: use an http:// URL", addr, true
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the server does not speak TLS: use an http:// URL", addr, true
	case strings.Contains(err.Error(), "tlsconfig: server"):
		// lib/tlsconfig's check of a server reached by IP address.
		msg := err.Error()
		return oneLine(strings.TrimPrefix(msg[strings.Index(msg, "tlsconfig: server"):], "tlsconfig: ")), addr, true
	}
	return "", addr, false
}

// plainToTLS recognizes an http:// URL whose server speaks TLS (or no
// HTTP/2 at all): a TLS server drops a connection that opens with the
// HTTP/2 cleartext preface (the client sees a reset, an EOF or a
// connection that could not be set up, by timing), and an HTTP/1.1
// server answers it with an error page the client reads as a bad frame. addr is the server's
// host:port when the error names it. A reset counts only from the gateway
// at an http:// URL, so a storage node killed under a call is not taken
// for one.
func plainToTLS(err error, gateway string) (addr string, ok bool) {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Scheme == "http" {
			addr = u.Host
		}
	}
	fromGateway := (addr == "" || sameHost(addr, gateway)) && strings.HasPrefix(gateway, "http://")
	switch msg := err.Error(); {
	case strings.Contains(msg, "frame header looked like an HTTP/1.1 header"):
		return addr, true
	case fromGateway && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(msg, "http2: client conn could not be established")):
		return addr, true
	}
	return "", false
}
