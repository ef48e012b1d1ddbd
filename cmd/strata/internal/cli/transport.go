package cli

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// plainHTTPClient is the CLI's shared transport for calls to a cluster
// without TLS: HTTP/2 cleartext with prior knowledge, as the Strata
// services serve.
var plainHTTPClient = sync.OnceValue(func() *http.Client { return newHTTPClient(nil) })

// tlsHTTPClient speaks HTTP/2 over TLS with cfg on https:// URLs (and
// cleartext HTTP/2 on http:// ones).
func tlsHTTPClient(cfg *tls.Config) *http.Client { return newHTTPClient(cfg) }

func newHTTPClient(cfg *tls.Config) *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           &protos,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
	}}
}
