package client

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// newHTTPClient returns the default transport: HTTP/2 cleartext with prior
// knowledge on http:// URLs, as every Strata service serves (see
// lib/serve.NewHTTPClient, whose settings it copies without pulling the
// service telemetry stack into the client module), HTTP/2 over TLS on
// https:// with tlsCfg (nil: Go's defaults), large flow-control windows
// for fetch responses, and PINGs that notice a dead node in about 30
// seconds. It has no overall timeout: each call is bounded by its context.
func newHTTPClient(tlsCfg *tls.Config) *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	return &http.Client{
		Transport: &http.Transport{
			Protocols: &protos,
			HTTP2: &http.HTTP2Config{
				MaxReceiveBufferPerConnection: 16 << 20,
				MaxReceiveBufferPerStream:     4 << 20,
				SendPingTimeout:               15 * time.Second,
				PingTimeout:                   15 * time.Second,
			},
			DialContext: (&net.Dialer{
				Timeout:   5 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			IdleConnTimeout:     5 * time.Minute,
			TLSClientConfig:     tlsCfg,
			TLSHandshakeTimeout: 10 * time.Second,
			ForceAttemptHTTP2:   true,
		},
	}
}
