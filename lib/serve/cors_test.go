package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestParseCORSOrigins(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{" , ", nil, false},
		{"*", []string{"*"}, false},
		{"http://localhost:*, https://app.example.com", []string{"http://localhost:*", "https://app.example.com"}, false},
		{"localhost:3000", nil, true},
		{"http://a/*", nil, true},
		{"http://*.*.example.com", nil, true},
		{"ftp://x", nil, true},
	} {
		got, err := ParseCORSOrigins(tt.in)
		if (err != nil) != tt.bad || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("ParseCORSOrigins(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestRunCORS(t *testing.T) {
	echo := func(ctx context.Context, p *Process) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }), nil
	}
	preflight := func(t *testing.T, url, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, url+"/strata.gateway.v1.GatewayService/Metadata", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		// Browsers send the requested headers lowercased and sorted.
		req.Header.Set("Access-Control-Request-Headers", "connect-protocol-version,connect-timeout-ms,content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	t.Run("off by default", func(t *testing.T) {
		r := start(t, &testConfig{}, nil, echo)
		r.waitReady(t)
		resp := preflight(t, r.p.URL(), "http://localhost:5173")
		if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Fatalf("CORS answered without being configured: %q", v)
		}
	})
	t.Run("allowed origins only", func(t *testing.T) {
		r := start(t, &testConfig{}, []string{"--cors-allowed-origins", "http://localhost:*"}, echo)
		r.waitReady(t)
		resp := preflight(t, r.p.URL(), "http://localhost:5173")
		if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "http://localhost:5173" {
			t.Fatalf("Allow-Origin %q", v)
		}
		if v := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")); !strings.Contains(v, "connect-protocol-version") {
			t.Fatalf("Allow-Headers %q", v)
		}
		if v := preflight(t, r.p.URL(), "http://evil.example").Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Fatalf("other origin allowed: %q", v)
		}
		req, _ := http.NewRequest(http.MethodPost, r.p.URL()+"/x", nil)
		req.Header.Set("Origin", "http://localhost:8080")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:8080" ||
			!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Grpc-Status") {
			t.Fatalf("actual request headers %v", resp.Header)
		}
	})
}
