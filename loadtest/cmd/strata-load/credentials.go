package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// credentials reach a cluster run with TLS and authentication, as the
// strata CLI's global flags do: --tls-ca, --tls-cert and --tls-key (or
// STRATA_TLS_CA, STRATA_TLS_CERT, STRATA_TLS_KEY) and --token
// (STRATA_TOKEN). The token is never printed: its flag's help shows no
// default, and no error quotes it.
type credentials struct {
	token                  string
	tlsCA, tlsCert, tlsKey string
}

func (c credentials) files() tlsconfig.Files {
	return tlsconfig.Files{Cert: c.tlsCert, Key: c.tlsKey, CA: c.tlsCA}
}

// clientOpts are the Go client's options for c.
func (c credentials) clientOpts() []client.Opt {
	var out []client.Opt
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

// adminHTTPClient is the HTTP client of the admin calls (topic create and
// delete) with c: TLS from the files, and the bearer token on every
// request. close stops watching the files.
func (c credentials) adminHTTPClient(ctx context.Context) (hc *http.Client, close func(), err error) {
	hc, close = serve.NewHTTPClient(), func() {}
	if c.files().Enabled() {
		src, err := tlsconfig.Load(ctx, c.files(), tlsconfig.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return nil, nil, err
		}
		hc, close = serve.NewTLSHTTPClient(src.ClientConfig()), func() { src.Close() }
	}
	if c.token != "" {
		hc.Transport = bearerTransport{next: hc.Transport, header: "Bearer " + c.token}
	}
	return hc, close, nil
}

// kafka is how franz-go reaches the Kafka listener at bootstrap with c:
// TLS from the files, and SASL OAUTHBEARER with the token. close stops
// watching the files.
func (c credentials) kafka(ctx context.Context, bootstrap string) (kc *kafkaConfig, close func(), err error) {
	kc, close = &kafkaConfig{bootstrap: bootstrap, token: c.token}, func() {}
	if c.files().Enabled() {
		src, err := tlsconfig.Load(ctx, c.files(), tlsconfig.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return nil, nil, err
		}
		kc.tls, close = src.ClientConfig(), func() { src.Close() }
	}
	return kc, close, nil
}

// bearerTransport adds the Authorization header to every request.
type bearerTransport struct {
	next   http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the request it is given
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

// producerOpts and consumerOpts are the credentials' options followed by
// more.
func (r *runner) producerOpts(more ...client.ProducerOpt) []client.ProducerOpt {
	var out []client.ProducerOpt
	for _, o := range r.copts {
		out = append(out, o)
	}
	return append(out, more...)
}

func (r *runner) consumerOpts(more ...client.ConsumerOpt) []client.ConsumerOpt {
	var out []client.ConsumerOpt
	for _, o := range r.copts {
		out = append(out, o)
	}
	return append(out, more...)
}
