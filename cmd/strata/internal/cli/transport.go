package cli

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// httpClient is the CLI's shared transport for admin calls: HTTP/2
// cleartext with prior knowledge, as the Strata services serve.
var httpClient = sync.OnceValue(func() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:         &protos,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
	}}
})
