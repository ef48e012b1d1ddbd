package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

const secretToken = "strata_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"

// TestCredentialFlags: --token comes from STRATA_TOKEN unless given, and
// --help never shows it; the TLS files are checked at start, in one line
// naming the flag.
func TestCredentialFlags(t *testing.T) {
	t.Setenv("STRATA_TOKEN", secretToken)
	t.Setenv("STRATA_TLS_CA", "")
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.creds.token != secretToken || len(o.creds.clientOpts()) != 1 {
		t.Errorf("token from STRATA_TOKEN: %q, %d client options", o.creds.token, len(o.creds.clientOpts()))
	}
	if o, err = parseFlags([]string{"--token", "other"}, &bytes.Buffer{}); err != nil || o.creds.token != "other" {
		t.Errorf("--token: %q, %v", o.creds.token, err)
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); err == nil || strings.Contains(help.String(), secretToken) ||
		!strings.Contains(help.String(), "-tls-ca") || !strings.Contains(help.String(), "-token") {
		t.Errorf("--help shows the token or lacks the credential flags (%v):\n%s", err, help.String())
	}

	missing := filepath.Join(t.TempDir(), "ca.pem")
	_, err = parseFlags([]string{"--tls-ca", missing, "--tls-cert", "/c.pem"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `--tls-ca "`+missing+`": no such file`) || !strings.Contains(err.Error(), "--tls-key: needed with --tls-cert") {
		t.Errorf("bad TLS files: %v", err)
	}
	t.Setenv("STRATA_TOKEN", secretToken+"\n")
	if _, err := parseFlags(nil, &bytes.Buffer{}); err == nil || strings.Contains(err.Error(), secretToken) {
		t.Errorf("a malformed token: %v", err)
	}
}

// TestAdminClientSendsTheToken: the admin calls carry the bearer token.
func TestAdminClientSendsTheToken(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // what Strata services serve, and the admin client speaks
	srv.Config.Protocols = &protos
	srv.Start()
	defer srv.Close()
	hc, done, err := credentials{token: secretToken}.adminHTTPClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h != "Bearer "+secretToken {
		t.Errorf("Authorization %q", h)
	}
	if req.Header.Get("Authorization") != "" {
		t.Error("the caller's request was changed")
	}
	if _, _, err := (credentials{tlsCA: "/nonexistent/ca.pem"}).adminHTTPClient(context.Background()); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a CA that does not load: %v", err)
	}
}
